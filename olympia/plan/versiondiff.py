"""What changed between two catalog versions, object by object and column by column, in
the same change and detail shapes a plan uses (so that ``olympia diff`` renders like a plan).

Renames are read from the actions the versions in between recorded (table and view renames,
and the children a namespace rename moved), so a renamed object shows as renamed, with its
own changes, instead of as dropped and created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import Snapshot
from olympia.exceptions import OlympiaError
from olympia.plan.changes import (
    Change,
    attribute_details,
    column_details,
    column_text,
    detail,
    map_details,
    value_names,
)
from olympia.plan.compat import is_safe_change
from olympia.plan.ops import Action, Kind
from olympia.spec import fields as described
from olympia.versions.history import Diff, name_fields, namespace_moves
from olympia.versions.history import diff as object_diff

Definition = Namespace | Table | View


@dataclass
class ObjectChange:
    """One object's change: its name now (``ref``), before a rename (``source``), and the
    change with its details."""

    ref: ObjectRef
    change: Change
    source: ObjectRef | None = None

    def to_dict(self) -> dict[str, Any]:
        c = self.change
        out: dict[str, Any] = {"action": str(c.action), "type": str(c.kind), "name": c.name,
               **name_fields(self.ref), "details": c.details}
        if self.source is not None:
            out["from"] = {"name": str(self.source), **name_fields(self.source)}
        return out


@dataclass
class VersionDiff:
    """The object-level diff of two versions (``coarse``: added, removed and changed keys,
    a rename being one of each) and the detailed changes, ordered by object name."""

    coarse: Diff
    changes: list[ObjectChange] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.coarse.empty

    def to_dict(self) -> dict[str, Any]:
        return {**self.coarse.to_dict(), "changes": [c.to_dict() for c in self.changes]}


def version_diff(catalog: Catalog, from_version: int, to_version: int,
                 within: Callable[[ObjectRef], bool] | None = None) -> VersionDiff:
    """Every object created, dropped, renamed or changed from ``from_version`` to
    ``to_version``, each with its attribute and column changes.

    Args:
        catalog: the catalog.
        from_version: the older version.
        to_version: the newer version.
        within: when given, only the objects it accepts are compared and listed (the
            others' definitions are not read), and the catalog definition is left out. A
            rename is listed when it accepts either name.

    Raises:
        VersionNotFoundError: either version does not exist (or has expired).
    """
    coarse = object_diff(catalog, from_version, to_version)
    renamed = _renames(catalog, from_version, to_version, coarse.added, coarse.removed)
    if within is not None:
        other_name = {**renamed, **{old: new for new, old in renamed.items()}}

        def keep(ref: ObjectRef) -> bool:
            return within(ref) or (ref in other_name and within(other_name[ref]))

        coarse = Diff(from_version, to_version, [r for r in coarse.added if keep(r)],
                      [r for r in coarse.removed if keep(r)],
                      [r for r in coarse.changed if keep(r)])
        renamed = {new: old for new, old in renamed.items() if new in coarse.added}
    gone = set(renamed.values())
    old = _load_all(catalog.at_version(from_version), [*coarse.changed, *gone])
    new = _load_all(catalog.at_version(to_version), [*coarse.changed, *coarse.added])
    out = []
    for ref in coarse.added:
        source = renamed.get(ref)
        if source is None:
            out.append(ObjectChange(ref, Change(Action.CREATE, _kind(ref), str(ref),
                                                details=definition_details(None, new[ref]))))
            continue
        details = [detail("name", str(source), str(ref)),
                   *definition_details(old[source], new[ref])]
        out.append(ObjectChange(ref, Change(Action.RENAME, _kind(ref), str(ref), str(source),
                                            details=details), source))
    out += [ObjectChange(ref, Change(Action.DROP, _kind(ref), str(ref)))
            for ref in coarse.removed if ref not in gone]
    out += [ObjectChange(ref, Change(Action.UPDATE, _kind(ref), str(ref),
                                     details=definition_details(old[ref], new[ref])))
            for ref in coarse.changed]
    out.sort(key=lambda c: (c.ref.namespace, c.ref.type != ObjectType.NAMESPACE, c.ref.name))
    return VersionDiff(coarse, out)


def definition_details(before: Definition | None, after: Definition) -> list[dict[str, Any]]:
    """How ``after`` differs from ``before`` (None: everything ``after`` declares, as
    additions), attribute by attribute and column by column; same-kind objects only."""
    if before is None:
        before = described.empty_like(after, keep=True)
    out = attribute_details(before, after, value_names(described.kind_of(after)))
    if isinstance(before, View) and isinstance(after, View):
        if before.sql != after.sql:
            out.append(detail("sql", before.sql or None, after.sql))
        refs = [sorted(f"{a}.{b}" for a, b in o.referenced_objects) for o in (before, after)]
        if refs[0] != refs[1]:
            out.append(detail("referenced_objects", refs[0] or None, refs[1] or None))
    out += map_details(before, after)
    if isinstance(before, Table | View) and isinstance(after, Table | View):
        out += columns_details(before.columns, after.columns)
    return out


def columns_details(before: Iterable[Column], after: Iterable[Column],
                    ) -> list[dict[str, Any]]:
    """Columns renamed (matched by field id), removed, added and changed, in that order;
    incompatible type changes flagged as a plan flags them."""
    old = list(before)
    by_id = {c.id: c for c in old if c.id}
    by_name = {c.name: c for c in old}
    renamed, changed, added = [], [], []
    matched: set[str] = set()
    for col in after:
        was = by_id.get(col.id) if col.id else None
        if was is None:
            candidate = by_name.get(col.name)
            if candidate is not None and not (candidate.id and col.id):
                was = candidate
        if was is None:
            added.append(detail(f"column {col.name}", None, column_text(col), text=True))
            continue
        matched.add(was.name)
        if was.name != col.name:
            renamed.append(detail(f"column {was.name}", was.name, col.name, rename=True))
        prior = replace(was.without_ids(), name=col.name)
        now = col.without_ids()
        if prior != now:
            lines = column_details(prior, now)
            if not is_safe_change(prior, now):
                lines[0]["incompatible"] = True
            changed += lines
    removed = [detail(f"column {c.name}", column_text(c), None, text=True)
               for c in old if c.name not in matched]
    return renamed + removed + added + changed


def _kind(ref: ObjectRef) -> Kind:
    return Kind(ref.type.label)


_MESSAGES: dict[ObjectType, type[pb.NamespaceDef | pb.TableDef | pb.ViewDef]] = {
    ObjectType.NAMESPACE: pb.NamespaceDef, ObjectType.TABLE: pb.TableDef,
    ObjectType.VIEW: pb.ViewDef}


def _load_all(snapshot: Snapshot, refs: Iterable[ObjectRef]) -> dict[ObjectRef, Definition]:
    """The definitions of ``refs`` in ``snapshot``, each kind's files read concurrently."""
    wanted = list(dict.fromkeys(refs))
    out: dict[ObjectRef, Definition] = {}
    for kind, message in _MESSAGES.items():
        found = [(r, path) for r in wanted if r.type == kind
                 and (path := snapshot.definition_path(r)) is not None]
        defs = snapshot.files.read_defs([path for _, path in found], message)
        for (ref, _), msg in zip(found, defs, strict=True):
            if isinstance(msg, pb.NamespaceDef):
                out[ref] = Namespace.from_proto(msg)
            elif isinstance(msg, pb.TableDef):
                out[ref] = Table.from_proto(msg, ref.namespace, ref.name)
            else:
                out[ref] = View.from_proto(msg, ref.namespace, ref.name)
    return out


def _renames(catalog: Catalog, from_version: int, to_version: int, added: list[ObjectRef],
             removed: list[ObjectRef]) -> dict[ObjectRef, ObjectRef]:
    """Added object -> the removed object it was renamed from, following the renames the
    versions after ``from_version`` up to ``to_version`` recorded (chains of renames too).
    Only read when something was both added and removed; versions that have expired since
    contribute nothing."""
    if not added or not removed or to_version <= from_version:
        return {}
    origin: dict[ObjectRef, ObjectRef] = {}  # name now -> name at from_version
    for version in range(from_version + 1, to_version + 1):
        try:
            recorded = catalog.at_version(version).actions()
        except OlympiaError:
            continue
        moves = {j: k for _, pairs in namespace_moves(recorded) for j, k in pairs}
        created_by_move = set(moves.values())
        for i, action in enumerate(recorded):
            ref = actions.ref_of(action)
            if ref is None or i in created_by_move:
                continue
            new = actions.renamed_ref(action)
            if i in moves:
                new = actions.ref_of(recorded[moves[i]])
            if new is not None:
                origin[new] = origin.pop(ref, ref)
            elif action.type in (A.TABLE_DROP, A.VIEW_DROP, A.NAMESPACE_DROP, A.TABLE_CREATE,
                                 A.VIEW_CREATE, A.NAMESPACE_CREATE):
                origin.pop(ref, None)  # another object of that name from now on
    gone = set(removed)
    return {ref: origin[ref] for ref in added
            if ref in origin and origin[ref] in gone and origin[ref].type == ref.type}
