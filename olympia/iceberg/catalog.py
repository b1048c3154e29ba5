"""OlympiaCatalog: an Olympia catalog seen through pyiceberg's Catalog interface.

Every Iceberg table is an Olympia table definition (format ``ICEBERG``) whose ``location`` is
the table's current metadata file and whose columns carry the Iceberg field ids. A table commit
validates pyiceberg's requirements against the metadata the Olympia transaction reads, writes
the new metadata file and commits ONE Olympia version replacing the definition; Olympia's
conflict analysis lets commits to other tables rebase and land, and turns a concurrent commit
to the same table into ``CommitFailedException`` (pyiceberg then refreshes and retries).

This module is the Catalog interface (namespaces, tables, views); the version a catalog
reads, time travel, transactions and the staging of metadata files are
:mod:`olympia.iceberg.session`, the definition a metadata file gives a table
:mod:`olympia.iceberg.metadata`.

Over 400 lines because pyiceberg's Catalog interface has about thirty methods; each stays short
and delegates to the modules named above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from pyiceberg.catalog import PropertiesUpdateSummary, delete_files
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
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table import CommitTableRequest, CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import AssertCreate, AssignUUIDUpdate, TableRequirement, TableUpdate
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.view import View
from pyiceberg.view.metadata import ViewVersion

from olympia import exceptions as oe
from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import Table as TableDef
from olympia.catalog.reader import CatalogReader, NamePage
from olympia.iceberg.files import check_commit, check_placement, table_files, under
from olympia.iceberg.locations import Confinement, LiveTable, confine
from olympia.iceberg.metadata import (
    identifier_parts,
    is_iceberg,
    response,
    string_properties,
    table_definition,
)
from olympia.iceberg.session import CatalogSession
from olympia.iceberg.views import IcebergViews

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["OlympiaCatalog"]

class OlympiaCatalog(CatalogSession):
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
    ``olympia.metadata-cache-size`` (parsed metadata files kept in memory, default 256; a
    metadata file is still read on every load, and parsed again only when its bytes
    changed, so a file deleted or replaced is noticed) and ``olympia.max-metadata-size``
    (the largest metadata file read, in bytes, default 32 MiB: a larger one is refused
    with ``MetadataTooLargeError`` after reading one byte past it, never whole). Properties
    missing from the call are read from ``.pyiceberg.yaml`` /
    ``PYICEBERG_CATALOG__<NAME>__*`` as usual.

    Raises:
        InvalidArgumentError: no ``uri``, or a malformed property.
        NoSuchCatalogError: no Olympia catalog at ``uri`` and ``olympia.create`` is not set.
    """

    # --- namespaces ----------------------------------------------------------------------

    def create_namespace(self, namespace: str | Identifier,
                         properties: Properties = EMPTY_DICT) -> None:
        """Create a namespace.

        Raises:
            NamespaceAlreadyExistsError: it exists.
        """
        ns = self._namespace(namespace)
        props = string_properties(properties)

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
            except oe.NamespaceNotEmptyError:
                raise NamespaceNotEmptyError(f"Namespace {ns} is not empty") from None

        self._change(stage, "drop_namespace")

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        """Every namespace; a namespace has no children (Olympia namespaces are one level).

        Raises:
            NoSuchNamespaceError: ``namespace`` is given and does not exist.
        """
        reader = self._reader()
        if identifier_parts(namespace):
            ns = self._namespace(namespace)
            if not reader.namespace_exists(ns):
                raise NoSuchNamespaceError(f"Namespace does not exist: {ns}")
            return []
        return [(ns,) for ns in reader.list_namespaces()]

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        """Whether the namespace exists (a name the format forbids never does).

        Raises:
            InvalidArgumentError: a multi-level namespace.
        """
        try:
            return self._reader().namespace_exists(self._namespace(namespace))
        except oe.InvalidNameError:
            return False

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
        new = string_properties(updates)

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
        return [(ns, name) for name in self.iceberg_tables(ns)]

    def iceberg_tables(self, namespace: str | Identifier, after: str | None = None,
                       limit: int | None = None) -> list[str]:
        """The names of a page of a namespace's Iceberg tables (:meth:`tables_page`).

        Raises:
            NoSuchNamespaceError: it does not exist.
        """
        return self.tables_page(namespace, after, limit).names

    def tables_page(self, namespace: str | Identifier, after: str | None = None,
                    limit: int | None = None) -> NamePage:
        """A page of :meth:`list_tables`: the names of a namespace's Iceberg tables in name
        order, read from the tree's keys (:meth:`CatalogReader.names_page`). Whether a
        definition file is an Iceberg table's is kept by its path (definition files are
        immutable), so each one is read and decoded once, and a page reads the keys up to
        one Iceberg table past its end.

        Args:
            namespace: The namespace.
            after: Only tables named after this cursor (the previous page's ``next_after``;
                None: from the first).
            limit: At most this many names (None: all).

        Returns:
            The names and the cursor of the next page.

        Raises:
            NoSuchNamespaceError: it does not exist.
        """
        ns = self._namespace(namespace)
        reader = self._reader()

        def iceberg(batch: list[tuple[str, str]]) -> list[bool]:
            paths = [path for _, path in batch]
            known = self._iceberg_paths.get_many(paths)
            unknown = [i for i, flag in enumerate(known) if flag is None]
            read = reader.table_definitions([paths[i] for i in unknown])
            for i, message in zip(unknown, read, strict=True):
                flag = is_iceberg(TableDef.from_proto(message, ns, batch[i][0]))
                self._iceberg_paths.put(paths[i], flag)
                known[i] = flag
            return cast(list[bool], known)  # every None was just replaced

        return self._page(reader, ObjectType.TABLE, ns, after, limit, iceberg)

    def namespaces_page(self, after: str | None = None, limit: int | None = None) -> NamePage:
        """A page of :meth:`list_namespaces` (:meth:`CatalogReader.names_page`).

        Args:
            after: Only namespaces named after this cursor (None: from the first).
            limit: At most this many names (None: all).

        Returns:
            The names and the cursor of the next page.
        """
        return self._page(self._reader(), ObjectType.NAMESPACE, None, after, limit)

    def views_page(self, namespace: str | Identifier, after: str | None = None,
                   limit: int | None = None) -> NamePage:
        """A page of :meth:`list_views` (:meth:`CatalogReader.names_page`).

        Args:
            namespace: The namespace.
            after: Only views named after this cursor (None: from the first).
            limit: At most this many names (None: all).

        Returns:
            The names and the cursor of the next page.

        Raises:
            NoSuchNamespaceError: it does not exist.
        """
        ns = self._namespace(namespace)
        return self._page(self._reader(), ObjectType.VIEW, ns, after, limit)

    @staticmethod
    def _page(reader: CatalogReader, kind: ObjectType, ns: str | None, after: str | None,
              limit: int | None,
              keep: Callable[[list[tuple[str, str]]], list[bool]] | None = None,
              ) -> NamePage:
        try:
            return reader.names_page(kind, ns, after, limit, keep)
        except oe.NoSuchNamespaceError:
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from None

    def load_table(self, identifier: str | Identifier) -> Table:
        """The table as this catalog sees it (latest, pinned version, or transaction).

        Raises:
            NoSuchTableError: no such table; NoSuchIcebergTableError if it is not Iceberg.
        """
        ns, name = self._table_ident(identifier)
        definition = self._definition(self._reader(), ns, name)
        return self._as_table(ns, name, self._table_metadata(definition), definition.location)

    def table_exists(self, identifier: str | Identifier) -> bool:
        """Whether the table exists (a name the format forbids never does).

        Raises:
            InvalidArgumentError: a multi-level namespace.
        """
        ns, name = self._table_ident(identifier)
        try:
            return self._reader().table_exists(ns, name)
        except oe.InvalidNameError:
            return False

    def _definition(self, reader: CatalogReader, ns: str, name: str) -> TableDef:
        try:
            definition = reader.load_table(ns, name)
        except oe.NoSuchTableError:
            raise NoSuchTableError(f"Table does not exist: {ns}.{name}") from None
        if not is_iceberg(definition):
            raise NoSuchIcebergTableError(
                f"Table {ns}.{name} is not an Iceberg table yet (format {definition.format}, "
                f"metadata location {definition.location or 'empty'})")
        return definition

    def _as_table(self, ns: str, name: str, metadata: TableMetadata, location: str) -> Table:
        io = self._load_file_io(metadata.properties, location)
        return Table((ns, name), metadata, location, io, self)

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

        Args:
            identifier: The new table (or, with ``overwrite``, the table to repoint).
            metadata_location: The metadata file.
            overwrite: Repoint the table if it exists.

        Returns:
            The table.

        Raises:
            NoSuchNamespaceError, TableAlreadyExistsError: as for create_table.
            IcebergMetadataError: the metadata file is missing or unreadable.
            LocationInUseError: another live table uses the metadata file or its table
                location overlaps another live table's (aliasing it would let one table's
                commits and purges damage the other), or that of another table at a kept
                catalog version.
            TableLocationError: (a :meth:`confined` catalog) a file the metadata names, or a
                ``write.*.path``, lies outside its table location (every file is checked
                before it is read).
        """
        ns, name = self._table_ident(identifier)
        metadata, digest = self._verified_metadata(metadata_location, f"{ns}.{name}")
        if self._confined:
            check_placement(metadata, f"{ns}.{name}")
            table_files(self._as_table(ns, name, metadata, metadata_location),
                        under(metadata.location, f"{ns}.{name}"))

        def stage(bound: OlympiaCatalog) -> None:
            txn = bound._staging()
            if overwrite and txn.table_exists(ns, name):
                previous: TableDef | None = txn.load_table(ns, name)
            else:
                previous = bound._require_new(ns, name, adopt=True)
            bound._check_free(f"table {ns}.{name}", metadata.location, metadata_location,
                              (ns, name), str(metadata.table_uuid))
            txn.put_table(table_definition(ns, name, metadata, metadata_location, previous,
                                           digest), create=previous is None)

        self._change(stage, "register_table")
        return self._as_table(ns, name, metadata, metadata_location)

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...],
                     updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        """Commit pyiceberg updates to one table as one Olympia version (or stage them in
        this catalog's transaction).

        Raises:
            CommitFailedException: a requirement does not hold at the version the transaction
                reads, or a concurrent commit changed the same table.
            KeptSnapshotError: (a CommitFailedException) the updates remove a snapshot a
                kept catalog version reads (olympia/iceberg/retention.py).
            NoSuchTableError: the table does not exist (and this is no create).
            TableLocationError: (a :meth:`confined` catalog) the commit would make the
                table reference a file outside its location.
        """
        ns, name = self._table_ident(table.name())
        return self._change(lambda bound: bound._stage_commit(ns, name, requirements, updates),
                            "commit_table")

    def commit_tables(self, changes: Sequence[CommitTableRequest],
                      ) -> list[CommitTableResponse]:
        """Commit changes to several tables as ONE Olympia version, or commit nothing.

        Each change's requirements are checked against its table as this transaction sees it:
        the version the transaction reads plus the changes before it in ``changes``, so two
        changes to one table apply in order.

        Args:
            changes: One request per table change: identifier, requirements and updates (a
                change requiring ``assert-create`` creates its table).

        Returns:
            Each table's new metadata and metadata file, in the order of ``changes``.

        Raises:
            CommitFailedException: a requirement does not hold, or a concurrent commit changed
                one of the same tables; no table is changed.
            KeptSnapshotError: (a CommitFailedException) a change removes a snapshot a kept
                catalog version reads; no table is changed.
            NoSuchTableError: a table does not exist (and its change is no create).
            InvalidArgumentError: an identifier with a multi-level namespace.
            TableLocationError: (a :meth:`confined` catalog) a change would make its table
                reference a file outside its location; no table is changed.
        """
        targets = [self._table_ident((*change.identifier.namespace.root,
                                      change.identifier.name)) for change in changes]

        def stage(bound: OlympiaCatalog) -> list[CommitTableResponse]:
            return [bound._stage_commit(ns, name, change.requirements, change.updates)
                    for (ns, name), change in zip(targets, changes, strict=True)]

        return self._change(stage, "commit_tables")

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
            current = self._as_table(ns, name, self._table_metadata(previous),
                                     previous.location)
        else:
            raise NoSuchTableError(f"Table does not exist: {ns}.{name}")
        _check_uuid(f"{ns}.{name}", current.metadata if current is not None else None, updates)
        staged = self._update_and_stage_table(current, (ns, name), requirements, updates)
        before = current.metadata if current is not None else None
        if current is not None and staged.metadata == current.metadata:
            return response(current.metadata, current.metadata_location)
        if self._confined:
            check_commit(before, staged.metadata, updates, staged.io, f"{ns}.{name}",
                         self._store.storage.map_requests, self._manifest_lists)
        metadata = staged.metadata
        if current is not None:  # kept catalog versions stay readable (retention.py)
            metadata = self._retention.apply(ns, name, current.metadata,
                                             current.metadata_location, staged.metadata,
                                             updates)
        self._stage_metadata(ns, name, metadata, staged.metadata_location, staged.io,
                             previous, before)
        return response(metadata, staged.metadata_location)

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

    def purge_table(self, identifier: str | Identifier, *, within: str | None = None) -> None:
        """Drop a table and delete its files at once. Older catalog versions still name the
        table, but time travel and rollback can no longer read it.

        Before anything is dropped, read or deleted, every file the table's metadata names
        (metadata files, manifest lists, manifests, data files) must lie under the table's
        own location (and that under ``within``), each checked before it is read; and no
        file may lie in the location of another table, or be its metadata file, at any
        kept catalog version (an export's included). Otherwise the purge is refused and
        nothing is dropped or deleted. The drop lands only if the table is still at the
        metadata whose files were checked, so the files deleted are exactly the ones
        checked. (A :meth:`confined` catalog keeps every file a table references under
        its location, so no other table's files are there to be deleted.)

        Args:
            identifier: The table.
            within: If given, the table's location must lie under this location (a server
                purging what clients wrote deletes nothing outside its warehouse).

        Raises:
            NoSuchTableError: it does not exist.
            TableLocationError: one of its files lies outside its location (or its location
                outside ``within``), or is a refused form.
            LocationInUseError: one of its files belongs to another table at a kept version.
            CommitFailedException: the table changed after its files were listed (nothing
                dropped or deleted).
            CatalogError: called inside a transaction (files would go before the commit).
        """
        if self._txn is not None:
            raise oe.CatalogError("purge_table deletes files at once: call it outside a "
                                  "transaction")
        self._require_writable("purge_table")
        ns, name = self._table_ident(identifier)
        table = self.load_table((ns, name))
        refused = f"purge_table {ns}.{name} refused, nothing dropped or deleted"
        own = table.metadata.location
        if within is not None:
            confine(own, within, f"{refused}: its location", "the warehouse")
        confinement = Confinement(own, "its location")
        files = table_files(table, lambda path, kind: confinement(
            path, f"{refused}: its {kind} file"))
        uuid = str(table.metadata.table_uuid)
        with self._live() as live, self._kept_tables() as kept:

            def itself(other: LiveTable) -> bool:
                """The table under this or an earlier name (not a live alias of its uuid)."""
                return other.uuid == uuid and (other.key == (ns, name) or other.key not in live)

            for kind, placed in files.items():
                for path, at in placed.items():
                    other = kept.index.owner(at, itself)
                    if other is not None:
                        raise oe.LocationInUseError(
                            f"{refused}: its {kind} file {path} belongs to live table "
                            f"{other.name} (in its location, or its metadata file, at the "
                            "latest or a kept older catalog version)", other.name)

        def stage(bound: OlympiaCatalog) -> None:
            txn = bound._staging()
            current = bound._definition(txn, ns, name)
            if current.location != table.metadata_location:
                raise CommitFailedException(
                    f"{refused}: the table changed after its files were listed (its "
                    f"metadata is now {current.location})")
            txn.drop_table(ns, name)

        self._change(stage, "purge_table")
        for kind, placed in files.items():
            delete_files(table.io, set(placed), kind)

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

    # --- views (olympia/iceberg/views.py) ------------------------------------------------

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        """The views of a namespace: Iceberg views and views defined with Olympia's own tools.

        Raises:
            NoSuchNamespaceError: it does not exist.
        """
        ns = self._namespace(namespace)
        try:
            return [(ns, v) for v in self._reader().list_views(ns)]
        except oe.NoSuchNamespaceError:
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from None

    def view_exists(self, identifier: str | Identifier) -> bool:
        """Whether the view exists (a name the format forbids never does).

        Raises:
            InvalidArgumentError: a multi-level namespace.
        """
        ns, name = self._table_ident(identifier)
        try:
            return self._reader().view_exists(ns, name)
        except oe.InvalidNameError:
            return False

    def create_view(self, identifier: str | Identifier, schema: Schema | pa.Schema,
                    view_version: ViewVersion, location: str | None = None,
                    properties: Properties = EMPTY_DICT) -> View:
        """Create an Iceberg view: its first metadata file under ``location`` and the Olympia
        view mirroring it, in one version (``olympia serve`` serves it too).

        Args:
            identifier: The view.
            schema: Its schema (given fresh field ids, as the REST catalog does).
            view_version: Its first version: one SQL representation, a one-level default
                namespace, schema id ``-1`` or ``0``.
            location: Where its metadata files go (``None``: derived as a table's).
            properties: Its properties.

        Returns:
            The view.

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            ViewAlreadyExistsError: a table or view of that name exists.
            InvalidArgumentError: a reserved property, or a version an Olympia view cannot
                hold.
        """
        ns, name = self._table_ident(identifier)
        fresh = assign_fresh_schema_ids(self._convert_schema_if_needed(schema))
        metadata, _ = IcebergViews(self).create(ns, name, fresh, view_version, location,
                                                string_properties(properties))
        return View((ns, name), metadata)

    def load_view(self, identifier: str | Identifier) -> View:
        """The Iceberg view, read from the metadata file its Olympia view names.

        Raises:
            NoSuchViewError: the view does not exist.
            NotImplementedError: it was defined (or redefined since) with Olympia's own
                tools, so no Iceberg view metadata describes it: read it with
                ``catalog.olympia.load_view``.
            CorruptFileError: its metadata file is missing or unreadable.
        """
        ns, name = self._table_ident(identifier)
        try:
            metadata, _ = IcebergViews(self).load(ns, name)
        except oe.NoSuchViewError:
            raise NoSuchViewError(f"View does not exist: {ns}.{name}") from None
        return View((ns, name), metadata)

    def drop_view(self, identifier: str | Identifier) -> None:
        """Drop a view (its metadata files stay).

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

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        """Refused: create the view with :meth:`create_view` (its metadata file is then one
        the catalog wrote)."""
        raise NotImplementedError("register_view is not supported by OlympiaCatalog: create "
                                  "the view with create_view")


def _check_uuid(table: str, current: TableMetadata | None,
                updates: tuple[TableUpdate, ...]) -> None:
    """Refuse an ``assign-uuid`` that would change a table's uuid, as Iceberg's Java
    catalog does (``Cannot reassign uuid``): a uuid names one table for its whole life. The
    same uuid again is accepted (it changes nothing); a table being created takes the
    first one assigned.

    Raises:
        InvalidArgumentError: an update assigns another uuid.
    """
    uuid = current.table_uuid if current is not None else None
    for update in updates:
        if not isinstance(update, AssignUUIDUpdate):
            continue
        if uuid is not None and update.uuid != uuid:
            raise oe.InvalidArgumentError(
                f"table {table}: cannot reassign its uuid {uuid} to {update.uuid}; a table "
                "keeps the uuid it was created with")
        uuid = update.uuid

