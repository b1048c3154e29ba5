"""The Iceberg files of a distributed transaction that ends without landing: aborting it
removes the metadata files, manifest lists, manifests and data files its statements wrote.

A statement inside a transaction (:meth:`OlympiaCatalog.in_transaction`) writes Iceberg
files under the tables' locations that only the transaction's running tree references. The
catalog layer (:meth:`DistributedTransaction.abort`) knows nothing of Iceberg and leaves
them; :func:`abort_transaction` aborts and then deletes, for each Iceberg table the
transaction changed, every file its table metadata (as the transaction left it) names,
except those that

- a committed version still kept names: the latest, every version of the retention window,
  the versions exports and other live transactions pin (:func:`kept_versions`, what purge
  and the snapshot-expiry check keep), and the transaction's beginning version; the table
  is matched by its uuid under any name;
- lie outside the table's own location (:func:`olympia.iceberg.locations.confine`): a file
  there may be another table's, and is left.

**Order: the record first, then the files.** Once the record is ABORTING (a compare-and-
swap on what was read) no statement can be added and no commit can seal it; once it is
deleted, a committer that reads it finds nothing to land. So after the abort nothing can
ever make a version of the transaction's tree, and its files are garbage. Deleting files
first would race a committer that sealed the record just before: its version would land
naming files already gone. A statement racing the abort fails to swap the record; the
files that statement wrote are not in the aborted tree and stay (orphans for Iceberg's own
orphan-file removal). Versions committed while the files are looked up are read before the
delete, so a version that registered one of them (the only way a committed version can
name a file of an open transaction) keeps it.

Not removed: the files of a table the transaction created and dropped again (its metadata is
no longer in the running tree), and the catalog's own node and definition files (the expiry
job removes those after its grace period).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyiceberg.io import FileIO
from pyiceberg.table import Table

from olympia import exceptions as oe
from olympia._proto import objects_pb2 as pb
from olympia.catalog.catalog import Catalog
from olympia.catalog.distributed import DistributedTransaction
from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import Table as TableDef
from olympia.catalog.reader import Snapshot
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.iceberg.files import table_files
from olympia.iceberg.locations import Place, confine, place
from olympia.iceberg.metadata import is_iceberg
from olympia.iceberg.retention import kept_versions
from olympia.versions.dtxn import touched_objects
from olympia.versions.history import changes

logger = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass
class RemovedFiles:
    """What removing a transaction's Iceberg files did.

    Attributes:
        transaction: Its id.
        deleted: Table name -> the files deleted (a file already gone counts).
        left: Why files were left: one message per file outside its table's location, per
            table whose files could not be told from committed ones.
    """

    transaction: str
    deleted: dict[str, list[str]] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(paths) for paths in self.deleted.values())


def abort_transaction(catalog: OlympiaCatalog, txn_id: str) -> RemovedFiles:
    """Abort distributed transaction ``txn_id``, then delete the Iceberg files it wrote
    that nothing committed names (see the module for which, and why in this order).

    Args:
        catalog: An OlympiaCatalog over the transaction's catalog (its FileIO deletes).
        txn_id: The transaction.

    Returns:
        What was deleted, and what was left.

    Raises:
        NoSuchTransactionError: There is none (committed, aborted or never begun).
        CatalogError: It is being committed: commit it to finish.
    """
    dtx = catalog.olympia.distributed_transaction(txn_id)
    return remove_files(catalog, dtx, dtx.abort())


def remove_files(catalog: OlympiaCatalog, dtx: DistributedTransaction,
                 record: pb.DistributedTransactionDef,
                 oldest_kept: int | None = None) -> RemovedFiles:
    """Delete the Iceberg files ``record`` (a transaction that can no longer land: aborted,
    or expired past its grace period) references that no kept committed version names.

    Args:
        catalog: An OlympiaCatalog over the transaction's catalog.
        dtx: The transaction (for its files; the record may be gone).
        record: Its record as it ended.
        oldest_kept: Also keep what the versions from this one on name (an expiry run
            keeping more versions than the catalog's settings do).

    Returns:
        What was deleted, and what was left.
    """
    result = RemovedFiles(record.id)
    try:
        staged = dtx.landing(record)  # the beginning version plus every statement
    except oe.OlympiaError as exc:
        result.left.append(f"its tree cannot be read ({exc}): its Iceberg files were left")
        return result
    begin = staged.base
    changed: dict[Key, TableDef] = {}
    for ref in touched_objects(staged.actions):
        key = (ref.namespace, ref.name)
        if ref.type != ObjectType.TABLE or not staged.table_exists(*key):
            continue
        definition = staged.load_table(*key)
        if not is_iceberg(definition) or (begin.table_exists(*key) and
                                          begin.load_table(*key).location == definition.location):
            continue
        changed[key] = definition
    if not changed:
        return result
    uuids = {d.format_properties.get("table-uuid", "") for d in changed.values()}
    try:
        committed = _Committed(catalog.olympia, uuids, begin.version, oldest_kept)
    except oe.OlympiaError as exc:
        result.left.append(f"the kept versions cannot be read ({exc}): the Iceberg files "
                           "were left")
        return result
    for (ns, name), definition in sorted(changed.items()):
        table = f"{ns}.{name}"
        try:
            _remove_table(catalog, (ns, name), definition, committed, result)
        except (oe.OlympiaError, OSError, ValueError) as exc:
            result.left.append(f"table {table}: its files were left, since they could not "
                               f"be told from committed ones ({exc})")
    return result


class _Committed:
    """The metadata files committed versions still kept name for tables with given uuids:
    read from the oldest kept version (or ``oldest``, if lower; never below ``vn/oldest``)
    through the latest (one tree difference per version), the pinned versions, and
    ``beginning``; :meth:`refresh` reads versions committed since."""

    def __init__(self, store: Catalog, uuids: set[str], beginning: int,
                 oldest: int | None = None) -> None:
        self.store, self.uuids = store, uuids
        self.files: dict[str, set[str]] = {u: set() for u in uuids}
        kept = kept_versions(store)
        start = max(min(kept.start, kept.start if oldest is None else oldest),
                    store.files.oldest_version())
        first = self._snapshot(start)
        self._note_all(first)
        self.through = first
        for version in sorted({*kept.pinned, beginning}):
            if version < start:
                self._note_all(self._snapshot(version))
        self.refresh()

    def _snapshot(self, version: int) -> Snapshot:
        return Snapshot(self.store.files, self.store.files.read_root(version))

    def _note(self, definition: TableDef) -> None:
        uuid = definition.format_properties.get("table-uuid", "")
        if is_iceberg(definition) and uuid in self.uuids:
            self.files[uuid].add(definition.location)

    def _note_all(self, snapshot: Snapshot) -> None:
        for definition in snapshot.load_all()[1]:
            self._note(definition)

    def refresh(self) -> bool:
        """Read the versions committed since; whether there were any."""
        latest = self.store.files.discover_latest().version
        moved = latest > self.through.version
        for version in range(self.through.version + 1, latest + 1):
            snapshot = self._snapshot(version)
            for ref, _, after in changes(self.through, snapshot):
                if ref.type == ObjectType.TABLE and after is not None:
                    self._note(snapshot.load_table(ref.namespace, ref.name))
            self.through = snapshot
        return moved


def _remove_table(catalog: OlympiaCatalog, key: Key, definition: TableDef,
                  committed: _Committed, result: RemovedFiles) -> None:
    """Delete the files of ``definition`` (a table as the transaction left it) that lie
    under its location and that no committed metadata file of its uuid names."""
    ns, name = key
    table = f"{ns}.{name}"
    ours = _load(catalog, key, definition.location)
    location = ours.metadata.location
    outside: list[str] = []

    def confined(path: str, kind: str) -> Place:
        what = f"table {table}: its {kind} file"
        try:
            return confine(path, location, what, "its location")
        except oe.TableLocationError:
            outside.append(path)
            return place(path, what)

    written = table_files(ours, confined)
    uuid = definition.format_properties.get("table-uuid", "")
    seen: set[str] = set()
    keep: set[str] = set()
    while True:  # until no version lands meanwhile that names another metadata file
        for metadata_file in sorted(committed.files[uuid] - seen):
            seen.add(metadata_file)
            for placed in table_files(_load(catalog, key, metadata_file),
                                      lambda path, kind: place(path, kind)).values():
                keep.update(placed)
        if not committed.refresh() or committed.files[uuid] <= seen:
            break
    result.left.extend(f"table {table}: {path} lies outside its location {location}; left"
                       for path in sorted(set(outside) - keep))
    doomed = sorted({path for placed in written.values() for path in placed}
                    - keep - set(outside))
    errors = catalog.olympia.storage.map(lambda path: _delete(ours.io, path), doomed)
    result.left.extend(f"table {table}: {path} could not be deleted ({error})"
                       for path, error in zip(doomed, errors, strict=True) if error)
    gone = [path for path, error in zip(doomed, errors, strict=True) if not error]
    if gone:
        result.deleted[table] = gone
        logger.info("distributed transaction %s: deleted %d files of table %s",
                    result.transaction, len(gone), table)


def _delete(io: FileIO, path: str) -> str | None:
    """Delete ``path`` (one already gone counts as deleted); why it failed, if it did."""
    try:
        io.delete(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        return str(exc)
    return None


def _load(catalog: OlympiaCatalog, key: Key, metadata_file: str) -> Table:
    """The table ``key`` as the metadata file ``metadata_file`` describes it."""
    return catalog._as_table(*key, catalog._read_metadata(metadata_file, ".".join(key)),
                             metadata_file)
