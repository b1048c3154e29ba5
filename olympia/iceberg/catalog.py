"""OlympiaCatalog: an Olympia catalog seen through pyiceberg's Catalog interface.

Every Iceberg table is an Olympia table definition (format ``ICEBERG``) whose ``location`` is
the table's current metadata file and whose columns carry the Iceberg field ids. A table commit
validates pyiceberg's requirements against the metadata the Olympia transaction reads, writes
the new metadata file and commits ONE Olympia version replacing the definition; Olympia's
conflict analysis lets commits to other tables rebase and land, and turns a concurrent commit
to the same table into ``CommitFailedException`` (pyiceberg then refreshes and retries).
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pyiceberg.catalog import MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchIcebergTableError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    TableAlreadyExistsError,
)
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import AssertCreate, TableRequirement, TableUpdate
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.utils.config import Config
from pyiceberg.view import View

from olympia import exceptions as oe
from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.catalog.objects import Table as TableDef
from olympia.catalog.reader import CatalogReader, Snapshot
from olympia.catalog.transaction import Transaction
from olympia.iceberg.options import iceberg_properties, storage_options
from olympia.iceberg.typemap import columns_from_schema
from olympia.versions import timetravel

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")

ICEBERG = "iceberg"
WAREHOUSE = "warehouse"
CREATE_PROPERTY = "olympia.create"
CACHE_PROPERTY = "olympia.metadata-cache-size"
DEFAULT_CACHE_SIZE = 256


class OlympiaCatalog(MetastoreCatalog):
    """A pyiceberg catalog whose tables live in an Olympia catalog.

    Load it like any pyiceberg catalog::

        load_catalog("prod", **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
                                "uri": "s3://bucket/catalog", "warehouse": "s3://bucket/wh",
                                "s3.endpoint": "...", "s3.access-key-id": "...", ...})

    Properties: ``uri`` (the Olympia catalog: a path, ``file://``, ``s3://`` or ``memory://``),
    ``warehouse`` (default table location; else the Olympia catalog's own ``warehouse``
    property), the pyiceberg ``s3.*`` properties (used for both the catalog files and the
    FileIO), ``olympia.storage.<option>`` (any Olympia storage option) and ``olympia.create``
    (``true``: create the Olympia catalog if there is none at ``uri``) and
    ``olympia.metadata-cache-size`` (parsed metadata files kept in memory, default 256; files
    never change once written, so the cache is never stale). Properties missing from
    the call are read from ``.pyiceberg.yaml`` / ``PYICEBERG_CATALOG__<NAME>__*`` as usual.

    Raises:
        InvalidArgumentError: no ``uri``, or a malformed property.
        NoSuchCatalogError: no Olympia catalog at ``uri`` and ``olympia.create`` is not set.
    """

    _store: OlympiaStore
    _pinned: Snapshot | None
    _txn: Transaction | None
    _written: list[tuple[FileIO, str]]
    _metadata_cache: OrderedDict[str, TableMetadata]
    _cache_lock: threading.Lock
    _cache_size: int
    _root: bool
    _dry_run: bool

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
        self._root = True

    def _setup(self, name: str, store: OlympiaStore, properties: dict[str, str],
               cache_size: int) -> None:
        if not properties.get(WAREHOUSE) and store.properties.get(WAREHOUSE):
            properties[WAREHOUSE] = store.properties[WAREHOUSE]
        super().__init__(name, **properties)
        self._store = store
        self._pinned = None
        self._txn = None
        self._written = []
        self._metadata_cache = OrderedDict()
        self._cache_lock = threading.Lock()
        self._cache_size = cache_size
        self._root = False
        self._dry_run = False

    @classmethod
    def over(cls, store: OlympiaStore, name: str = "olympia", *,
             dry_run: bool = False) -> OlympiaCatalog:
        """An OlympiaCatalog over an Olympia catalog that is open already (``olympia apply``
        creating tables): the warehouse is the catalog's ``warehouse`` property, the FileIO
        gets the catalog's own storage options (:func:`iceberg_properties`). With
        ``dry_run``, commits stage definitions but write no metadata file (plans staged to
        be classified); such a catalog is only good for a transaction that is aborted.
        It does not own ``store`` (closing it closes nothing)."""
        catalog = cls.__new__(cls)
        catalog._setup(name, store, iceberg_properties(store.uri, store.storage.options),
                       DEFAULT_CACHE_SIZE)
        catalog._dry_run = dry_run
        return catalog

    def __repr__(self) -> str:
        mode = (f", version={self._pinned.version}" if self._pinned is not None
                else ", in a transaction" if self._txn is not None else "")
        return f"OlympiaCatalog({self.name!r}, {self._store.uri!r}{mode})"

    # --- the Olympia side ------------------------------------------------------------------

    @property
    def olympia(self) -> OlympiaStore:
        """The Olympia catalog underneath (history, rollback, exports, ...)."""
        return self._store

    @property
    def version(self) -> int:
        """The Olympia version this catalog reads: the pinned one, the one a transaction
        started from, or the latest loaded."""
        if self._pinned is not None:
            return self._pinned.version
        if self._txn is not None:
            return self._txn.base.version
        return self._store.version

    @property
    def read_only(self) -> bool:
        """Whether this is a time-travel view (every write is refused)."""
        return self._pinned is not None

    def _copy(self, *, pinned: Snapshot | None = None,
              txn: Transaction | None = None) -> OlympiaCatalog:
        other = copy.copy(self)
        other._pinned, other._txn, other._written, other._root = pinned, txn, [], False
        return other

    def close(self) -> None:
        """Release the Olympia storage's thread pool (views and transactions share it, so
        only the catalog made by the constructor closes it)."""
        if self._root:
            self._store.close()

    # --- catalog-version time travel ------------------------------------------------------

    def at_version(self, version: int) -> OlympiaCatalog:
        """A read-only catalog showing every table as it was in Olympia version ``version``.

        Raises:
            NoSuchVersionError, VersionExpiredError: the version does not exist (any more).
        """
        return self._copy(pinned=timetravel.at_version(self._store, version))

    def as_of(self, when: datetime | int | str) -> OlympiaCatalog:
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

    def at_export(self, name: str) -> OlympiaCatalog:
        """A read-only catalog at the version recorded under the export ``name``.

        Raises:
            NoSuchExportError: no export of that name.
        """
        return self._copy(pinned=timetravel.at_export(self._store, name))

    # --- transactions --------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[OlympiaCatalog]:
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
        bound = self.bound_to(self._store.transaction())
        try:
            yield bound
        except BaseException:
            assert bound._txn is not None
            bound._txn.abort()
            raise
        bound._commit()

    def bound_to(self, txn: Transaction) -> OlympiaCatalog:
        """This catalog staging every change in an Olympia transaction someone else commits
        (``olympia apply`` creating and evolving Iceberg tables in its one version).

        Metadata files written for the transaction are deleted if it is aborted before its
        commit starts; a commit that may have landed never deletes them.
        """
        bound = self._copy(txn=txn)
        committing = False

        def started(_: Transaction) -> None:
            nonlocal committing
            committing = True

        def ended(done: Transaction) -> None:
            if done.state == "aborted" and not committing:
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

    def _change(self, stage: Callable[[OlympiaCatalog], T], operation: str) -> T:
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
        self._store.refresh()
        return self._store.snapshot

    def _staging(self) -> Transaction:
        assert self._txn is not None, "staging needs a transaction-bound catalog"
        return self._txn

    # --- identifiers ---------------------------------------------------------------------

    @staticmethod
    def _namespace(namespace: str | Identifier) -> str:
        parts = _parts(namespace)
        if not parts or any(not p.strip() for p in parts):
            raise NoSuchNamespaceError(f"Empty namespace identifier: {namespace!r}")
        if len(parts) > 1:
            raise oe.InvalidArgumentError(
                f"namespace {'.'.join(parts)!r} has {len(parts)} levels; Olympia namespaces "
                "have one (pass a tuple such as ('a.b',) for a name containing dots)")
        return parts[0]

    @staticmethod
    def _table_ident(identifier: str | Identifier) -> tuple[str, str]:
        parts = _parts(identifier)
        if len(parts) < 2 or any(not p.strip() for p in parts):
            raise NoSuchNamespaceError(f"table identifier {identifier!r} names no namespace")
        if len(parts) > 2:
            raise oe.InvalidArgumentError(
                f"table identifier {'.'.join(parts)!r} has a {len(parts) - 1}-level namespace; "
                "Olympia namespaces have one level")
        return parts[0], parts[1]

    # --- namespaces ----------------------------------------------------------------------

    def create_namespace(self, namespace: str | Identifier,
                         properties: Properties = EMPTY_DICT) -> None:
        """Create a namespace.

        Raises:
            NamespaceAlreadyExistsError: it exists.
        """
        ns = self._namespace(namespace)
        props = _properties(properties)

        def stage(bound: OlympiaCatalog) -> None:
            txn = bound._staging()
            if txn.namespace_exists(ns):
                raise NamespaceAlreadyExistsError(f"Namespace {ns} already exists")
            txn.create_namespace(ns, props)

        try:
            self._change(stage, "create_namespace")
        except CommitFailedException:
            if self.namespace_exists(ns):
                raise NamespaceAlreadyExistsError(f"Namespace {ns} already exists") from None
            raise

    def drop_namespace(self, namespace: str | Identifier) -> None:
        """Drop an empty namespace.

        Raises:
            NoSuchNamespaceError: it does not exist.
            NamespaceNotEmptyError: it holds tables or views.
        """
        ns = self._namespace(namespace)

        def stage(bound: OlympiaCatalog) -> None:
            try:
                bound._staging().drop_namespace(ns)
            except oe.NoSuchNamespaceError:
                raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from None
            except oe.NamespaceNotEmptyError as exc:
                raise NamespaceNotEmptyError(str(exc)) from None

        self._change(stage, "drop_namespace")

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        """Every namespace; a namespace has no children (Olympia namespaces are one level).

        Raises:
            NoSuchNamespaceError: ``namespace`` is given and does not exist.
        """
        reader = self._reader()
        if _parts(namespace):
            ns = self._namespace(namespace)
            if not reader.namespace_exists(ns):
                raise NoSuchNamespaceError(f"Namespace does not exist: {ns}")
            return []
        return [(ns,) for ns in reader.list_namespaces()]

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        return self._reader().namespace_exists(self._namespace(namespace))

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        """The namespace's properties.

        Raises:
            NoSuchNamespaceError: it does not exist.
        """
        ns = self._namespace(namespace)
        try:
            return self._reader().load_namespace_properties(ns)
        except oe.NoSuchNamespaceError:
            raise NoSuchNamespaceError(f"Namespace {ns} does not exists") from None

    def update_namespace_properties(self, namespace: str | Identifier,
                                    removals: set[str] | None = None,
                                    updates: Properties = EMPTY_DICT) -> PropertiesUpdateSummary:
        """Remove and set namespace properties in one version.

        Raises:
            NoSuchNamespaceError: it does not exist.
            ValueError: a key is both removed and updated.
        """
        ns = self._namespace(namespace)
        new = _properties(updates)

        def stage(bound: OlympiaCatalog) -> PropertiesUpdateSummary:
            current = bound.load_namespace_properties(ns)
            summary, _ = bound._get_updated_props_and_update_summary(current, removals, new)
            bound._staging().alter_namespace(ns, set_properties=new,
                                             unset_properties=sorted(summary.removed))
            return summary

        return self._change(stage, "update_namespace_properties")

    # --- reading tables -------------------------------------------------------------------

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        """The Iceberg tables of a namespace (Olympia tables of other formats, or declared
        without metadata yet, are not listed).

        Raises:
            NoSuchNamespaceError: it does not exist.
        """
        ns = self._namespace(namespace)
        reader = self._reader()
        if not reader.namespace_exists(ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}")
        tables, _ = reader.load_namespace_contents(ns)
        return [(ns, t.name) for t in tables if _is_iceberg(t)]

    def load_table(self, identifier: str | Identifier) -> Table:
        """The table as this catalog sees it (latest, pinned version, or transaction).

        Raises:
            NoSuchTableError: no such table; NoSuchIcebergTableError if it is not Iceberg.
        """
        ns, name = self._table_ident(identifier)
        definition = self._definition(self._reader(), ns, name)
        return self._as_table(ns, name, self._read_metadata(definition.location),
                              definition.location)

    def table_exists(self, identifier: str | Identifier) -> bool:
        ns, name = self._table_ident(identifier)
        return self._reader().table_exists(ns, name)

    def _definition(self, reader: CatalogReader, ns: str, name: str) -> TableDef:
        try:
            definition = reader.load_table(ns, name)
        except oe.NoSuchTableError:
            raise NoSuchTableError(f"Table does not exist: {ns}.{name}") from None
        if not _is_iceberg(definition):
            raise NoSuchIcebergTableError(
                f"Table {ns}.{name} is not an Iceberg table yet (format {definition.format}, "
                f"metadata location {definition.location or 'empty'})")
        return definition

    def _as_table(self, ns: str, name: str, metadata: TableMetadata, location: str) -> Table:
        io = self._load_file_io(metadata.properties, location)
        return Table((ns, name), metadata, location, io, self)

    def _read_metadata(self, location: str) -> TableMetadata:
        """A metadata file's contents; files never change once written, so they are cached."""
        with self._cache_lock:
            cached = self._metadata_cache.get(location)
            if cached is not None:
                self._metadata_cache.move_to_end(location)
                return cached
        io = self._load_file_io(location=location)
        try:
            metadata = FromInputFile.table_metadata(io.new_input(location))
        except OSError as exc:
            raise oe.StorageError(f"cannot read Iceberg metadata ({exc})", location) from exc
        self._remember(location, metadata)
        return metadata

    def _remember(self, location: str, metadata: TableMetadata) -> None:
        with self._cache_lock:
            self._metadata_cache[location] = metadata
            while len(self._metadata_cache) > self._cache_size:
                self._metadata_cache.popitem(last=False)

    def _load_file_io(self, properties: Properties = EMPTY_DICT,
                      location: str | None = None) -> FileIO:
        # the catalog's own settings outrank table properties (anyone who can commit to a
        # table can set those; endpoints and credentials stay the operator's)
        return load_file_io({**properties, **self.properties}, location)

    # --- changing tables ------------------------------------------------------------------

    def create_table(self, identifier: str | Identifier, schema: Schema | pa.Schema,
                     location: str | None = None,
                     partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
                     sort_order: SortOrder = UNSORTED_SORT_ORDER,
                     properties: Properties = EMPTY_DICT) -> Table:
        """Create an Iceberg table (metadata file + Olympia definition, one version).

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            TableAlreadyExistsError: a table or view of that name exists.
        """
        ns, name = self._table_ident(identifier)

        def stage(bound: OlympiaCatalog) -> tuple[TableMetadata, str]:
            declared = bound._require_new(ns, name, adopt=True)
            staged = bound._create_staged_table((ns, name), schema, location, partition_spec,
                                                sort_order, properties)
            bound._stage_metadata(ns, name, staged.metadata, staged.metadata_location,
                                  staged.io, declared)
            return staged.metadata, staged.metadata_location

        try:
            metadata, metadata_location = self._change(stage, "create_table")
        except CommitFailedException:
            if self.table_exists((ns, name)):
                raise TableAlreadyExistsError(f"Table {ns}.{name} already exists") from None
            raise
        return self._as_table(ns, name, metadata, metadata_location)

    def register_table(self, identifier: str | Identifier, metadata_location: str,
                       overwrite: bool = False) -> Table:
        """Register an existing Iceberg metadata file as a table (``overwrite``: repoint an
        existing table at it).

        Raises:
            NoSuchNamespaceError, TableAlreadyExistsError: as for create_table.
        """
        ns, name = self._table_ident(identifier)
        metadata = self._read_metadata(metadata_location)

        def stage(bound: OlympiaCatalog) -> None:
            txn = bound._staging()
            if overwrite and txn.table_exists(ns, name):
                previous: TableDef | None = txn.load_table(ns, name)
            else:
                previous = bound._require_new(ns, name, adopt=True)
            txn.put_table(table_definition(ns, name, metadata, metadata_location, previous),
                          create=previous is None)

        self._change(stage, "register_table")
        return self._as_table(ns, name, metadata, metadata_location)

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
        """Write a new metadata file and stage the definition pointing at it; the version
        records what happened to the table (``iceberg.<ns>.<table>`` in ``olympia log``)."""
        if not self._dry_run:
            self._write_metadata(metadata, io, location)
            self._written.append((io, location))
        self._remember(location, metadata)
        txn = self._staging()
        txn.put_table(table_definition(ns, name, metadata, location, previous),
                      create=previous is None)
        txn.annotate(**{f"iceberg.{ns}.{name}": _describe(before, metadata)})

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...],
                     updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        """Commit pyiceberg updates to one table as one Olympia version (or stage them in
        this catalog's transaction).

        Raises:
            CommitFailedException: a requirement does not hold at the version the transaction
                reads, or a concurrent commit changed the same table.
            NoSuchTableError: the table does not exist (and this is no create).
        """
        ns, name = self._table_ident(table.name())
        return self._change(lambda bound: bound._stage_commit(ns, name, requirements, updates),
                            "commit_table")

    def _stage_commit(self, ns: str, name: str, requirements: tuple[TableRequirement, ...],
                      updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        txn = self._staging()
        creating = any(isinstance(r, AssertCreate) for r in requirements)
        current: Table | None = None
        previous: TableDef | None = None
        if creating:
            previous = self._require_new(ns, name, adopt=True)
        elif txn.table_exists(ns, name):
            previous = self._definition(txn, ns, name)
            current = self._as_table(ns, name, self._read_metadata(previous.location),
                                     previous.location)
        else:
            raise NoSuchTableError(f"Table does not exist: {ns}.{name}")
        staged = self._update_and_stage_table(current, (ns, name), requirements, updates)
        if current is not None and staged.metadata == current.metadata:
            return _response(current.metadata, current.metadata_location)
        self._stage_metadata(ns, name, staged.metadata, staged.metadata_location, staged.io,
                             previous, current.metadata if current is not None else None)
        return _response(staged.metadata, staged.metadata_location)

    def drop_table(self, identifier: str | Identifier) -> None:
        """Drop a table from the catalog; its files stay (see purge_table).

        Raises:
            NoSuchTableError: it does not exist.
        """
        ns, name = self._table_ident(identifier)

        def stage(bound: OlympiaCatalog) -> None:
            try:
                bound._staging().drop_table(ns, name)
            except oe.NoSuchTableError:
                raise NoSuchTableError(f"Table does not exist: {ns}.{name}") from None

        self._change(stage, "drop_table")

    def purge_table(self, identifier: str | Identifier) -> None:
        """Drop a table and delete its files at once. Older catalog versions still name the
        table, but time travel and rollback can no longer read it.

        Raises:
            NoSuchTableError: it does not exist.
            CatalogError: called inside a transaction (files would go before the commit).
        """
        if self._txn is not None:
            raise oe.CatalogError("purge_table deletes files at once: call it outside a "
                                  "transaction")
        self._require_writable("purge_table")
        super().purge_table(identifier)

    def rename_table(self, from_identifier: str | Identifier,
                     to_identifier: str | Identifier) -> Table:
        """Rename a table, within its namespace or into another one (its files stay).

        Raises:
            NoSuchTableError: the table does not exist.
            NoSuchNamespaceError: the target namespace does not exist.
            TableAlreadyExistsError: the target name is taken.
        """
        ns, name = self._table_ident(from_identifier)
        to_ns, to_name = self._table_ident(to_identifier)

        def stage(bound: OlympiaCatalog) -> None:
            txn = bound._staging()
            try:
                definition = txn.load_table(ns, name)
            except oe.NoSuchTableError:
                raise NoSuchTableError(f"Table does not exist: {ns}.{name}") from None
            bound._require_new(to_ns, to_name)
            if to_ns == ns:
                txn.rename_table((ns, name), to_name)
            else:
                txn.drop_table(ns, name)
                txn.put_table(replace(definition, namespace=to_ns, name=to_name), create=True)

        self._change(stage, "rename_table")
        return self.load_table((to_ns, to_name))

    def _delete_old_metadata(self, io: FileIO, base: TableMetadata,  # type: ignore[override]
                             metadata: TableMetadata) -> None:
        # In a transaction the "old" files are still the committed ones until it commits.
        if self._txn is None:
            MetastoreCatalog._delete_old_metadata(io, base, metadata)

    # --- views (Olympia views are SQL definitions, not Iceberg views) ----------------------

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        """The Olympia views of a namespace.

        Raises:
            NoSuchNamespaceError: it does not exist.
        """
        ns = self._namespace(namespace)
        try:
            return [(ns, v) for v in self._reader().list_views(ns)]
        except oe.NoSuchNamespaceError:
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from None

    def view_exists(self, identifier: str | Identifier) -> bool:
        ns, name = self._table_ident(identifier)
        return self._reader().view_exists(ns, name)

    def drop_view(self, identifier: str | Identifier) -> None:
        """Drop an Olympia view.

        Raises:
            NoSuchViewError: it does not exist.
        """
        ns, name = self._table_ident(identifier)

        def stage(bound: OlympiaCatalog) -> None:
            try:
                bound._staging().drop_view(ns, name)
            except oe.NoSuchViewError:
                raise NoSuchViewError(f"View does not exist: {ns}.{name}") from None

        self._change(stage, "drop_view")

    def load_view(self, identifier: str | Identifier) -> View:
        """Refused: Olympia views are SQL definitions (read them with
        ``catalog.olympia.load_view``), not Iceberg view metadata.

        Raises:
            NoSuchViewError: the view does not exist.
            NotImplementedError: it exists.
        """
        if not self.view_exists(identifier):
            raise NoSuchViewError(f"View does not exist: {'.'.join(self._table_ident(identifier))}")
        raise NotImplementedError("Olympia views are SQL definitions, not Iceberg views: "
                                  "read them with OlympiaCatalog.olympia.load_view")

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        """Refused: Iceberg view metadata has no place in an Olympia catalog."""
        raise NotImplementedError("Olympia views are SQL definitions: create them with "
                                  "OlympiaCatalog.olympia.create_view or a catalog spec")


def _parts(identifier: str | Identifier) -> tuple[str, ...]:
    """pyiceberg's identifier split (a string splits on dots)."""
    return MetastoreCatalog.identifier_to_tuple(identifier)


def _response(metadata: TableMetadata, location: str) -> CommitTableResponse:
    return CommitTableResponse(metadata=metadata, metadata_location=location)  # type: ignore[call-arg]


def _describe(before: TableMetadata | None, after: TableMetadata) -> str:
    """``create``, ``append snapshot <id>`` (the snapshot's operation), or ``update``."""
    if before is None:
        return "create"
    snapshot = after.current_snapshot()
    if snapshot is not None and snapshot.snapshot_id != before.current_snapshot_id:
        operation = snapshot.summary.operation.value if snapshot.summary else "snapshot"
        return f"{operation} snapshot {snapshot.snapshot_id}"
    return "update"


def _is_iceberg(definition: TableDef) -> bool:
    return definition.format == ICEBERG and bool(definition.location)


def _properties(properties: Mapping[str, Any]) -> dict[str, str]:
    for key, value in properties.items():
        if key is None or value is None:
            raise oe.InvalidArgumentError(
                f"property {key!r} has no value: None is not a property key or value")
    return {str(k): str(v) for k, v in properties.items()}


def table_definition(ns: str, name: str, metadata: TableMetadata, location: str,
                     previous: TableDef | None) -> TableDef:
    """The Olympia definition of an Iceberg table whose current metadata file is
    ``location``: columns with field ids, table properties, partitioning and sort order in
    the format properties; comment, table type and protection kept from ``previous``."""
    sort_order = metadata.sort_order_by_id(metadata.default_sort_order_id)
    format_properties = {
        "format-version": str(metadata.format_version),
        "table-uuid": str(metadata.table_uuid),
        "table-location": metadata.location,
        "partition-spec": metadata.spec().model_dump_json(),
        "sort-order": sort_order.model_dump_json() if sort_order else "",
    }
    base = previous or TableDef(ns, name, comment=metadata.properties.get("comment", ""))
    return replace(base, namespace=ns, name=name, columns=columns_from_schema(metadata.schema()),
                   properties=dict(metadata.properties), format=ICEBERG, location=location,
                   format_properties=format_properties)
