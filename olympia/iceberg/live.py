"""Which tables hold which places: the live tables of a catalog tree, kept up to date from
the tree checked before, and the tables of every kept catalog version with the versions
each held its location at. OlympiaCatalog reads both before a table takes a location
(:mod:`olympia.iceberg.locations` has the places and the index that answers the checks),
and a transaction's :class:`Claims` check the places it took again against each version
its commit rebases onto.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from olympia._proto import actions_pb2 as apb
from olympia.catalog.keys import ObjectType, path_version
from olympia.catalog.objects import Table as TableDef
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import Transaction
from olympia.exceptions import LocationInUseError
from olympia.iceberg.locations import Key, LiveIndex, LiveTable, Place
from olympia.versions.history import changes

Claim = tuple[Key, str, Place]  # a table's name, uuid and location


class KeptCache:
    """The :class:`KeptTables` a catalog and its copies share, and the lock guarding it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: KeptTables | None = None


@dataclass
class KeptTables:
    """The tables of the kept versions through ``through``; ``since``: the oldest kept
    version and the exported roots when it was built. ``spans``: the first and last
    version each table had each location at (last ``-1``: it still has it at
    ``through``); ``holds``: what each table of ``through`` has."""

    since: tuple[int, tuple[str, ...]]
    through: Snapshot
    index: LiveIndex
    spans: dict[Claim, list[int]] = field(default_factory=dict)
    holds: dict[Key, Claim] = field(default_factory=dict)

    def record(self, key: Key, definition: TableDef | None, version: int, *,
               once: bool = False) -> None:
        """What table ``key`` uses from ``version`` on (``None``: nothing, it is gone);
        ``once``: at that version only (an exported one)."""
        table = None if definition is None else LiveTable.of(definition)
        claim = None if table is None else (table.key, table.uuid, table.place)
        if not once:
            held = self.holds.pop(key, None)
            if held is not None and held != claim:
                self.spans[held][1] = version - 1
        if table is None or claim is None:
            return
        self.index.add(table)
        span = self.spans.setdefault(claim, [version, version])
        span[0] = min(span[0], version)
        if not once:
            self.holds[key], span[1] = claim, -1
        elif span[1] != -1:
            span[1] = max(span[1], version)

    def versions(self, table: LiveTable) -> str:
        """The catalog versions ``table`` had its location at, in words."""
        first, last = self.spans[(table.key, table.uuid, table.place)]
        if last == -1:
            return f"catalog versions {first} and later (the latest)"
        return (f"catalog version {first}" if first == last
                else f"catalog versions {first} to {last}")


class LiveTables:
    """The live tables of one catalog tree, which a catalog and its copies share: a check
    against another tree first moves them there by the difference of the two trees (a
    tree difference skips the subtrees both share), so a create costs what changed since
    the tree checked before, never a read of every definition. They are derived only from
    the trees' node files and definition files: immutable, named by a uuid, verified by
    their checksums when read. A tree is the root node object a caller read, never a
    version number (a restored prefix may give a number other content)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._tree: Snapshot | None = None
        self._index = LiveIndex()

    def at(self, tree: Snapshot) -> LiveIndex:
        """The live tables of ``tree``, valid while the caller holds :attr:`lock`.

        Raises:
            CorruptFileError, StorageError: a node or definition could not be read (the
                tables are then forgotten, and read afresh by the next check).
        """
        known = self._tree
        try:
            if (known is None or known.codec.limits != tree.codec.limits
                    or known.catalog_def.order != tree.catalog_def.order):
                self._tree = None
                self._index.clear()
                _, tables, _ = tree.load_all()
                for definition in tables:
                    self._index.put((definition.namespace, definition.name),
                                    LiveTable.of(definition))
            elif known.root.node is not tree.root.node:
                self._tree = None
                for key, changed in table_changes(known, tree):
                    self._index.put(key, None if changed is None else LiveTable.of(changed))
        except BaseException:
            self._index.clear()
            raise
        self._tree = tree
        return self._index


def table_changes(old: Snapshot, new: Snapshot) -> Iterator[tuple[Key, TableDef | None]]:
    """The tables that differ between two trees, each with its definition in ``new``
    (None: it is not there)."""
    for ref, _, after in changes(old, new):
        if ref.type == ObjectType.TABLE:
            yield ((ref.namespace, ref.name),
                   None if after is None else new.load_table(ref.namespace, ref.name))


def action_tables(actions: Iterable[apb.ActionDef]) -> Iterator[Key]:
    """The tables ``actions`` touch (a rename: both names)."""
    for action in actions:
        if action.object.type == int(ObjectType.TABLE):
            yield action.object.namespace, action.object.name
            if action.HasField("rename"):
                yield action.object.namespace, action.rename.to_name


class Claims:
    """The places a transaction's tables take, checked again against every version (or
    distributed transaction's statement) its commit lands after (:meth:`Transaction.require`).

    At commit they are derived from the transaction's staged state against its base, never
    from how they were staged: each table its actions touch that is live as staged and has
    a uuid or location other than the one it has in the base under that name (a create, a
    register, a rename, a location change) holds its location and metadata file. So a
    distributed transaction's landing, whose staged state is read from the store (the
    running tree against the beginning version), claims the same places as the session
    that staged them would. A later version (or statement) that gave one of them to a
    table under a name the transaction does not stage refuses the commit, as the check at
    staging would have had it been the base. Each check decodes only the tables that
    version changed (:func:`table_changes`). Use :meth:`on`.
    """

    def __init__(self, txn: Transaction) -> None:
        self._txn = txn
        self._held: list[LiveTable] = []
        self._ours: set[Key] = set()
        self._required = False

    @classmethod
    def on(cls, txn: Transaction) -> None:
        """Hold ``txn``'s commit to the places its tables take (once per transaction)."""
        if not any(isinstance(getattr(hook, "__self__", None), cls)
                   for hook in txn.before_commit):
            txn.before_commit.append(cls(txn).settle)

    def settle(self, txn: Transaction) -> None:
        """At commit, find the places the staged tables take; if there are any, require
        their check (a transaction taking none keeps sharing versions: ``coalesce``)."""
        base = txn.base
        self._ours, self._held = set(action_tables(txn.actions)), []
        for key in sorted(self._ours):
            now = LiveTable.of(txn.load_table(*key)) if txn.table_exists(*key) else None
            if now is None:
                continue
            was = LiveTable.of(base.load_table(*key)) if base.table_exists(*key) else None
            if was is None or (was.uuid, was.place) != (now.uuid, now.place):
                self._held.append(now)
        if self._held and not self._required:
            self._required = True
            txn.require(self.recheck)

    def recheck(self, before: Snapshot, after: Snapshot) -> None:
        """Check the held places against the tables ``after`` changed since ``before``.

        Raises:
            LocationInUseError: such a table (under a name this transaction does not
                stage) uses a held location or metadata file, as the check at staging
                would have refused had ``after`` been the transaction's base.
        """
        if not self._held:
            return
        changed = LiveIndex()
        for key, definition in table_changes(before, after):
            if key not in self._ours and definition is not None:
                changed.put(key, LiveTable.of(definition))
        for held in self._held:
            what = f"table {held.name}"
            for other, clash in changed.conflicts(what, held.location, held.metadata_file,
                                                  held.key):
                when = (f"in catalog version {after.version}, committed after this "
                        f"transaction began on version {self._txn.base.version}"
                        if path_version(after.root.path) is not None else
                        "in a statement added to the distributed transaction meanwhile")
                raise LocationInUseError(
                    f"{what}: {clash} table {other.name}, which took it {when}: nothing was "
                    "committed; give the table another location (or none: a free one is "
                    "derived)", other.name)
