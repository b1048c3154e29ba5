"""Compare a spec's desired state with the catalog and produce ordered changes.

Order: create/rename namespaces, alter namespaces; rename/create/alter tables; rename/create/
replace views (views that read other views after them); then drop views, tables, namespaces.
Every change carries the transaction operations that carry it out (JSON-able, so a saved
plan applies exactly what was reviewed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import CatalogReader
from olympia.exceptions import InvalidNameError, SpecError
from olympia.spec.model import Spec

_INT_WIDTH = {"int1": 1, "int2": 2, "int4": 3, "int8": 4}


@dataclass
class Change:
    """One planned change to one object."""

    action: str  # create | update | replace | rename | drop
    kind: str  # namespace | table | view
    name: str  # "ns" or "ns.name" (after the change)
    details: list[dict[str, Any]] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    destructive: bool = False
    blocked: str = ""  # why the change may not be applied (protected objects)
    from_name: str = ""  # renames: the old name

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "kind": self.kind, "name": self.name,
                               "destructive": self.destructive, "details": self.details,
                               "ops": self.ops}
        if self.blocked:
            out["blocked"] = self.blocked
        if self.from_name:
            out["from_name"] = self.from_name
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Change:
        return cls(data["action"], data["kind"], data["name"], list(data.get("details", [])),
                   list(data.get("ops", [])), bool(data.get("destructive")),
                   data.get("blocked", ""), data.get("from_name", ""))


def _op(name: str, **args: Any) -> dict[str, Any]:
    return {"op": name, "args": args}


def _detail(attr: str, before: Any, after: Any) -> dict[str, Any]:
    return {"attr": attr, "before": before, "after": after}


def _name(ns: str, obj: str = "") -> str:
    return f"{ns}.{obj}" if obj else ns


def managed_namespaces(reader: CatalogReader, spec: Spec) -> list[str]:
    """Namespaces the plan compares: declared ones, rename sources, and existing namespaces
    matched by the spec's ``manage`` patterns."""
    names = set(spec.namespaces)
    names.update(n.renamed_from for n in spec.namespaces.values() if n.renamed_from)
    names.update(n for n in reader.list_namespaces() if spec.manages(n))
    return sorted(names)


def compute_changes(reader: CatalogReader, spec: Spec) -> list[Change]:
    _check_against_catalog(reader, spec)
    current_ns = {n: reader.load_namespace(n) for n in managed_namespaces(reader, spec)
                  if reader.namespace_exists(n)}
    # current tables/views, keyed by the namespace name they will have after renames
    ns_renames: dict[str, str] = {}  # old -> new
    for ns_spec in spec.namespaces.values():
        new, old = ns_spec.namespace.name, ns_spec.renamed_from
        if old and old in current_ns and new not in current_ns:
            ns_renames[old] = new
    tables: dict[tuple[str, str], Table] = {}
    views: dict[tuple[str, str], View] = {}
    for ns in current_ns:
        target = ns_renames.get(ns, ns)
        ts, vs = reader.load_namespace_contents(ns)
        tables.update({(target, t.name): replace(t, namespace=target) for t in ts})
        views.update({(target, v.name): replace(v, namespace=target) for v in vs})

    out: list[Change] = []
    dropped_ns = [n for n in current_ns if n not in ns_renames and n not in spec.namespaces]
    out += _namespace_changes(spec, current_ns, ns_renames)
    table_changes, table_drops = _object_changes("table", spec.tables, tables, spec,
                                                 dropped_ns, _table_change)
    view_changes, view_drops = _object_changes("view", spec.views, views, spec, dropped_ns,
                                               _view_change)
    out += table_changes + _view_order(view_changes, spec) + view_drops + table_drops
    for ns in sorted(dropped_ns):
        namespace = current_ns[ns]
        out.append(Change("drop", "namespace", ns, ops=[_op("drop_namespace", namespace=ns)],
                          destructive=True,
                          blocked=_protected_reason("namespace", ns, namespace.protected)))
    return out


def _protected_reason(kind: str, name: str, protected: bool) -> str:
    return (f"{kind} {name} is protected in the catalog: set protected: false and apply that "
            "first") if protected else ""


def _check_against_catalog(reader: CatalogReader, spec: Spec) -> None:
    """Names within the catalog's limits; references to unmanaged objects exist."""
    problems = []
    for kind, items in ((ObjectType.NAMESPACE, {(n, ""): s for n, s in spec.namespaces.items()}),
                        (ObjectType.TABLE, spec.tables), (ObjectType.VIEW, spec.views)):
        for (ns, name), item in items.items():
            try:
                reader.codec.key(ObjectRef(kind, ns, name))
            except InvalidNameError as exc:
                problems.append(f"{item.position}: {exc}")
    for (ns, name), view_spec in spec.views.items():
        for ref_ns, ref_name in view_spec.view.referenced_objects:
            if spec.manages(ref_ns):
                continue
            if not (reader.table_exists(ref_ns, ref_name) or reader.view_exists(ref_ns,
                                                                                  ref_name)):
                problems.append(f"{view_spec.position}: view {ns}.{name} references "
                                f"{ref_ns}.{ref_name}, which neither the spec nor the catalog "
                                "has")
    if problems:
        raise SpecError(problems)


def _namespace_changes(spec: Spec, current: Mapping[str, Namespace],
                       renames: Mapping[str, str]) -> list[Change]:
    changes = []
    new_to_old = {new: old for old, new in renames.items()}
    for name in sorted(spec.namespaces):
        desired = spec.namespaces[name].namespace
        old_name = new_to_old.get(name)
        if old_name is not None:
            changes.append(Change("rename", "namespace", name, from_name=old_name,
                                  details=[_detail("name", old_name, name)],
                                  ops=[_op("rename_namespace", namespace=old_name,
                                           new_name=name)]))
            existing: Namespace | None = replace(current[old_name], name=name)
        else:
            existing = current.get(name)
        if existing is None:
            changes.append(Change(
                "create", "namespace", name,
                details=_property_details({}, desired.properties) + _new_flags(
                    Namespace(name), desired, ("comment", "protected")),
                ops=[_op("create_namespace", namespace=name,
                         properties=dict(desired.properties), comment=desired.comment,
                         protected=desired.protected)]))
            continue
        details = _property_details(existing.properties, desired.properties) + _flag_details(
            existing, desired, ("comment", "protected"))
        if details:
            unset = sorted(set(existing.properties) - set(desired.properties))
            changes.append(Change("update", "namespace", name, details=details, ops=[_op(
                "alter_namespace", namespace=name, set_properties=_set_props(
                    existing.properties, desired.properties), unset_properties=unset,
                comment=desired.comment, protected=desired.protected)]))
    return changes


def _set_props(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(after.items()) if before.get(k) != v}


def _property_details(before: Mapping[str, str], after: Mapping[str, str],
                      prefix: str = "properties") -> list[dict[str, Any]]:
    keys = sorted(set(before) | set(after))
    return [_detail(f"{prefix}.{k}", before.get(k), after.get(k)) for k in keys
            if before.get(k) != after.get(k)]


def _new_flags(default: Any, new: Any, attrs: Iterable[str]) -> list[dict[str, Any]]:
    """Attributes of a new object that differ from the defaults, shown as additions."""
    return [_detail(a, None, getattr(new, a)) for a in attrs
            if getattr(default, a) != getattr(new, a)]


def _flag_details(before: Any, after: Any, attrs: Iterable[str]) -> list[dict[str, Any]]:
    return [_detail(a, getattr(before, a), getattr(after, a)) for a in attrs
            if getattr(before, a) != getattr(after, a)]


def _object_changes(kind: str, desired: Mapping[tuple[str, str], Any],
                    current: dict[tuple[str, str], Any], spec: Spec, dropped_ns: list[str],
                    diff_one: Any) -> tuple[list[Change], list[Change]]:
    """Creates/renames/updates for declared objects, and drops for undeclared ones."""
    changes: list[Change] = []
    claimed: set[tuple[str, str]] = set()
    for key in sorted(desired):
        item = desired[key]
        ns, name = key
        old = item.renamed_from
        if key not in current and old and (ns, old) in current and (ns, old) not in desired:
            obj = current[(ns, old)]
            claimed.add((ns, old))
            changes.append(Change(
                "rename", kind, _name(ns, name), from_name=_name(ns, old),
                details=[_detail("name", old, name)],
                ops=[_op(f"rename_{kind}", identifier=[ns, old], new_name=name)]))
            changes += diff_one(replace(obj, name=name), item)
            continue
        claimed.add(key)
        changes += diff_one(current.get(key), item)
    drops = []
    for key in sorted(set(current) - claimed):
        obj = current[key]
        ns, name = key
        if not (spec.manages(ns) or ns in dropped_ns):
            continue
        drops.append(Change("drop", kind, _name(ns, name), destructive=True,
                            ops=[_op(f"drop_{kind}", identifier=[ns, name])],
                            blocked=_protected_reason(kind, _name(ns, name), obj.protected)))
    return changes, drops


def _column_text(col: Column) -> str:
    text = col.type
    if col.fields:
        text += "<" + ", ".join(f"{f.name}: {_column_text(f)}" for f in col.fields) + ">"
    if col.element is not None:
        text += f"<{_column_text(col.element)}>"
    if col.key is not None and col.value is not None:
        text += f"<{_column_text(col.key)}, {_column_text(col.value)}>"
    return text + ("" if col.nullable else " not null")


def _table_dict(table: Table) -> dict[str, Any]:
    return {"columns": [c.to_dict() for c in table.columns],
            "properties": dict(table.properties), "format": table.format,
            "table_type": table.table_type, "location": table.location,
            "format_properties": dict(table.format_properties), "comment": table.comment,
            "protected": table.protected}


def _table_change(current: Table | None, item: Any) -> list[Change]:
    desired: Table = item.table
    name = _name(desired.namespace, desired.name)
    ident = [desired.namespace, desired.name]
    if current is None:
        return [Change("create", "table", name,
                       details=[_detail(f"column {c.name}", None, _column_text(c))
                                for c in desired.columns],
                       ops=[_op("create_table", identifier=ident, **_table_dict(desired))])]
    if (current.format, current.table_type) != (desired.format, desired.table_type):
        return [Change("replace", "table", name, destructive=True,
                       details=_flag_details(current, desired, ("format", "table_type")),
                       blocked=_protected_reason("table", name, current.protected),
                       ops=[_op("drop_table", identifier=ident),
                            _op("create_table", identifier=ident, **_table_dict(desired))])]
    details = _property_details(current.properties, desired.properties)
    details += _property_details(current.format_properties, desired.format_properties,
                                 "format_properties")
    details += _flag_details(current, desired, ("comment", "location", "protected"))
    column_args, column_details, destructive = _column_changes(current, desired,
                                                               item.column_renames)
    details += column_details
    if not details:
        return []
    args: dict[str, Any] = {
        "identifier": ident, **column_args,
        "set_properties": _set_props(current.properties, desired.properties),
        "unset_properties": sorted(set(current.properties) - set(desired.properties)),
        "comment": desired.comment, "location": desired.location,
        "format_properties": dict(desired.format_properties), "protected": desired.protected,
    }
    return [Change("update", "table", name, details=details, destructive=destructive,
                   ops=[_op("alter_table", **args)])]


def _column_changes(current: Table, desired: Table, renames: Mapping[str, str],
                    ) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    cur = {c.name: c.without_ids() for c in current.columns}
    want = {c.name: c.without_ids() for c in desired.columns}
    rename = {old: new for new, old in renames.items() if old in cur and new not in cur}
    after_rename = {rename.get(n, n): c for n, c in cur.items()}
    removed = [n for n in cur if rename.get(n, n) not in want]
    added = [c for c in desired.columns if c.name not in after_rename]
    updates: dict[str, dict[str, Any]] = {}
    details: list[dict[str, Any]] = []
    destructive = False
    for old, new in rename.items():
        details.append(_detail(f"column {old}", old, f"renamed to {new}"))
    for name in removed:
        details.append(_detail(f"column {name}", _column_text(cur[name]), None))
        destructive = True
    for col in desired.columns:
        before = after_rename.get(col.name)
        if before is None:
            details.append(_detail(f"column {col.name}", None, _column_text(col)))
            continue
        if replace(before, name=col.name) != want[col.name]:
            safe = is_safe_change(before, want[col.name])
            destructive |= not safe
            updates[col.name] = want[col.name].to_dict()
            detail = _detail(f"column {col.name}", _column_text(before),
                             _column_text(want[col.name]))
            if not safe:
                detail["incompatible"] = True
            details.append(detail)
    order_now = [rename.get(n, n) for n in cur if n not in removed] + [c.name for c in added]
    order_want = [c.name for c in desired.columns]
    args: dict[str, Any] = {
        "remove_columns": removed, "rename_columns": rename, "update_columns": updates,
        "add_columns": [c.to_dict() for c in added],
        "column_order": order_want if order_now != order_want else None,
    }
    if order_now != order_want:
        details.append(_detail("column order", order_now, order_want))
    return args, details, destructive


def is_safe_change(before: Column, after: Column) -> bool:
    """Whether existing data stays readable: widening numbers, longer strings, loosening
    NOT NULL, optional struct fields added; comments and properties never matter."""
    if before.nullable and not after.nullable:
        return False
    if before.type != after.type and not _widens(before.type, after.type):
        return False
    old_fields = {f.name: f for f in before.fields}
    new_fields = {f.name: f for f in after.fields}
    if set(old_fields) - set(new_fields):
        return False
    for name, field_ in new_fields.items():
        if name in old_fields:
            if not is_safe_change(old_fields[name], field_):
                return False
        elif not field_.nullable:
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


def _view_dict(view: View) -> dict[str, Any]:
    return {"sql": view.sql, "dialect": view.dialect,
            "columns": [c.to_dict() for c in view.columns],
            "referenced_objects": [list(r) for r in view.referenced_objects],
            "default_namespace": view.default_namespace, "properties": dict(view.properties),
            "comment": view.comment, "protected": view.protected}


def _comparable_view(view: View) -> tuple[Any, ...]:
    return (view.sql.strip(), view.dialect, tuple(c.without_ids() for c in view.columns),
            tuple(view.referenced_objects), view.default_namespace, dict(view.properties),
            view.comment, view.protected)


def _view_change(current: View | None, item: Any) -> list[Change]:
    desired: View = item.view
    name = _name(desired.namespace, desired.name)
    ident = [desired.namespace, desired.name]
    if current is None:
        return [Change("create", "view", name, details=[_detail("sql", None, desired.sql)],
                       ops=[_op("create_view", identifier=ident, **_view_dict(desired))])]
    if _comparable_view(current) == _comparable_view(desired):
        return []
    details = _flag_details(current, desired, ("dialect", "comment", "protected",
                                               "default_namespace"))
    if current.sql.strip() != desired.sql.strip():
        details.append(_detail("sql", current.sql.strip(), desired.sql.strip()))
    if tuple(c.without_ids() for c in current.columns) != desired.columns:
        details.append(_detail("columns", [_column_text(c) for c in current.columns],
                               [_column_text(c) for c in desired.columns]))
    if tuple(current.referenced_objects) != desired.referenced_objects:
        details.append(_detail("references", [".".join(r) for r in current.referenced_objects],
                               [".".join(r) for r in desired.referenced_objects]))
    details += _property_details(current.properties, desired.properties)
    return [Change("update", "view", name, details=details,
                   ops=[_op("replace_view", identifier=ident, **_view_dict(desired))])]


def _view_order(changes: list[Change], spec: Spec) -> list[Change]:
    """Views that read other views come after them (stable, deterministic)."""
    pending = list(changes)
    done: set[str] = set()
    ordered = []
    names = {c.name for c in changes}
    while pending:
        for change in pending:
            ns, _, view = change.name.partition(".")
            reads = {f"{r_ns}.{r}" for r_ns, r in spec.views[(ns, view)].view.referenced_objects}
            if not (reads & names) - done:
                ordered.append(change)
                done.add(change.name)
                pending.remove(change)
                break
        else:  # a reference cycle: keep the remaining order
            ordered += pending
            break
    return ordered
