"""Compare a spec's desired state with the managed part of a catalog: ordered changes.

Order: namespace renames, namespace creates and alters; table renames, view renames; table
creates, alters and replacements; view creates and replacements (a view after the views it
reads); then drops of views, tables, namespaces. Within each group objects sort by name, so
the same inputs always give the same plan.

Comparison is normalised — type spellings are canonical, property maps compare as maps, SQL
ignores surrounding whitespace, column ids are not compared, column order is a change of
its own — so a spec that was applied plans to no changes. Renames come only from
``renamed_from`` hints. Whether a change is destructive or refused is derived from its
operations when the plan is staged (:mod:`olympia.plan.gate`); type compatibility lives in
:mod:`olympia.plan.compat`, the order of view changes in :mod:`olympia.plan.order`.

Over 400 lines: it compares namespaces, tables, views and their columns, which share one
Differ's state (renames, the observed catalog); the rules it applies live in the modules named
above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.exceptions import SpecError
from olympia.plan import icediff
from olympia.plan.changes import (
    Change,
    added_column,
    alter_common,
    attribute_details,
    column_details,
    column_text,
    detail,
    map_details,
    new_attributes,
    new_field_values,
    value_names,
)
from olympia.plan.ops import (
    Action,
    AlterNamespace,
    AlterTable,
    CreateIcebergTable,
    CreateNamespace,
    CreateTable,
    CreateView,
    DropNamespace,
    DropTable,
    DropView,
    Kind,
    RenameNamespace,
    RenameTable,
    RenameView,
    ReplaceView,
)
from olympia.plan.order import reading_order
from olympia.plan.state import Current, Observed
from olympia.spec import fields as described
from olympia.spec.loader import moved_from
from olympia.spec.model import Key, NamespaceSpec, Spec, TableSpec, ViewSpec
from olympia.spec.yamlpos import Problem


def _name(ns: str, obj: str = "") -> str:
    return f"{ns}.{obj}" if obj else ns


class Differ:
    """One comparison of ``spec`` with ``current`` (the managed namespaces of a version).

    ``iceberg_aware``: Iceberg tables are created and compared through Iceberg
    (:mod:`olympia.plan.icediff`); else like any other definition."""

    iceberg_aware = True

    def __init__(self, spec: Spec, current: Current, observed: Observed,
                 warehouse: str = "") -> None:
        self.spec = spec
        self.current = current
        self.observed = observed
        self.warehouse = warehouse  # the catalog's warehouse property (Iceberg tables)
        self.problems: list[Problem] = []
        self.definitions_only: list[str] = []  # Iceberg tables created without metadata
        self.warnings: list[str] = []

    def problem(self, position: Any, message: str) -> None:
        self.problems.append(Problem(position, message))

    def changes(self) -> list[Change]:
        spec = self.spec
        self._check_references()
        moved = self._namespace_renames()  # old -> new
        tables = _moved(self.current.tables, moved)
        views = _moved(self.current.views, moved)
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
        out += reading_order(view_changes, spec)
        dropped_views = [k for k in sorted(views) if k not in spec.views
                         and k not in claimed_views]
        dropped_tables = [k for k in sorted(tables) if k not in spec.tables
                          and k not in claimed_tables]
        out += [Change(Action.DROP, Kind.VIEW, _name(*k), ops=[DropView(identifier=k)])
                for k in dropped_views]
        out += [Change(Action.DROP, Kind.TABLE, _name(*k), ops=[DropTable(identifier=k)])
                for k in dropped_tables]
        out += [Change(Action.DROP, Kind.NAMESPACE, ns, ops=[DropNamespace(namespace=ns)])
                for ns in sorted(set(self.current.namespaces) - set(moved)
                                 - set(spec.namespaces))]
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
        return Change(Action.RENAME, Kind.NAMESPACE, new, old,
                      details=[detail("name", old, new)],
                      ops=[RenameNamespace(namespace=old, new_name=new)],
                      source=str(self.spec.namespaces[new].position))

    def _namespace(self, item: NamespaceSpec, moved: Mapping[str, str]) -> list[Change]:
        desired = item.namespace
        name = desired.name
        old = next((o for o, n in moved.items() if n == name), name)
        existing = self.current.namespaces.get(old)
        if existing is None:
            return [Change(Action.CREATE, Kind.NAMESPACE, name, source=str(item.position),
                           details=_created(Namespace(name), desired),
                           ops=[CreateNamespace.of(desired)])]
        args, details = alter_common(existing, desired)
        new_values, more = new_field_values(existing, desired,
                                            described.alterable(ObjectType.NAMESPACE))
        if new_values:
            args["new_values"] = new_values
        details += more
        if not args:
            return []
        return [Change(Action.UPDATE, Kind.NAMESPACE, name, details=details,
                       ops=[AlterNamespace(namespace=name, **args)],
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
                rename = RenameTable if kind == "table" else RenameView
                out[source] = (Change(
                    Action.RENAME, Kind(kind), _name(ns, name), _name(ns, old),
                    details=[detail("name", old, name)],
                    ops=[rename(identifier=source, new_name=name)],
                    source=str(item.position)), key)
            elif source in other:
                self.problem(item.position, f"renamed_from {old}: {ns}.{old} is a {other_kind}, "
                             f"not a {kind}")
            elif key not in same and key not in other:
                self._unmatched_hint(kind, item, key, same, other)
        return out

    def _unmatched_hint(self, kind: str, item: TableSpec | ViewSpec, key: Key,
                        same: Mapping[Key, Table | View], other: Mapping[Key, Table | View],
                        ) -> None:
        """A rename hint naming nothing while the object is created: an object of another
        namespace (a move, which the format cannot do) is a problem; else a warning, so an
        ignored hint is never silent."""
        ns, name = key
        old = str(item.renamed_from)
        spaces = {k[0] for k in (*same, *other)} - {ns}
        moved = moved_from(old, spaces)
        if moved is not None and (moved in same or moved in other):
            self.problem(item.position, f"renamed_from {old}: moving {_name(*moved)} to "
                         f"namespace {ns} is not supported (a rename stays in its namespace); "
                         f"drop and create it, or keep {kind} {_name(ns, name)} in {moved[0]}")
        else:
            self.warnings.append(f"{kind} {_name(ns, name)}: renamed_from {old} names no "
                                 f"{kind} of {ns} in the catalog, so it is created new")

    def _as_declared(self, kind: ObjectType, current: Table | View) -> bool:
        """Whether ``current`` is the catalog's object under its own name (neither renamed
        nor moved) and its definition is the one the spec declares for that name: then
        nothing about it differs from the declaration."""
        key = current.identifier
        loaded = (self.current.tables if kind == ObjectType.TABLE else self.current.views)
        return (kind, key) in self.current.as_declared and loaded.get(key) is current

    def _replacement(self, kind: str, item: TableSpec | ViewSpec, gone: Table | View,
                     gone_kind: str, create: CreateTable | CreateIcebergTable | CreateView,
                     details: list[dict[str, Any]]) -> Change:
        name = _name(gone.namespace, gone.name)
        drop = DropTable if gone_kind == "table" else DropView
        return Change(Action.REPLACE, Kind(kind), name, name if gone_kind != kind else "",
                      details=details, ops=[drop(identifier=(gone.namespace, gone.name)), create],
                      source=str(item.position))

    def _table(self, item: TableSpec, current: Table | None, view: View | None,
               ) -> list[Change]:
        desired = item.table
        name = _name(desired.namespace, desired.name)
        real = self.iceberg_aware and item.iceberg and icediff.creatable(
            item, self.spec.namespaces[desired.namespace].namespace.properties, self.warehouse)

        def create() -> CreateTable | CreateIcebergTable:
            return icediff.create_op(item) if real else CreateTable.of(desired)

        if self.iceberg_aware and item.iceberg and not real and (
                current is None or current.format != desired.format):
            self.definitions_only.append(name)
        if current is None:
            details = _created(Table(desired.namespace, desired.name), desired)
            details += [added_column(f"column {c.name}", c) for c in desired.columns]
            details += icediff.create_details(item)
            if view is not None:
                return [self._replacement("table", item, view, "view", create(),
                                          [detail("type", "view", "table"), *details])]
            return [Change(Action.CREATE, Kind.TABLE, name, details=details, ops=[create()],
                           source=str(item.position))]
        replacing = [f.name for f in described.stored(ObjectType.TABLE) if f.replaces]
        if any(getattr(current, n) != getattr(desired, n) for n in replacing):
            return [self._replacement("table", item, current, "table", create(),
                                      attribute_details(current, desired, tuple(replacing)))]
        if self.iceberg_aware and icediff.has_metadata(current):
            return icediff.alter(self, item, current)
        if real:  # declared as Iceberg without metadata: it becomes a real table
            return [Change(Action.UPDATE, Kind.TABLE, name, source=str(item.position),
                           details=[detail("iceberg metadata", None, "created"),
                                    *icediff.create_details(item)], ops=[create()])]
        if self._as_declared(ObjectType.TABLE, current):
            return []
        args, details = alter_common(current, desired)
        new_values, more = new_field_values(
            current, desired, [f for f in described.alterable(ObjectType.TABLE)
                               if item.manages(f.name) or not f.kept_when_omitted])
        if new_values:
            args["new_values"] = new_values
        details += more
        column_args, column_details = self.column_changes(item, current)
        args.update(column_args)
        if not args:
            return []
        return [Change(Action.UPDATE, Kind.TABLE, name, details=details + column_details,
                       ops=[AlterTable(identifier=(desired.namespace, desired.name), **args)],
                       source=str(item.position))]

    def column_changes(self, item: TableSpec, current: Table,
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The column arguments of an alter and their details (incompatible type changes
        flagged)."""
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
        updates: dict[str, Column] = {}
        for col in desired.columns:
            before = kept.get(col.name)
            if before is None:
                details.append(added_column(f"column {col.name}", col))
                continue
            before = replace(before, name=col.name)
            if before == col:
                continue
            updates[col.name] = col
            details += column_details(before, col)
        order_now = [n for n in kept] + [c.name for c in added]
        order_want = [c.name for c in desired.columns]
        args: dict[str, Any] = {}
        if removed:
            args["remove_columns"] = tuple(removed)
        if rename:
            args["rename_columns"] = rename
        if updates:
            args["update_columns"] = updates
        if added:
            args["add_columns"] = tuple(added)
        if order_now != order_want:
            args["column_order"] = tuple(order_want)
            details.append(detail("column order", order_now, order_want))
        return args, details

    def _view(self, item: ViewSpec, current: View | None, table: Table | None,
              ) -> list[Change]:
        desired = item.view
        name = _name(desired.namespace, desired.name)
        if current is None:
            details = new_attributes(View(desired.namespace, desired.name, ""), desired,
                                     value_names(ObjectType.VIEW))
            if desired.referenced_objects:
                details.append(detail("references", None,
                                      [_name(*r) for r in desired.referenced_objects]))
            if desired.columns:
                details.append(detail("columns", None, [f"{c.name}: {column_text(c)}"
                                                        for c in desired.columns]))
            details += map_details(View(desired.namespace, desired.name, ""), desired)
            details.append(detail("sql", None, desired.sql))
            create = CreateView.of(desired)
            if table is not None:
                return [self._replacement("view", item, table, "table", create,
                                          [detail("type", "table", "view"), *details])]
            return [Change(Action.CREATE, Kind.VIEW, name, details=details, ops=[create],
                           source=str(item.position))]
        if self._as_declared(ObjectType.VIEW, current) or (
                described.comparable(current) == described.comparable(desired)):
            return []
        plain = described.values(ObjectType.VIEW)  # the view's own fields first
        details = attribute_details(current, desired, tuple(
            f.name for f in (*[f for f in plain if not f.common], *[f for f in plain if f.common])))
        if current.sql.strip() != desired.sql.strip():
            details.append(detail("sql", current.sql.strip(), desired.sql))
        if current.referenced_objects != desired.referenced_objects:
            details.append(detail("references", [_name(*r) for r in current.referenced_objects],
                                  [_name(*r) for r in desired.referenced_objects]))
        if tuple(c.without_ids() for c in current.columns) != desired.columns:
            details.append(detail("columns", [f"{c.name}: {column_text(c)}"
                                              for c in current.columns],
                                  [f"{c.name}: {column_text(c)}" for c in desired.columns]))
        details += map_details(current, desired)
        return [Change(Action.UPDATE, Kind.VIEW, name, details=details,
                       ops=[ReplaceView.of(desired)],
                       source=str(item.position))]


def compute_changes(spec: Spec, current: Current, observed: Observed,
                    warehouse: str = "") -> tuple[list[Change], list[str]]:
    """The ordered changes that turn ``current`` into what ``spec`` declares, and warnings;
    ``warehouse``: the catalog's warehouse property (where Iceberg tables go)."""
    differ = Differ(spec, current, observed, warehouse)
    changes = differ.changes()
    warnings = list(differ.warnings)
    if differ.definitions_only:
        shown = ", ".join(differ.definitions_only[:5]) + (
            ", ..." if len(differ.definitions_only) > 5 else "")
        warnings.append(f"{len(differ.definitions_only)} Iceberg table(s) ({shown}) stay "
                        "definitions without Iceberg metadata: no declared location, no "
                        "namespace location property and no catalog warehouse property")
    return changes, warnings


# --- helpers ---------------------------------------------------------------------------------


def _moved(objects: dict[Key, Any], moved: Mapping[str, str]) -> dict[Key, Any]:
    """``objects`` with those of renamed namespaces under their new namespace's name."""
    if not moved:
        return dict(objects)
    return {(moved.get(ns, ns), n): replace(o, namespace=moved[ns]) if ns in moved else o
            for (ns, n), o in objects.items()}


def _renamed(objects: dict[Key, Any], renames: Mapping[Key, tuple[Change, Key]],
             ) -> dict[Key, Any]:
    out = dict(objects)
    for old, (_, new) in renames.items():
        out[new] = replace(out.pop(old), name=new[1])
    return out


def _created(default: Namespace | Table, new: Namespace | Table) -> list[dict[str, Any]]:
    """What a new namespace or table declares beyond ``default``: plain fields as
    additions, then map entries."""
    return (new_attributes(default, new, value_names(described.kind_of(new)))
            + map_details(default, new))
