"""Compare a spec's desired state with the managed part of a catalog: ordered changes.

Order: namespace renames, namespace creates and alters; table renames, view renames; table
creates, alters and replacements; view creates and replacements (a view after the views it
reads); then drops of views, tables, namespaces. Within each group objects sort by name, so
the same inputs always give the same plan.

Comparison is normalised — type spellings are canonical, property maps compare as maps, SQL
ignores surrounding whitespace, column ids are not compared, column order is a change of
its own — so a spec that was applied plans to no changes. Renames come only from
``renamed_from`` hints.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import CatalogReader
from olympia.exceptions import InvalidNameError, SpecError
from olympia.plan.changes import Change, column_text, detail, op, property_details
from olympia.plan.state import Current, Observed
from olympia.spec.model import Key, NamespaceSpec, Spec, TableSpec, ViewSpec
from olympia.spec.yamlpos import Problem

_INT_WIDTH = {"int1": 1, "int2": 2, "int4": 3, "int8": 4}
UNPROTECT = "removes protection"


def check_names(reader: CatalogReader, spec: Spec) -> None:
    """Every declared name fits this catalog's name limits (the loader knows only the
    format's default ones)."""
    problems = []
    items: list[tuple[ObjectRef, Any]] = [
        (ObjectRef(ObjectType.NAMESPACE, n), s) for n, s in spec.namespaces.items()]
    items += [(ObjectRef(ObjectType.TABLE, *k), s) for k, s in spec.tables.items()]
    items += [(ObjectRef(ObjectType.VIEW, *k), s) for k, s in spec.views.items()]
    for ref, item in items:
        try:
            reader.codec.key(ref)
        except InvalidNameError as exc:
            problems.append(Problem(item.position, str(exc)))
    for ref_ns, ref_name in spec.external_references():
        try:
            reader.codec.key(ObjectRef(ObjectType.TABLE, ref_ns, ref_name))
        except InvalidNameError as exc:
            problems.append(Problem(_reference_position(spec, (ref_ns, ref_name)), str(exc)))
    if problems:
        raise SpecError([str(p) for p in sorted(problems)])


def _reference_position(spec: Spec, ref: Key) -> Any:
    return next(where for v in spec.views.values()
                for r, where in zip(v.view.referenced_objects, v.reference_positions,
                                    strict=True) if r == ref)


def _name(ns: str, obj: str = "") -> str:
    return f"{ns}.{obj}" if obj else ns


def _protected(kind: str, name: str, protected: bool) -> str:
    return (f"{kind} {name} is protected in the catalog; to drop it, first apply a spec that "
            "sets protected: false") if protected else ""


class Differ:
    """One comparison of ``spec`` with ``current`` (the managed namespaces of a version)."""

    def __init__(self, spec: Spec, current: Current, observed: Observed) -> None:
        self.spec = spec
        self.current = current
        self.observed = observed
        self.problems: list[Problem] = []

    def problem(self, position: Any, message: str) -> None:
        self.problems.append(Problem(position, message))

    def changes(self) -> list[Change]:
        spec = self.spec
        self._check_references()
        moved = self._namespace_renames()  # old -> new
        tables = {(moved.get(ns, ns), n): replace(t, namespace=moved.get(ns, ns))
                  for (ns, n), t in self.current.tables.items()}
        views = {(moved.get(ns, ns), n): replace(v, namespace=moved.get(ns, ns))
                 for (ns, n), v in self.current.views.items()}
        out = [self._namespace_rename(new, old) for old, new in sorted(
            moved.items(), key=lambda item: item[1])]
        for name in sorted(spec.namespaces):
            out += self._namespace(spec.namespaces[name], moved)
        table_renames = self._renames("table", spec.tables, tables, views)
        view_renames = self._renames("view", spec.views, views, tables)
        out += [c for c, _ in table_renames.values()] + [c for c, _ in view_renames.values()]
        tables = _renamed(tables, table_renames)
        views = _renamed(views, view_renames)
        claimed_views: set[Key] = set()
        for key in sorted(spec.tables):
            out += self._table(spec.tables[key], tables.get(key), views.get(key))
            if key not in tables and key in views:
                claimed_views.add(key)
        view_changes: dict[Key, Change] = {}
        claimed_tables: set[Key] = set()
        for key in sorted(spec.views):
            view_changes.update((key, c) for c in self._view(spec.views[key], views.get(key),
                                                              tables.get(key)))
            if key not in views and key in tables:
                claimed_tables.add(key)
        out += _reading_order(view_changes, spec)
        dropped_views = [k for k in sorted(views) if k not in spec.views
                         and k not in claimed_views]
        dropped_tables = [k for k in sorted(tables) if k not in spec.tables
                          and k not in claimed_tables]
        out += [self._drop("view", k, views[k]) for k in dropped_views]
        out += [self._drop("table", k, tables[k]) for k in dropped_tables]
        blocked_in = {k[0] for k in dropped_views if views[k].protected} | {
            k[0] for k in dropped_tables if tables[k].protected}
        for ns in sorted(set(self.current.namespaces) - set(moved) - set(spec.namespaces)):
            namespace = self.current.namespaces[ns]
            blocked = _protected("namespace", ns, namespace.protected) or (
                f"namespace {ns} holds protected objects" if ns in blocked_in else "")
            out.append(Change("drop", "namespace", ns, ops=[op("drop_namespace", namespace=ns)],
                              reasons=[f"drops namespace {ns}"], blocked=blocked))
        if self.problems:
            raise SpecError([str(p) for p in sorted(self.problems)])
        return out

    # --- checks -------------------------------------------------------------------------

    def _check_references(self) -> None:
        """References outside the declared namespaces must exist and must not be in a
        namespace the spec manages by pattern (it would be dropped)."""
        declared = self.spec.declared_namespaces()
        for (ns, name), item in self.spec.views.items():
            for ref, where in zip(item.view.referenced_objects, item.reference_positions,
                                  strict=True):
                if ref[0] in declared:
                    continue  # checked by the loader
                message = ""
                if ref[0] in self.observed.rows:
                    message = (f"namespace {ref[0]} is managed by a manage pattern but not "
                               "declared, so this plan drops it; declare it or narrow the "
                               "pattern")
                elif not self.observed.references.get(ref):
                    message = "neither the spec declares it nor the catalog has it"
                if message:
                    self.problem(where, f"view {ns}.{name} references {_name(*ref)}: {message}")

    # --- namespaces ---------------------------------------------------------------------

    def _namespace_renames(self) -> dict[str, str]:
        moved: dict[str, str] = {}
        current = self.current.namespaces
        for name, item in sorted(self.spec.namespaces.items()):
            old = item.renamed_from
            if old is None or old not in current:
                continue
            if name in current:
                self.problem(item.position, f"renamed_from {old}: namespaces {old} and {name} "
                             f"both exist in the catalog; remove the hint to keep {name} (and "
                             f"drop {old}), or drop {name} first")
                continue
            moved[old] = name
        return moved

    def _namespace_rename(self, new: str, old: str) -> Change:
        return Change("rename", "namespace", new, old, details=[detail("name", old, new)],
                      ops=[op("rename_namespace", namespace=old, new_name=new)],
                      source=str(self.spec.namespaces[new].position))

    def _namespace(self, item: NamespaceSpec, moved: Mapping[str, str]) -> list[Change]:
        desired = item.namespace
        name = desired.name
        old = next((o for o, n in moved.items() if n == name), name)
        existing = self.current.namespaces.get(old)
        if existing is None:
            return [Change(
                "create", "namespace", name, source=str(item.position),
                details=_new_attributes(Namespace(name), desired, ("comment", "protected"))
                + property_details({}, desired.properties),
                ops=[op("create_namespace", namespace=name,
                        properties=dict(sorted(desired.properties.items())),
                        comment=desired.comment, protected=desired.protected)])]
        args, details, reasons = _alter_common(existing, desired, name)
        if not args:
            return []
        return [Change("update", "namespace", name, details=details, reasons=reasons,
                       ops=[op("alter_namespace", namespace=name, **args)],
                       source=str(item.position))]

    # --- tables and views ---------------------------------------------------------------

    def _renames(self, kind: str, declared: Mapping[Key, TableSpec | ViewSpec],
                 same: Mapping[Key, Table | View], other: Mapping[Key, Table | View],
                 ) -> dict[Key, tuple[Change, Key]]:
        """Renames by hint: old key -> (the change, new key)."""
        out: dict[Key, tuple[Change, Key]] = {}
        other_kind = "view" if kind == "table" else "table"
        for key in sorted(declared):
            item = declared[key]
            ns, name = key
            old = item.renamed_from
            if old is None:
                continue
            source = (ns, old)
            if source in same:
                if key in same or key in other:
                    self.problem(item.position, f"renamed_from {old}: {ns}.{old} and {ns}.{name}"
                                 f" both exist in the catalog; remove the hint to keep "
                                 f"{ns}.{name} (and drop {ns}.{old}), or drop {ns}.{name} first")
                    continue
                out[source] = (Change(
                    "rename", kind, _name(ns, name), _name(ns, old),
                    details=[detail("name", old, name)],
                    ops=[op(f"rename_{kind}", identifier=[ns, old], new_name=name)],
                    source=str(item.position)), key)
            elif source in other:
                self.problem(item.position, f"renamed_from {old}: {ns}.{old} is a {other_kind}, "
                             f"not a {kind}")
        return out

    def _drop(self, kind: str, key: Key, obj: Table | View) -> Change:
        name = _name(*key)
        return Change("drop", kind, name, ops=[op(f"drop_{kind}", identifier=list(key))],
                      reasons=[f"drops {kind} {name}"],
                      blocked=_protected(kind, name, obj.protected))

    def _replacement(self, kind: str, item: TableSpec | ViewSpec, gone: Table | View,
                     gone_kind: str, create: dict[str, Any],
                     details: list[dict[str, Any]]) -> Change:
        name = _name(gone.namespace, gone.name)
        return Change("replace", kind, name, name if gone_kind != kind else "",
                      details=details, reasons=[f"drops {gone_kind} {name} and creates it anew"],
                      blocked=_protected(gone_kind, name, gone.protected),
                      ops=[op(f"drop_{gone_kind}", identifier=[gone.namespace, gone.name]),
                           create], source=str(item.position))

    def _table(self, item: TableSpec, current: Table | None, view: View | None,
               ) -> list[Change]:
        desired = item.table
        name = _name(desired.namespace, desired.name)
        create = op("create_table", **_table_args(desired))
        if current is None:
            details = _new_attributes(Table(desired.namespace, desired.name), desired,
                                      ("comment", "protected", "format", "table_type",
                                       "location"))
            details += property_details({}, desired.properties)
            details += property_details({}, desired.format_properties, "format_properties")
            details += [detail(f"column {c.name}", None, column_text(c), text=True)
                        for c in desired.columns]
            if view is not None:
                return [self._replacement("table", item, view, "view", create,
                                          [detail("type", "view", "table"), *details])]
            return [Change("create", "table", name, details=details, ops=[create],
                           source=str(item.position))]
        if (current.format, current.table_type) != (desired.format, desired.table_type):
            return [self._replacement("table", item, current, "table", create,
                                      _attribute_details(current, desired,
                                                         ("format", "table_type")))]
        args, details, reasons = _alter_common(current, desired, name)
        if item.manages_location and current.location != desired.location:
            args["location"] = desired.location
            details.append(detail("location", current.location, desired.location))
        if item.manages_format_properties and (
                dict(current.format_properties) != dict(desired.format_properties)):
            args["format_properties"] = dict(sorted(desired.format_properties.items()))
            details += property_details(current.format_properties, desired.format_properties,
                                        "format_properties")
        column_args, column_details, column_reasons = self._columns(item, current)
        args.update(column_args)
        if not args:
            return []
        return [Change("update", "table", name, details=details + column_details,
                       reasons=reasons + column_reasons,
                       ops=[op("alter_table", identifier=[desired.namespace, desired.name],
                               **args)], source=str(item.position))]

    def _columns(self, item: TableSpec, current: Table,
                 ) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        desired = item.table
        cur = {c.name: c.without_ids() for c in current.columns}
        want = {c.name: c for c in desired.columns}
        rename: dict[str, str] = {}  # old -> new
        for new, old in item.column_renames.items():
            if old not in cur:
                continue  # already renamed: the hint is history now
            if new in cur:
                self.problem(item.position, f"column {new} renamed_from {old}: both columns "
                             f"exist in {desired.namespace}.{desired.name}; remove the hint to "
                             f"keep {new} (and remove {old}), or remove {new} first")
                continue
            rename[old] = new
        removed = [n for n in cur if rename.get(n, n) not in want]
        kept = {rename.get(n, n): c for n, c in cur.items() if n not in removed}
        added = [c for c in desired.columns if c.name not in kept]
        details = [detail(f"column {old}", old, new, rename=True) for old, new in rename.items()]
        details += [detail(f"column {n}", column_text(cur[n]), None, text=True)
                    for n in removed]
        reasons = [f"removes column {n}" for n in removed]
        updates: dict[str, Any] = {}
        for col in desired.columns:
            before = kept.get(col.name)
            if before is None:
                details.append(detail(f"column {col.name}", None, column_text(col), text=True))
                continue
            before = replace(before, name=col.name)
            if before == col:
                continue
            updates[col.name] = col.to_dict()
            column_details = _column_details(before, col)
            if not is_safe_change(before, col):
                column_details[0]["incompatible"] = True
                reasons.append(f"changes column {col.name} incompatibly "
                               f"({column_text(before)} -> {column_text(col)})")
            details += column_details
        order_now = [n for n in kept] + [c.name for c in added]
        order_want = [c.name for c in desired.columns]
        args: dict[str, Any] = {}
        if removed:
            args["remove_columns"] = removed
        if rename:
            args["rename_columns"] = rename
        if updates:
            args["update_columns"] = updates
        if added:
            args["add_columns"] = [c.to_dict() for c in added]
        if order_now != order_want:
            args["column_order"] = order_want
            details.append(detail("column order", order_now, order_want))
        return args, details, reasons

    def _view(self, item: ViewSpec, current: View | None, table: Table | None,
              ) -> list[Change]:
        desired = item.view
        name = _name(desired.namespace, desired.name)
        ident = [desired.namespace, desired.name]
        if current is None:
            details = _new_attributes(View(desired.namespace, desired.name, ""), desired,
                                      ("comment", "protected", "dialect", "default_namespace"))
            if desired.referenced_objects:
                details.append(detail("references", None,
                                      [_name(*r) for r in desired.referenced_objects]))
            if desired.columns:
                details.append(detail("columns", None, [f"{c.name}: {column_text(c)}"
                                                        for c in desired.columns]))
            details += property_details({}, desired.properties)
            details.append(detail("sql", None, desired.sql))
            create = op("create_view", identifier=ident, **_view_args(desired))
            if table is not None:
                return [self._replacement("view", item, table, "table", create,
                                          [detail("type", "table", "view"), *details])]
            return [Change("create", "view", name, details=details, ops=[create],
                           source=str(item.position))]
        if _comparable(current) == _comparable(desired):
            return []
        details = _attribute_details(current, desired, ("dialect", "default_namespace",
                                                        "comment", "protected"))
        if current.sql.strip() != desired.sql.strip():
            details.append(detail("sql", current.sql.strip(), desired.sql))
        if current.referenced_objects != desired.referenced_objects:
            details.append(detail("references", [_name(*r) for r in current.referenced_objects],
                                  [_name(*r) for r in desired.referenced_objects]))
        if tuple(c.without_ids() for c in current.columns) != desired.columns:
            details.append(detail("columns", [f"{c.name}: {column_text(c)}"
                                              for c in current.columns],
                                  [f"{c.name}: {column_text(c)}" for c in desired.columns]))
        details += property_details(current.properties, desired.properties)
        reasons = [UNPROTECT] if current.protected and not desired.protected else []
        return [Change("update", "view", name, details=details, reasons=reasons,
                       ops=[op("replace_view", identifier=ident, **_view_args(desired))],
                       source=str(item.position))]


def compute_changes(spec: Spec, current: Current, observed: Observed) -> list[Change]:
    """The ordered changes that turn ``current`` into what ``spec`` declares."""
    return Differ(spec, current, observed).changes()


# --- helpers ---------------------------------------------------------------------------------


def _renamed(objects: dict[Key, Any], renames: Mapping[Key, tuple[Change, Key]],
             ) -> dict[Key, Any]:
    out = dict(objects)
    for old, (_, new) in renames.items():
        out[new] = replace(out.pop(old), name=new[1])
    return out


def _new_attributes(default: Any, new: Any, attrs: tuple[str, ...]) -> list[dict[str, Any]]:
    """Attributes of a new object that differ from the defaults, shown as additions."""
    return [detail(a, None, getattr(new, a)) for a in attrs
            if getattr(default, a) != getattr(new, a)]


def _attribute_details(before: Any, after: Any, attrs: tuple[str, ...]) -> list[dict[str, Any]]:
    return [detail(a, getattr(before, a), getattr(after, a)) for a in attrs
            if getattr(before, a) != getattr(after, a)]


def _alter_common(before: Namespace | Table, after: Namespace | Table, name: str,
                  ) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """Property, comment and protection changes shared by namespaces and tables: the alter
    arguments (only what changes), the details and the destructive reasons."""
    args: dict[str, Any] = {}
    set_props = {k: v for k, v in sorted(after.properties.items())
                 if before.properties.get(k) != v}
    unset = sorted(set(before.properties) - set(after.properties))
    if set_props:
        args["set_properties"] = set_props
    if unset:
        args["unset_properties"] = unset
    details = property_details(before.properties, after.properties)
    details += _attribute_details(before, after, ("comment", "protected"))
    if before.comment != after.comment:
        args["comment"] = after.comment
    reasons = []
    if before.protected != after.protected:
        args["protected"] = after.protected
        if before.protected:
            reasons.append(UNPROTECT)
    return args, details, reasons


def _column_details(before: Column, after: Column) -> list[dict[str, Any]]:
    """How one column changes: its type text, comment and properties; when only something
    nested differs (a field's comment), its whole definition."""
    attr = f"column {after.name}"
    out = []
    if column_text(before) != column_text(after):
        out.append(detail(attr, column_text(before), column_text(after), text=True))
    if before.comment != after.comment:
        out.append(detail(f"{attr} comment", before.comment, after.comment))
    out += property_details(before.properties, after.properties, f"{attr} properties")
    if not out:
        out.append(detail(attr, before.to_dict(), after.to_dict()))
    return out


def _table_args(table: Table) -> dict[str, Any]:
    return {"identifier": [table.namespace, table.name],
            "columns": [c.to_dict() for c in table.columns],
            "properties": dict(sorted(table.properties.items())), "format": table.format,
            "table_type": table.table_type, "location": table.location,
            "format_properties": dict(sorted(table.format_properties.items())),
            "comment": table.comment, "protected": table.protected}


def _view_args(view: View) -> dict[str, Any]:
    return {"sql": view.sql, "dialect": view.dialect,
            "columns": [c.to_dict() for c in view.columns],
            "referenced_objects": [list(r) for r in view.referenced_objects],
            "default_namespace": view.default_namespace,
            "properties": dict(sorted(view.properties.items())), "comment": view.comment,
            "protected": view.protected}


def _comparable(view: View) -> tuple[Any, ...]:
    return (view.sql.strip(), view.dialect, tuple(c.without_ids() for c in view.columns),
            tuple(view.referenced_objects), view.default_namespace, dict(view.properties),
            view.comment, view.protected)


def is_safe_change(before: Column, after: Column) -> bool:
    """Whether data written with ``before`` stays readable as ``after``: widening integers,
    ``float4`` to ``float8``, more decimal precision at the same scale, longer or unbounded
    ``varchar``, dropping NOT NULL, new nullable struct fields. Comments and properties never
    matter."""
    if before.nullable and not after.nullable:
        return False
    if before.type != after.type and not _widens(before.type, after.type):
        return False
    old_fields = {f.name: f for f in before.fields}
    new_fields = {f.name: f for f in after.fields}
    if set(old_fields) - set(new_fields):
        return False
    for name, new_field in new_fields.items():
        if name in old_fields:
            if not is_safe_change(old_fields[name], new_field):
                return False
        elif not new_field.nullable:
            return False
    for part in ("element", "key", "value"):
        old_part, new_part = getattr(before, part), getattr(after, part)
        if old_part is not None and new_part is not None and not is_safe_change(old_part,
                                                                                 new_part):
            return False
    return True


def _widens(old: str, new: str) -> bool:
    if old in _INT_WIDTH and new in _INT_WIDTH:
        return _INT_WIDTH[new] >= _INT_WIDTH[old]
    if (old, new) == ("float4", "float8"):
        return True
    if old.startswith("decimal(") and new.startswith("decimal("):
        (p1, s1), (p2, s2) = (tuple(int(x) for x in t[8:-1].split(",")) for t in (old, new))
        return s1 == s2 and p2 >= p1
    if old.startswith("varchar") and new.startswith("varchar"):
        return new == "varchar" or (old != "varchar" and int(new[8:-1]) >= int(old[8:-1]))
    return False


def _reading_order(changes: Mapping[Key, Change], spec: Spec) -> list[Change]:
    """View changes with each view after the views it reads; otherwise by name (a
    reference cycle, which the catalog cannot hold anyway, keeps name order)."""
    keys = sorted(changes)
    index = {k: i for i, k in enumerate(keys)}
    waits_for = {k: {r for r in spec.views[k].view.referenced_objects if r in changes and r != k}
                 for k in keys}
    readers: dict[Key, list[Key]] = {k: [] for k in keys}
    for k, reads in waits_for.items():
        for r in reads:
            readers[r].append(k)
    ready = [index[k] for k in keys if not waits_for[k]]
    heapq.heapify(ready)
    ordered: list[Key] = []
    while ready:
        k = keys[heapq.heappop(ready)]
        ordered.append(k)
        for reader in readers[k]:
            waits_for[reader].discard(k)
            if not waits_for[reader]:
                heapq.heappush(ready, index[reader])
    done = set(ordered)
    ordered += [k for k in keys if k not in done]
    return [changes[k] for k in ordered]
