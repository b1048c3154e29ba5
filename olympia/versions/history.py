"""History of versions (newest first, paginated) and object-level diffs between versions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from olympia._proto import actions_pb2 as apb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.reader import Snapshot
from olympia.exceptions import InvalidArgumentError
from olympia.tree import btree
from olympia.versions.timetravel import format_millis


@dataclass(frozen=True)
class VersionInfo:
    """One version as ``olympia log`` shows it."""

    version: int
    created_at_millis: int
    actions: tuple[apb.ActionDef, ...]
    rollback_from_root: str | None = None

    @property
    def is_rollback(self) -> bool:
        return self.rollback_from_root is not None

    @property
    def rollback(self) -> tuple[int, int] | None:
        """(from version, to version) when this version was written by a rollback."""
        for action in self.actions:
            if action.type == A.CATALOG_ROLLBACK:
                return action.rollback.from_version, action.rollback.to_version
        return None

    @property
    def info(self) -> dict[str, str]:
        """Transaction metadata (spec digest, git commit, ...)."""
        merged: dict[str, str] = {}
        for action in self.actions:
            if action.type == A.TRANSACTION_INFO:
                merged.update(action.info)
        return merged

    def changes(self) -> list[apb.ActionDef]:
        return [a for a in self.actions if a.type != A.TRANSACTION_INFO]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; a table or view dropped and created anew by a namespace rename carries
        ``moved_by`` (the rename's description), and the rename lists its ``moves``."""
        rollback = self.rollback
        changes = self.changes()
        moved_by: dict[int, str] = {}
        moves: dict[int, list[dict[str, str]]] = {}
        for rename, pairs in namespace_moves(changes):
            what = actions.describe(changes[rename])
            for drop, create in pairs:
                moved_by[drop] = moved_by[create] = what
            moves[rename] = [{"type": actions.type_name(changes[d]).split("_")[0].lower(),
                              "from": str(actions.ref_of(changes[d])),
                              "to": str(actions.ref_of(changes[c]))} for d, c in pairs]
        out = []
        for i, a in enumerate(changes):
            ref = actions.ref_of(a)
            item: dict[str, Any] = {"type": actions.type_name(a),
                                    "object": None if ref is None else str(ref),
                                    **name_fields(ref), "description": actions.describe(a)}
            if i in moved_by:
                item["moved_by"] = moved_by[i]
            if i in moves:
                item["moves"] = moves[i]
            out.append(item)
        return {
            "version": self.version,
            "created_at_millis": self.created_at_millis,
            "created_at": format_millis(self.created_at_millis),
            "is_rollback": self.is_rollback,
            "rollback": None if rollback is None else {"from": rollback[0], "to": rollback[1]},
            "info": self.info,
            "actions": out,
        }


_DROP_CREATE = {A.TABLE_DROP: A.TABLE_CREATE, A.VIEW_DROP: A.VIEW_CREATE}
_CREATES = {A.NAMESPACE_CREATE, A.TABLE_CREATE, A.VIEW_CREATE}


def namespace_moves(recorded: Sequence[apb.ActionDef],
                    ) -> list[tuple[int, list[tuple[int, int]]]]:
    """The namespace renames among ``recorded`` (one version's actions) and, for each, the
    (drop, create) pairs of its tables and views that it caused (a namespace rename records
    every child as dropped under the old name and created under the new one).

    Returns:
        ``(index of the rename, [(index of the drop, index of the create), ...])`` per
        namespace rename, indexes into ``recorded``.
    """
    where = {(a.type, actions.ref_of(a)): i for i, a in enumerate(recorded)}
    out = []
    for i, action in enumerate(recorded):
        new = actions.renamed_ref(action)
        if action.type != A.NAMESPACE_RENAME or new is None:
            continue
        old_ns, new_ns = action.object.namespace, new.namespace
        pairs = []
        for j, child in enumerate(recorded):
            ref = actions.ref_of(child)
            if child.type not in _DROP_CREATE or ref is None or ref.namespace != old_ns:
                continue
            moved = ObjectRef(ref.type, new_ns, ref.name)
            k = where.get((_DROP_CREATE[child.type], moved))
            if k is not None:
                pairs.append((j, k))
        out.append((i, pairs))
    return out


def name_fields(ref: ObjectRef | None) -> dict[str, str | None]:
    """The parts of an object's name for JSON output: ``namespace`` and ``object_name`` (None
    for a namespace itself). The combined ``a.b.c`` form cannot tell table ``c`` of namespace
    ``a.b`` from table ``b.c`` of namespace ``a``; these fields can."""
    if ref is None or ref.type == ObjectType.CATALOG:
        return {"namespace": None, "object_name": None}
    return {"namespace": ref.namespace, "object_name": ref.name or None}


def version_info(snapshot: Snapshot) -> VersionInfo:
    node = snapshot.root.node
    return VersionInfo(snapshot.version, node.created_at_millis, tuple(snapshot.actions()),
                       node.rollback_from_root)


def history(catalog: Catalog, limit: int = 20, before: int | None = None) -> list[VersionInfo]:
    """Up to ``limit`` versions below ``before`` (default: all up to the latest), newest first.

    Reads one root per listed version, never the whole history.
    """
    if limit < 1:
        raise InvalidArgumentError("limit must be at least 1")
    latest = catalog.refresh()
    top = latest if before is None else min(before - 1, latest)
    oldest = catalog.files.oldest_version()
    return [version_info(catalog.at_version(v))
            for v in range(top, max(oldest, top - limit + 1) - 1, -1)]


#: Roots one :func:`search_history` call reads at most: a page costs O(this), whatever the
#: length of the history.
SEARCH_READS = 200


@dataclass(frozen=True)
class HistoryPage:
    """One page of a filtered history, newest first.

    ``next_before`` is where the next page starts (pass it as ``before``); None when nothing
    older can match: the oldest kept version was read, or the object's creation was found.
    A page holds fewer than ``limit`` versions when its reads ran out first, so an empty
    page with a ``next_before`` means "none among the versions read; older ones remain".
    """

    versions: list[VersionInfo]
    next_before: int | None
    oldest_read: int | None  # the oldest version this page read (None: it read none)


def search_history(catalog: Catalog, *, ref: ObjectRef | None = None, user: str | None = None,
                   limit: int = 20, before: int | None = None,
                   max_reads: int = SEARCH_READS) -> HistoryPage:
    """Versions below ``before`` that changed ``ref`` and were made by ``user``, newest first.

    An object's history follows it through its renames (and its namespace's) back to its
    creation; a rollback counts when it changed the object's definition. Reads one root per
    version examined (two definition lookups for a rollback), at most ``max_reads`` of them,
    and stops at ``limit`` matches.

    Args:
        catalog: The catalog.
        ref: The object, as named at ``before`` (default: any object).
        user: The ``user`` annotation to match (default: anyone).
        limit: The most versions to return.
        before: Examine versions below this one (default: up to the latest).
        max_reads: The most versions to examine.

    Returns:
        The page, with where the next one starts.

    Raises:
        InvalidArgumentError: ``limit`` or ``max_reads`` is below 1.
    """
    if limit < 1 or max_reads < 1:
        raise InvalidArgumentError("limit and max_reads must be at least 1")
    latest = catalog.refresh()
    top = latest if before is None else min(before - 1, latest)
    oldest = catalog.files.oldest_version()
    found: list[VersionInfo] = []
    version = top
    while version >= oldest and len(found) < limit and top - version < max_reads:
        info = version_info(catalog.at_version(version))
        changed, born = True, False
        if ref is not None:
            changed, born, ref = _changed(catalog, info, ref)
        if changed and (user is None or info.info.get("user") == user):
            found.append(info)
        version -= 1
        if born:
            return HistoryPage(found, None, version + 1)
    return HistoryPage(found, version + 1 if version >= oldest else None,
                       None if version == top else version + 1)


def _changed(catalog: Catalog, info: VersionInfo, name: ObjectRef,
             ) -> tuple[bool, bool, ObjectRef]:
    """Whether ``info``'s version changed the object named ``name`` after it, whether it
    created the object, and the object's name before it (renames, its namespace's too)."""
    if info.rollback is not None:
        now, then = catalog.at_version(info.version), catalog.at_version(info.version - 1)
        return now.definition_path(name) != then.definition_path(name), False, name
    touched, born, name = _touching(info.changes(), name)
    return bool(touched), born, name


def object_actions(info: VersionInfo, name: ObjectRef) -> tuple[list[apb.ActionDef], ObjectRef]:
    """The actions of ``info``'s version that wrote the object named ``name`` after it, in
    the order recorded, and the object's name before the version (a rollback's actions name
    no object: it gives none). A move by a namespace rename is given as that rename.

    Args:
        info: The version.
        name: The object, as named after the version.

    Returns:
        The actions, and the name before.
    """
    changes = info.changes()
    touched, _, before = _touching(changes, name)
    by = {part: rename for rename, pairs in namespace_moves(changes)
          for pair in pairs for part in pair}
    return [changes[i] for i in sorted({by.get(i, i) for i in touched})], before


def _touching(changes: list[apb.ActionDef], name: ObjectRef,
              ) -> tuple[list[int], bool, ObjectRef]:
    """Indexes (latest first) of the ``changes`` that wrote the object named ``name`` after
    them, whether one created it, and its name before them."""
    moved_from = {create: drop for _, pairs in namespace_moves(changes)
                  for drop, create in pairs}
    touched: list[int] = []
    born = False
    for i in range(len(changes) - 1, -1, -1):  # latest first: undo the version's renames
        action = changes[i]
        if name not in actions.written(action):
            continue
        touched.append(i)
        if actions.renamed_ref(action) == name:
            name = actions.ref_of(action) or name
        elif action.type in _CREATES and i in moved_from:
            name = actions.ref_of(changes[moved_from[i]]) or name
        elif action.type in _CREATES:
            born = True
            break
    return touched, born, name


@dataclass
class Diff:
    """Objects added, removed and changed between two versions."""

    from_version: int
    to_version: int
    added: list[ObjectRef] = field(default_factory=list)
    removed: list[ObjectRef] = field(default_factory=list)
    changed: list[ObjectRef] = field(default_factory=list)
    catalog_def_changed: bool = False

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.catalog_def_changed)

    def counts(self) -> dict[tuple[str, str], dict[str, int]]:
        """How many objects were created, changed and dropped, by (namespace, kind), read
        from the keys alone (no definition); a rename counts as a drop and a create.

        Returns:
            ``{(namespace, "table"): {"created": n, "changed": n, "dropped": n}, ...}``,
            sorted by namespace then kind.
        """
        out: dict[tuple[str, str], dict[str, int]] = {}
        for label, refs in (("created", self.added), ("changed", self.changed),
                            ("dropped", self.removed)):
            for ref in refs:
                row = out.setdefault((ref.namespace, ref.type.label),
                                     {"created": 0, "changed": 0, "dropped": 0})
                row[label] += 1
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, Any]:
        def refs(items: list[ObjectRef]) -> list[dict[str, str | None]]:
            return [{"type": r.type.label, "name": str(r), **name_fields(r)} for r in items]

        return {"from_version": self.from_version, "to_version": self.to_version,
                "added": refs(self.added), "removed": refs(self.removed),
                "changed": refs(self.changed), "catalog_def_changed": self.catalog_def_changed}


def diff(catalog: Catalog, from_version: int, to_version: int) -> Diff:
    """What differs between two versions, walking both trees and skipping shared subtrees."""
    old, new = catalog.at_version(from_version), catalog.at_version(to_version)
    result = Diff(from_version, to_version,
                  catalog_def_changed=old.catalog_def != new.catalog_def)
    for ref, before, after in changes(old, new):
        if before is None:
            result.added.append(ref)
        elif after is None:
            result.removed.append(ref)
        else:
            result.changed.append(ref)
    return result


def changes(old: Snapshot, new: Snapshot) -> Iterator[tuple[ObjectRef, str | None, str | None]]:
    """The objects that differ between two snapshots, with their definition files before
    and after (None: absent), walking both trees and skipping shared subtrees."""
    for key, before, after in btree.diff(new.nodes, old.root.node, new.root.node):
        yield new.codec.decode(key), before, after
