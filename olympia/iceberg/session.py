"""The Olympia side of an OlympiaCatalog: which catalog version it reads, and how its changes
are staged and committed.

A :class:`CatalogSession` reads the latest version, a pinned one (catalog-version time
travel: read-only), an Olympia transaction's staged state (``transaction()``,
``bound_to``), or a distributed transaction's running view (``in_transaction``: each change
is then a statement added to it, and no version is made until it commits). Every change
runs as a stage function on a transaction-bound session and is committed as ONE Olympia
version (or statement), its metadata files deleted if the transaction is abandoned
before its commit starts. Metadata files, immutable once written, are read through a bounded
in-memory cache. The Catalog interface itself is :class:`olympia.iceberg.OlympiaCatalog`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Self, TypeVar
from urllib.parse import urlparse

from pyiceberg.catalog import LOCATION, WAREHOUSE_LOCATION, MetastoreCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchNamespaceError,
    TableAlreadyExistsError,
)
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.utils.config import Config
from pyiceberg.utils.datetime import datetime_to_millis

from olympia import exceptions as oe
from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.catalog.distributed import DistributedTransaction
from olympia.catalog.objects import Table as TableDef
from olympia.catalog.reader import CatalogReader, Snapshot
from olympia.catalog.transaction import Transaction
from olympia.iceberg.files import check_placement
from olympia.iceberg.live import (
    Claims,
    KeptCache,
    KeptTables,
    LiveTables,
    action_tables,
    table_changes,
)
from olympia.iceberg.locations import (
    Key,
    LiveIndex,
    LiveTable,
    derived_location,
    inside,
    place,
)
from olympia.iceberg.metadata import (
    DEFAULT_MAX_METADATA_BYTES,
    DIGEST_PROPERTY,
    ICEBERG,
    MAX_METADATA_PROPERTY,
    IcebergMetadataError,
    create_metadata_file,
    describe,
    encode_table_metadata,
    identifier_parts,
    metadata_json,
    parse_table_metadata,
    read_metadata_file,
    table_definition,
)
from olympia.iceberg.options import iceberg_properties, storage_options
from olympia.iceberg.retention import Retention
from olympia.lru import LruCache
from olympia.versions import timetravel

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")

WAREHOUSE = WAREHOUSE_LOCATION
CREATE_PROPERTY = "olympia.create"
CACHE_PROPERTY = "olympia.metadata-cache-size"
TRANSACTION_PROPERTY = "olympia.transaction"
DEFAULT_CACHE_SIZE = 256
#: Definition files whose "is it an Iceberg table" a catalog keeps (list_tables).
ICEBERG_PATHS = 262144
#: Manifest lists whose manifests a confined catalog's commit check keeps (the newest of
#: each table being written is the next commit's parent).
MANIFEST_LISTS = 256
#: Metadata files whose JSON a catalog keeps after writing them (a commit's answer).
WRITTEN_JSON = 64
#: FileIOs a catalog keeps, one per set of table properties and URI scheme.
FILE_IOS = 64


class CatalogSession(MetastoreCatalog):
    """An Olympia catalog opened for pyiceberg: properties, version, time travel,
    transactions, identifiers and metadata reads (see :class:`OlympiaCatalog`, which adds the
    Catalog interface)."""

    _store: OlympiaStore
    _pinned: Snapshot | None
    _txn: Transaction | None
    _dtx: DistributedTransaction | None
    _written: list[tuple[FileIO, str]]
    # the metadata files a transaction staged, by location: digest (None in a dry run) and
    # contents, read from here until its commit writes them (the cache may drop them)
    _staged: dict[str, tuple[bytes | None, TableMetadata]]
    _metadata_cache: LruCache[str, tuple[bytes | None, TableMetadata]]
    _max_metadata_bytes: int
    _index: LiveIndex | None  # a transaction's staged tables over its base's (_live)
    _seen: int  # the staged actions of the transaction _index includes
    _live_tables: LiveTables  # the live tables of the tree last checked, shared by copies
    _kept: KeptCache  # the tables of kept versions (_kept_tables), shared by copies
    _iceberg_paths: LruCache[str, bool]  # whether a definition file is an Iceberg table's
    _manifest_lists: LruCache[tuple[str, str, str], frozenset[str]]  # (check_commit)
    _written_json: LruCache[str, tuple[TableMetadata, bytes]]  # (metadata_text)
    _file_ios: LruCache[tuple[tuple[tuple[str, str], ...], str | None], FileIO]
    _exclude_none: bool  # pyiceberg's legacy-current-snapshot-id, read once (metadata_json)
    _confined: bool  # writers are not trusted: see confined()
    _root: bool
    _dry_run: bool
    _retention: Retention

    def __init__(self, name: str, **properties: str) -> None:
        configured = Config().get_catalog_config(name) or {}
        merged = {k: v for k, v in configured.items() if isinstance(v, str)}
        merged.update({k: v for k, v in properties.items() if v is not None})
        uri = merged.get("uri")
        if not uri:
            raise oe.InvalidArgumentError(
                f"catalog {name}: the property uri (where the Olympia catalog lives) is required")
        options = storage_options(uri, merged)
        cache_size = merged.get(CACHE_PROPERTY, str(DEFAULT_CACHE_SIZE))
        if not cache_size.isdigit():
            raise oe.InvalidArgumentError(f"property {CACHE_PROPERTY} must be a whole number")
        max_metadata = merged.get(MAX_METADATA_PROPERTY, str(DEFAULT_MAX_METADATA_BYTES))
        if not max_metadata.isdigit() or int(max_metadata) < 1:
            raise oe.InvalidArgumentError(
                f"property {MAX_METADATA_PROPERTY} must be a positive whole number of bytes")
        try:
            store = OlympiaStore.open(uri, options)
        except oe.NoSuchCatalogError as exc:
            if merged.get(CREATE_PROPERTY, "false").strip().lower() != "true":
                raise oe.NoSuchCatalogError(
                    f"{exc}; create it with `olympia init` or set {CREATE_PROPERTY}=true") from None
            try:
                store = OlympiaStore.create(uri, options)
            except oe.AlreadyExistsError:  # another process created it meanwhile
                store = OlympiaStore.open(uri, options)
        self._setup(name, store, merged, int(cache_size))
        self._max_metadata_bytes = int(max_metadata)
        self._root = True
        if merged.get(TRANSACTION_PROPERTY):
            self._dtx = self._open_transaction(merged[TRANSACTION_PROPERTY])

    def _setup(self, name: str, store: OlympiaStore, properties: dict[str, str],
               cache_size: int) -> None:
        if not properties.get(WAREHOUSE) and store.properties.get(WAREHOUSE):
            properties[WAREHOUSE] = store.properties[WAREHOUSE]
        super().__init__(name, **properties)
        store.require_on_landing(Claims.on)  # a distributed transaction it lands, too
        self._store = store
        self._pinned = None
        self._txn = None
        self._dtx = None
        self._written, self._staged = [], {}
        self._metadata_cache = LruCache(cache_size)
        self._max_metadata_bytes = DEFAULT_MAX_METADATA_BYTES
        self._index, self._seen = None, 0
        self._live_tables = LiveTables()
        self._kept = KeptCache()
        self._iceberg_paths = LruCache(ICEBERG_PATHS)
        self._manifest_lists = LruCache(MANIFEST_LISTS)
        self._written_json = LruCache(WRITTEN_JSON)
        self._file_ios = LruCache(FILE_IOS)
        self._exclude_none = not Config().get_bool("legacy-current-snapshot-id")
        self._confined = False
        self._root = False
        self._dry_run = False
        self._retention = Retention(store, self._read_metadata, store.storage.map)

    @classmethod
    def over(cls, store: OlympiaStore, name: str = "olympia", *, dry_run: bool = False,
             max_metadata_bytes: int | None = None) -> Self:
        """An OlympiaCatalog over an Olympia catalog that is open already (``olympia apply``
        creating tables): the warehouse is the catalog's ``warehouse`` property, the FileIO
        gets the catalog's own storage options (:func:`iceberg_properties`). With
        ``dry_run``, commits stage definitions but write no metadata file (plans staged to
        be classified); such a catalog is only good for a transaction that is aborted.
        ``max_metadata_bytes`` bounds a metadata file it reads (as the property
        ``olympia.max-metadata-size``; ``None``: its default). It does not own ``store``
        (closing it closes nothing)."""
        catalog = cls.__new__(cls)
        catalog._setup(name, store, iceberg_properties(store.uri, store.storage.options),
                       DEFAULT_CACHE_SIZE)
        catalog._dry_run = dry_run
        catalog._max_metadata_bytes = max_metadata_bytes or DEFAULT_MAX_METADATA_BYTES
        return catalog

    def confined(self) -> Self:
        """This catalog holding every table to one rule: every file it references lies
        under its own location (olympia/iceberg/files.py), for writers that are not trusted
        (``olympia serve``'s clients). A create, register or commit that would break it is
        refused with ``TableLocationError``: ``write.*.path`` outside the table's location;
        a location change to one that does not hold the old one; and each new manifest
        list, manifest, data, delete or statistics file outside the location, checked
        before it is read (a commit reads the new manifest lists, its parent's manifest list
        and the new manifests; a register every file its metadata names). Other catalogs
        trust their writers: ``add_files`` of files elsewhere is theirs to choose.

        Returns:
            A copy sharing this catalog's store and caches.
        """
        other = copy.copy(self)
        other._confined, other._root = True, False
        return other

    def __repr__(self) -> str:
        mode = (f", version={self._pinned.version}" if self._pinned is not None
                else ", in a transaction" if self._txn is not None
                else f", in transaction {self._dtx.id}" if self._dtx is not None else "")
        return f"{type(self).__name__}({self.name!r}, {self._store.uri!r}{mode})"

    # --- the Olympia side ------------------------------------------------------------------

    @property
    def olympia(self) -> OlympiaStore:
        """The Olympia catalog underneath (history, rollback, exports, ...)."""
        return self._store

    @property
    def version(self) -> int:
        """The Olympia version this catalog reads: the pinned one, the one a transaction
        (or distributed transaction) began on, or the latest loaded."""
        if self._pinned is not None:
            return self._pinned.version
        if self._txn is not None:
            return self._txn.base.version
        if self._dtx is not None:
            return self._dtx.record.beginning_version
        return self._store.version

    @property
    def transaction_id(self) -> str | None:
        """The distributed transaction this catalog is in (:meth:`in_transaction`), if any."""
        return self._dtx.id if self._dtx is not None else None

    @property
    def read_only(self) -> bool:
        """Whether this is a time-travel view (every write is refused)."""
        return self._pinned is not None

    def _copy(self, *, pinned: Snapshot | None = None,
              txn: Transaction | None = None) -> Self:
        other = copy.copy(self)
        other._pinned, other._txn, other._written, other._root = pinned, txn, [], False
        other._staged = {}
        other._index, other._seen = None, 0
        return other

    def close(self) -> None:
        """Release the Olympia storage's thread pool (views and transactions share it, so
        only the catalog made by the constructor closes it)."""
        if self._root:
            self._store.close()

    # --- catalog-version time travel ------------------------------------------------------

    def at_version(self, version: int) -> Self:
        """A read-only catalog showing every table as it was in Olympia version ``version``.

        Raises:
            NoSuchVersionError, VersionExpiredError: the version does not exist (any more).
        """
        return self._copy(pinned=timetravel.at_version(self._store, version))

    def as_of(self, when: datetime | int | str) -> Self:
        """A read-only catalog at the version that was latest at ``when`` (a datetime, epoch
        milliseconds or an ISO-8601 string; naive means UTC).

        Raises:
            NoSuchVersionError: no kept version is that old.
        """
        if isinstance(when, datetime):
            aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
            millis = int(aware.timestamp() * 1000)
        else:
            millis = timetravel.parse_instant(when)
        return self._copy(pinned=timetravel.at_timestamp(self._store, millis))

    def at_export(self, name: str) -> Self:
        """A read-only catalog at the version recorded under the export ``name``.

        Raises:
            NoSuchExportError: no export of that name.
        """
        return self._copy(pinned=timetravel.at_export(self._store, name))

    # --- transactions --------------------------------------------------------------------

    def in_transaction(self, txn_id: str) -> Self:
        """This catalog inside the distributed transaction ``txn_id``
        (:meth:`olympia.Catalog.begin_transaction`, ``olympia txn begin``): reads see the
        version it began on plus everything added to it, from any process; each change
        (a create, an append, a drop) is a statement added to it, and nothing is visible
        to other readers until it commits, as ONE version. The same as the property
        ``olympia.transaction``.

        Raises:
            NoSuchTransactionError: There is no open transaction ``txn_id``.
            TransactionExpiredError: It expired.
            ReadOnlyError: This is a time-travel view.
        """
        self._require_writable("a distributed transaction")
        other = self._copy()
        other._dtx = self._open_transaction(txn_id)
        return other

    def _open_transaction(self, txn_id: str) -> DistributedTransaction:
        dtx = self._store.distributed_transaction(txn_id)
        dtx.check_open()
        return dtx

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Self]:
        """Change many tables in ONE Olympia version::

            with catalog.transaction() as tx:
                tx.load_table("sales.orders").append(orders)
                tx.load_table("sales.items").append(items)

        Tables loaded through ``tx`` stage their commits in the transaction; it commits when
        the block ends and discards everything (metadata files included) if the block raises.

        Raises:
            CommitFailedException: a concurrent commit changed one of the same tables.
            ReadOnlyError: this is a time-travel view.
        """
        self._require_writable("transaction")
        if self._txn is not None:
            raise oe.CatalogError("this catalog is already a transaction: use it directly")
        bound = self.bound_to(self._dtx.statement() if self._dtx is not None
                              else self._store.transaction())
        try:
            yield bound
        except BaseException:
            assert bound._txn is not None
            bound._txn.abort()
            raise
        bound._commit()

    def bound_to(self, txn: Transaction) -> Self:
        """This catalog staging every change in an Olympia transaction someone else commits
        (``olympia apply`` creating and evolving Iceberg tables in its one version).

        Its commit is held to the places its tables take (:class:`Claims`): a version (or,
        in a distributed transaction, a statement) landed since its base that gave one of
        them to another table refuses it. Metadata files written for the transaction are
        deleted if it is aborted before its commit starts, or if its commit is refused so;
        a commit that may have landed never deletes them.
        """
        bound = self._copy(txn=txn)
        Claims.on(txn)
        committing = False

        def started(_: Transaction) -> None:
            nonlocal committing
            committing = True

        def ended(done: Transaction) -> None:
            if done.state == "aborted" and (done.refusal is not None or not committing):
                bound._discard_written()

        txn.before_commit.append(started)
        txn.after_end.append(ended)
        return bound

    def _commit(self) -> None:
        assert self._txn is not None
        try:
            self._txn.commit()
        except oe.CommitConflict as exc:
            self._discard_written()  # a conflict means the version did not land
            raise CommitFailedException(str(exc)) from exc

    def _discard_written(self) -> None:
        for io, path in self._written:
            with contextlib.suppress(OSError):
                io.delete(path)
        self._written = []

    def _require_writable(self, operation: str) -> None:
        if self._pinned is not None:
            raise oe.ReadOnlyError(
                f"catalog {self.name} at version {self._pinned.version} is a read-only "
                f"time-travel view: {operation} is refused; write through the latest catalog")

    def _change(self, stage: Callable[[Self], T], operation: str) -> T:
        """Run ``stage`` on a transaction-bound catalog: this one, or a fresh transaction
        committed at once."""
        self._require_writable(operation)
        if self._txn is not None:
            return stage(self)
        with self.transaction() as bound:
            return stage(bound)

    def _reader(self) -> CatalogReader:
        if self._pinned is not None:
            return self._pinned
        if self._txn is not None:
            return self._txn
        if self._dtx is not None:
            return self._dtx.view()
        self._store.refresh()
        return self._store.snapshot

    def _staging(self) -> Transaction:
        assert self._txn is not None, "staging needs a transaction-bound catalog"
        return self._txn

    # --- identifiers ---------------------------------------------------------------------

    @staticmethod
    def _namespace(namespace: str | Identifier) -> str:
        parts = identifier_parts(namespace)
        if not parts or any(not p.strip() for p in parts):
            raise NoSuchNamespaceError(f"Empty namespace identifier: {namespace!r}")
        if len(parts) > 1:
            raise oe.InvalidArgumentError(
                f"namespace {'.'.join(parts)!r} has {len(parts)} levels; Olympia namespaces "
                "have one (pass a tuple such as ('a.b',) for a name containing dots)")
        return parts[0]

    @staticmethod
    def _table_ident(identifier: str | Identifier) -> tuple[str, str]:
        parts = identifier_parts(identifier)
        if len(parts) < 2 or any(not p.strip() for p in parts):
            raise NoSuchNamespaceError(f"table identifier {identifier!r} names no namespace")
        if len(parts) > 2:
            raise oe.InvalidArgumentError(
                f"table identifier {'.'.join(parts)!r} has a {len(parts) - 1}-level namespace; "
                "Olympia namespaces have one level")
        return parts[0], parts[1]

    def _read_metadata(self, location: str, table: str) -> TableMetadata:
        """A metadata file's contents, read from storage (a file deleted or replaced since
        an earlier read is noticed): :meth:`_verified_metadata` without a recorded digest.

        Raises:
            IcebergMetadataError: the file is missing, a folder, larger than the catalog
                reads (:class:`MetadataTooLargeError`) or no Iceberg table metadata (the
                message names ``table`` and the file).
            StorageError: the storage failed otherwise.
        """
        return self._verified_metadata(location, table)[0]

    def _table_metadata(self, definition: TableDef) -> TableMetadata:
        """The metadata of the Iceberg table ``definition``: its metadata file's contents,
        verified against the digest the definition records (:data:`DIGEST_PROPERTY`).

        Raises:
            IcebergMetadataError: as :meth:`_verified_metadata`.
            StorageError: the storage failed otherwise.
        """
        return self._verified_metadata(
            definition.location, f"{definition.namespace}.{definition.name}",
            definition.format_properties.get(DIGEST_PROPERTY, ""))[0]

    def _verified_metadata(self, location: str, table: str,
                           recorded: str = "") -> tuple[TableMetadata, str]:
        """A metadata file's contents and the SHA-256 (hex) of its bytes.

        With ``recorded``, the digest a definition (immutable, checksummed) records for
        the file, the metadata parsed from bytes of that digest (read or written by this
        process before) is returned without a read: it is the file's committed content.
        Otherwise the file is read; its parsed form is kept by the digest of its bytes, so
        a file read again unchanged is not parsed again. The files this transaction
        staged, written only by its commit (never, in a dry run), are served from memory.

        Raises:
            IcebergMetadataError: the file is missing, a folder, larger than the catalog
                reads (:class:`MetadataTooLargeError`), no Iceberg table metadata, or its
                bytes do not have the ``recorded`` digest (replaced or damaged since it was
                committed); the message names ``table`` and the file.
            StorageError: the storage failed otherwise.
        """
        cached = self._staged.get(location) or self._metadata_cache.get(location)
        if cached is not None and ((cached[0] is None and self._dry_run)
                                   or (cached[0] is not None and cached[0].hex() == recorded)):
            return cached[1], recorded
        limit = self._max_metadata_bytes
        data = read_metadata_file(self._load_file_io(location=location), location, table, limit)
        digest = hashlib.sha256(data).digest()
        cached = self._metadata_cache.get(location)
        if cached is not None and cached[0] == digest:
            metadata = cached[1]
        else:
            metadata = parse_table_metadata(data, location, table, limit)
        if recorded and digest.hex() != recorded:
            raise IcebergMetadataError(
                location, f"the Iceberg metadata of table {table} is unreadable: its bytes "
                          f"do not have the SHA-256 its definition records ({recorded}); "
                          "the file was replaced or damaged after it was committed")
        self._remember(location, metadata, digest)
        return metadata, digest.hex()

    def _remember(self, location: str, metadata: TableMetadata,
                  digest: bytes | None = None) -> None:
        """Keep ``metadata`` parsed from (or encoded as) a file whose bytes have ``digest``
        (``None``: a file a dry run staged and never wrote)."""
        self._metadata_cache.put(location, (digest, metadata))

    def metadata_text(self, metadata: TableMetadata, location: str) -> bytes:
        """The JSON of ``metadata``, the metadata file at ``location``: the very text this
        catalog wrote there when it still holds it for this object, else encoded anew.

        Args:
            metadata: Table metadata, as a commit of this catalog returned it.
            location: Its metadata file.

        Returns:
            The JSON, as pyiceberg writes it to a metadata file.
        """
        kept = self._written_json.get(location)
        if kept is not None and kept[0] is metadata:
            return kept[1]
        return metadata_json(metadata, self._exclude_none)

    def _load_file_io(self, properties: Properties = EMPTY_DICT,
                      location: str | None = None) -> FileIO:
        # the catalog's own settings outrank table properties (anyone who can commit to a
        # table can set those; endpoints and credentials stay the operator's); a FileIO
        # depends only on them and the location's scheme, so one is kept per such pair
        merged = {**properties, **self.properties}
        key = (tuple(sorted(merged.items())), urlparse(location).scheme if location else None)
        io = self._file_ios.get(key)
        if io is None:
            io = load_file_io(merged, location)
            self._file_ios.put(key, io)
        return io

    # --- table locations ----------------------------------------------------------------

    def _get_default_warehouse_location(self, database_name: str, table_name: str) -> str:
        """``<namespace location>/<table>``, else ``<warehouse>/<namespace>/<table>``, each
        name escaped to one folder name and checked to stay under its root; when another
        table has or had that location at a kept catalog version (a dropped or renamed
        table), ``<table>-<8 random hex digits>`` beside it.

        Raises:
            TableLocationError: a location would leave its root.
            ValueError: neither a namespace location nor a warehouse is set.
        """
        what = f"table {database_name}.{table_name}"
        properties = self.load_namespace_properties((database_name,))
        warehouse = self.properties.get(WAREHOUSE)
        if properties.get(LOCATION):
            root = properties[LOCATION]
        elif warehouse:
            root = derived_location(warehouse, database_name, f"namespace {database_name}")
        else:
            raise ValueError("No default path is set, please specify a location when "
                             "creating a table")
        location = derived_location(root, table_name, what)
        if self._kept_holders(location, what, ""):  # (a dropped or renamed table's)
            beside = derived_location(root, table_name, what, f"-{uuid.uuid4().hex[:8]}")
            if not self._kept_holders(beside, what, ""):  # else the refusal names the owner
                location = beside
        return location

    def _create_staged_table(self, identifier: str | Identifier, schema: Schema | pa.Schema,
                             location: str | None = None,
                             partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
                             sort_order: SortOrder = UNSORTED_SORT_ORDER,
                             properties: Properties = EMPTY_DICT) -> StagedTable:
        """pyiceberg's new table; a confined catalog (:meth:`confined`) refuses
        ``write.*.path`` outside its location.

        Raises:
            TableLocationError: such a property.
        """
        staged = super()._create_staged_table(identifier, schema, location, partition_spec,
                                              sort_order, properties)
        if self._confined:
            check_placement(staged.metadata, ".".join(staged.name()))
        return staged

    @contextlib.contextmanager
    def _live(self) -> Iterator[LiveIndex]:
        """The live tables as this session reads them, held while the caller checks: those
        of the latest or pinned version or the transaction's base (:class:`LiveTables`
        moves to it from the tree checked before, reading what differs); in a transaction,
        with the tables its staged actions touched read again as the actions come (so the
        many creates of one apply stay cheap)."""
        txn = self._txn
        tree = txn.base if txn is not None else self._reader()
        assert isinstance(tree, Snapshot)
        with self._live_tables.lock:
            index = self._live_tables.at(tree)
            if txn is None:
                yield index
                return
            if self._index is None:
                self._index, self._seen = LiveIndex(index), 0
            staged = txn.actions
            for ns, name in action_tables(staged[self._seen:]):
                exists = txn.table_exists(ns, name)
                self._index.put((ns, name), LiveTable.of(txn.load_table(ns, name))
                                if exists else None)
            self._seen = len(staged)
            yield self._index

    @contextlib.contextmanager
    def _kept_tables(self) -> Iterator[KeptTables]:
        """Every table of every kept catalog version (oldest kept to latest, and every
        exported version), by location and metadata file, held while the caller checks.
        Kept between calls: a later call reads only the versions made since (one root read
        and one tree difference each, and the definitions of the tables they changed); an
        expiry or an export made since rebuilds it."""
        with self._kept.lock:
            store = self._store
            latest = store.refresh()
            since = (store.files.oldest_version(),
                     tuple(sorted(store.catalog_def.exported_snapshots.values())))
            kept = self._kept.state
            if kept is None or kept.since != since or kept.through.version > latest:
                first = store.at_version(since[0])
                kept = KeptTables(since, first, LiveIndex())
                exported = [timetravel.at_export(store, name)
                            for name in store.catalog_def.exported_snapshots]
                for snapshot in [first, *(s for s in exported if s.version < since[0])]:
                    for definition in snapshot.load_all()[1]:
                        kept.record((definition.namespace, definition.name), definition,
                                    snapshot.version, once=snapshot is not first)
            for version in range(kept.through.version + 1, latest + 1):
                snapshot = Snapshot(store.files, store.files.read_root(version))
                for key, changed in table_changes(kept.through, snapshot):
                    kept.record(key, changed, version)
                kept.through = snapshot
            self._kept.state = kept
            yield kept

    def _check_free(self, what: str, location: str, metadata_file: str, key: Key,
                    table_uuid: str) -> None:
        """Refuse a table location (and metadata file) another live table uses, or that
        another table (another uuid) had at a kept catalog version: kept versions read
        its files there, and Iceberg's orphan-file removal on the new table would delete
        them.

        The transaction's commit checks the place again against what landed since its
        base (:class:`Claims`).

        Raises:
            LocationInUseError: the location or metadata file is taken.
            TableLocationError: a refused form.
        """
        with self._live() as live:
            live.check_free(what, location, metadata_file, key)
        taken = self._kept_holders(location, what, table_uuid)
        if taken:
            other, versions = taken[0]
            raise oe.LocationInUseError(
                f"{what}: location {location} overlaps the location {other.location} of "
                f"table {other.name} at kept {versions}, which read its files there: give "
                "the table another location (or none: a free one is derived), or wait until "
                "those versions are expired", other.name)

    def _kept_holders(self, location: str, what: str, table_uuid: str,
                      ) -> list[tuple[LiveTable, str]]:
        """The tables of kept versions (but those with ``table_uuid``) whose location
        equals, holds or lies in ``location``, each with the versions it had it at."""
        with self._kept_tables() as kept:
            return [(t, kept.versions(t))
                    for t in kept.index.holders(location, f"the location of {what}")
                    if not t.uuid or t.uuid != table_uuid]

    # --- staging metadata -------------------------------------------------------------

    def _require_new(self, ns: str, name: str, adopt: bool = False) -> TableDef | None:
        """Check that a table can be created; with ``adopt``, a table declared (in a spec)
        as Iceberg but without metadata yet is returned, to become the new table."""
        txn = self._staging()
        if not txn.namespace_exists(ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}")
        if txn.table_exists(ns, name) and adopt:
            declared = txn.load_table(ns, name)
            if declared.format == ICEBERG and not declared.location:
                return declared
        if txn.table_exists(ns, name) or txn.view_exists(ns, name):
            raise TableAlreadyExistsError(f"Table {ns}.{name} already exists")
        return None

    def _stage_metadata(self, ns: str, name: str, metadata: TableMetadata, location: str,
                        io: FileIO, previous: TableDef | None,
                        before: TableMetadata | None = None) -> None:
        """Stage a new metadata file, written by the commit in the batch that writes the
        version's files (:meth:`~olympia.catalog.transaction.Transaction.write_with_commit`:
        before the root; a failed write is raised by the commit, a StorageError, an
        :class:`InsufficientStorageError` where the store has no room), and the definition
        pointing at it; the version records what happened to the table
        (``iceberg.<ns>.<table>`` in ``olympia log``).

        Raises:
            LocationInUseError: a new table location overlaps another live table's.
            TableLocationError: the table location or the new metadata file is a refused
                form (:func:`olympia.iceberg.locations.place`).
        """
        if before is None or metadata.location != before.location:
            self._check_free(f"table {ns}.{name}", metadata.location, location, (ns, name),
                             str(metadata.table_uuid))
        else:  # (write.metadata.path may place it anywhere)
            place(location, f"the new metadata file of table {ns}.{name}")
        digest = None
        txn = self._staging()
        if not self._dry_run:
            text = metadata_json(metadata, self._exclude_none)
            data = encode_table_metadata(text, location)
            digest = hashlib.sha256(data).digest()
            txn.write_with_commit(partial(create_metadata_file, io, location, data,
                                          f"table {ns}.{name}"))
            self._written.append((io, location))
            self._written_json.put(location, (metadata, text))
        self._staged[location] = (digest, metadata)
        self._remember(location, metadata, digest)
        txn.put_table(table_definition(ns, name, metadata, location, previous,
                                       digest.hex() if digest is not None else ""),
                      create=previous is None)
        txn.annotate(**{f"iceberg.{ns}.{name}": describe(before, metadata)})

    def _update_and_stage_table(self, current_table: Table | None,
                                table_identifier: Identifier,
                                requirements: tuple[TableRequirement, ...],
                                updates: tuple[TableUpdate, ...]) -> StagedTable:
        """pyiceberg's staging of a commit, except that the new metadata of an existing
        table shares what the updates left unchanged with the current metadata instead of
        being a deep copy of it all (pydantic's deep copy of a table with many snapshots
        costs more than the rest of a commit; the models are frozen, and pyiceberg's
        updates build new lists and maps). A create is pyiceberg's own, validated whole.

        Raises:
            CommitFailedException: a requirement does not hold.
            ValidationError: the updates leave an incompatible partition spec or sort order.
        """
        if current_table is None:
            return super()._update_and_stage_table(current_table, table_identifier,
                                                   requirements, updates)
        base = current_table.metadata
        for requirement in requirements:
            requirement.validate(base)
        context = _TableMetadataUpdateContext()
        metadata = base
        for update in updates:
            metadata = _apply_table_update(update, metadata, context)
        if context.has_changes():
            metadata = _update_table_metadata_log(metadata, current_table.metadata_location,
                                                  base.last_updated_ms)
            if metadata.last_updated_ms == base.last_updated_ms:
                metadata = metadata.model_copy(
                    update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
        metadata.spec().check_compatible(metadata.schema())
        metadata.sort_order().check_compatible(metadata.schema())
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        location = load_location_provider(metadata.location, metadata.properties
                                          ).new_table_metadata_file_location(version)
        return StagedTable(identifier=table_identifier, metadata=metadata,
                           metadata_location=location,
                           io=self._load_file_io(metadata.properties, location), catalog=self)

    def _delete_old_metadata(self, io: FileIO, base: TableMetadata,  # type: ignore[override]
                             metadata: TableMetadata) -> None:
        # In a transaction the "old" files are still the committed ones until it commits.
        # pyiceberg deletes the files the new metadata's log no longer names; of those, only
        # the ones under the table's location (a registered metadata file's log may name
        # any file).
        if self._txn is None:
            kept = {entry.metadata_file for entry in metadata.metadata_log}
            own = [entry for entry in base.metadata_log if entry.metadata_file not in kept
                   and inside(entry.metadata_file, metadata.location)]
            MetastoreCatalog._delete_old_metadata(
                io, base.model_copy(update={"metadata_log": own}), metadata)
