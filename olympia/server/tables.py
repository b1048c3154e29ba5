"""The REST catalog's table operations (``/v1/namespaces/{namespace}/tables...``,
``/v1/tables/rename``, ``/v1/transactions/commit``), part of
:class:`~olympia.server.service.CatalogService`."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyiceberg.catalog.rest import TableResponse
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableRequest, CommitTableResponse
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import SetLocationUpdate, SetPropertiesUpdate, TableUpdate

from olympia.iceberg.metadata import IcebergMetadataError
from olympia.lru import LruCache
from olympia.server.commits import change_of, retry_lost_races
from olympia.server.errors import RestError, bad_request
from olympia.server.models import (
    CommitTableBody,
    CommitTransactionBody,
    CreateTableBody,
    RegisterTableBody,
    RenameTableBody,
)
from olympia.server.operations import Operations
from olympia.server.paging import Page

#: Encoded ``load_table`` answers a service keeps (:meth:`TableOperations.load_table`).
LOADED_TABLES = 64


class TableOperations(Operations):
    """The table operations."""

    _loaded: LruCache[tuple[str, str], tuple[TableMetadata, bytes]]

    def list_tables(self, namespace: str, page: Page) -> str:
        """``GET /v1/namespaces/{namespace}/tables``: a page of its Iceberg tables (the
        answer's JSON text), which reads the catalog's keys from where the previous page
        ended up to its own end, never every definition (:meth:`OlympiaCatalog.tables_page`).

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            RestError: a page token this server did not give out for this listing.
        """
        return self._listing(namespace, page, "tables", self.catalog.tables_page)

    def create_table(self, namespace: str, body: CreateTableBody) -> TableResponse:
        """``POST /v1/namespaces/{namespace}/tables``; with ``stage-create`` nothing is
        committed and the answer has no metadata location (the client commits the create
        later, with ``assert-create``).

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            TableAlreadyExistsError: a table or view of that name exists.
            RestError: a refused property.
            TableLocationError: a location outside the warehouse (or in a refused form), or
                a ``write.*.path`` outside the table's location.
            LocationInUseError: the location is another table's, live or at a kept version
                (a default location is derived beside one only kept versions had).
        """
        identifier = (namespace, body.name)
        self.warehouse.check_properties(body.properties, f"table {namespace}.{body.name}")
        location = self.catalog._resolve_table_location(body.location, namespace, body.name)
        self.warehouse.check_place(location, f"the location of table {namespace}.{body.name}")
        spec = body.partition_spec or UNPARTITIONED_PARTITION_SPEC
        order = body.write_order or UNSORTED_SORT_ORDER
        if body.stage_create:
            if not self.catalog.namespace_exists(namespace):
                raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
            if self.catalog.table_exists(identifier) or self.catalog.view_exists(identifier):
                raise RestError(409, "AlreadyExistsException",
                                f"Table {namespace}.{body.name} already exists")
            staged = self.catalog._create_staged_table(identifier, body.table_schema, location,
                                                       spec, order, body.properties)
            return self._response(staged.metadata, None)
        table = self.catalog.create_table(identifier, body.table_schema, location, spec, order,
                                          body.properties)
        return self._response(table.metadata, table.metadata_location)

    def load_table(self, namespace: str, name: str, snapshots: str) -> bytes:
        """``GET /v1/namespaces/{namespace}/tables/{table}``; ``snapshots`` is ``all`` or
        ``refs`` (only the snapshots a branch or tag points at).

        Encoding a table's metadata costs more than finding and reading it, so the encoded
        answer is kept (:data:`LOADED_TABLES`, by metadata file and ``snapshots``) for as
        long as the catalog returns the very same parsed metadata: it does so only while
        the file's bytes, read again for every load, have the digest they had when parsed.

        Returns:
            The ``LoadTableResult``, encoded as JSON.

        Raises:
            NoSuchTableError: the table does not exist.
            RestError: another ``snapshots`` value.
        """
        if snapshots not in ("all", "refs"):
            raise bad_request(f"snapshots must be all or refs, got {snapshots!r}")
        table = self.catalog.load_table((namespace, name))
        key = (table.metadata_location, snapshots)
        kept = self._loaded.get(key)
        if kept is not None and kept[0] is table.metadata:
            return kept[1]
        metadata = table.metadata
        if snapshots == "refs":
            kept_ids = {ref.snapshot_id for ref in metadata.refs.values()}
            metadata = metadata.model_copy(
                update={"snapshots": [s for s in metadata.snapshots if s.snapshot_id in kept_ids]})
        body = self._response(metadata, table.metadata_location).model_dump_json().encode()
        self._loaded.put(key, (table.metadata, body))
        return body

    def table_exists(self, namespace: str, name: str) -> bool:
        """``HEAD /v1/namespaces/{namespace}/tables/{table}``."""
        return self.catalog.table_exists((namespace, name))

    def drop_table(self, namespace: str, name: str, purge: bool) -> None:
        """``DELETE /v1/namespaces/{namespace}/tables/{table}``; ``purge`` deletes its files.

        Raises:
            NoSuchTableError: the table does not exist.
            LocationInUseError: (purge) one of its files belongs to another table, live now
                or at a kept catalog version.
            TableLocationError: (purge) its location lies outside the warehouse, or its
                metadata names a file outside its location (a client wrote that metadata;
                the server reads and deletes nothing outside it).
            CommitFailedException: (purge) the table changed after its files were listed.
        """
        if purge:
            self.catalog.purge_table((namespace, name), within=self.warehouse.location)
        else:
            self.catalog.drop_table((namespace, name))

    def rename_table(self, body: RenameTableBody) -> None:
        """``POST /v1/tables/rename``.

        Raises:
            NoSuchTableError: the source does not exist.
            NoSuchNamespaceError: the destination namespace does not exist.
            TableAlreadyExistsError: the destination is taken.
        """
        self.catalog.rename_table(self.table_identifier(body.source),
                                  self.table_identifier(body.destination))

    def register_table(self, namespace: str, body: RegisterTableBody) -> TableResponse:
        """``POST /v1/namespaces/{namespace}/register``.

        Raises:
            NoSuchNamespaceError, TableAlreadyExistsError: as for create.
            RestError: 400 when the metadata file is missing, a folder, larger than the
                catalog reads or no Iceberg table metadata (the client offered it: no table
                exists that could be corrupt), or when the table has a refused property.
            TableLocationError: the metadata file or the table it describes lies outside
                the warehouse (or is in a refused form), or a file its metadata names (or
                a ``write.*.path``) lies outside the table's location.
            LocationInUseError: the location is another table's, live or at a kept version.
        """
        what = f"table {namespace}.{body.name}"
        self.warehouse.check_place(body.metadata_location,
                                   f"the metadata file registered as {what}")
        # read before anything is committed (the catalog keeps it cached for the register)
        try:
            metadata = self.catalog._read_metadata(body.metadata_location,
                                                   f"{namespace}.{body.name}")
        except IcebergMetadataError as exc:
            raise bad_request(f"cannot register {what}: {exc}") from None
        self.warehouse.check_place(metadata.location, f"the location of {what}")
        self.warehouse.check_properties(metadata.properties, what)
        table = self.catalog.register_table((namespace, body.name), body.metadata_location,
                                            body.overwrite)
        return self._response(table.metadata, table.metadata_location)

    def commit_table(self, namespace: str, name: str, body: CommitTableBody) -> bytes:
        """``POST /v1/namespaces/{namespace}/tables/{table}``: one table's requirements and
        updates as one Olympia version.

        Returns:
            The ``CommitTableResponse``, encoded as JSON: its metadata is the text the
            commit wrote to the new metadata file, not encoded a second time.

        Raises:
            CommitFailedException: a requirement does not hold.
            NoSuchTableError: the table does not exist (and this is no create).
            RestError: the body names another table, or an update sets a refused property.
            TableLocationError: an update places files outside the warehouse (or names a
                place in a refused form), or the commit would make the table reference a
                file outside its location (a new manifest list, manifest, data, delete or
                statistics file, a ``write.*.path``, a location that does not hold the
                table's files).
        """
        self.check_named(body.identifier, "table", namespace, name)
        done = self._commit([change_of(namespace, name, body)])[0]
        text = self.catalog.metadata_text(done.metadata, done.metadata_location)
        return b'{"metadata-location":%s,"metadata":%s}' % (
            json.dumps(done.metadata_location).encode(), text)

    def commit_transaction(self, body: CommitTransactionBody) -> None:
        """``POST /v1/transactions/commit``: every table's changes as ONE Olympia version,
        or none of them.

        Raises:
            CommitFailedException: a requirement of any change does not hold.
            NoSuchTableError: a table does not exist.
            RestError: an identifier with a multi-level namespace, or a refused update.
        """
        self._commit([change_of(*self.table_identifier(change.identifier), change)
                      for change in body.table_changes])

    def require_table(self, namespace: str, name: str) -> None:
        """Check that a table exists (metrics reports name one).

        Raises:
            NoSuchTableError: it does not exist.
        """
        if not self.catalog.table_exists((namespace, name)):
            raise RestError(404, "NoSuchTableException",
                            f"Table does not exist: {namespace}.{name}")

    def _commit(self, changes: list[CommitTableRequest]) -> list[CommitTableResponse]:
        for change in changes:
            what = f"table {'.'.join(self.table_identifier(change.identifier))}"
            self._check_updates(change.updates, what)
        return retry_lost_races(lambda: self.catalog.commit_tables(changes),
                                self.catalog.olympia.commit_options)

    def _check_updates(self, updates: Sequence[TableUpdate], what: str) -> None:
        for update in updates:
            if isinstance(update, SetLocationUpdate):
                self.warehouse.check_place(update.location, f"the location of {what}")
            elif isinstance(update, SetPropertiesUpdate):
                self.warehouse.check_properties(update.updates, what)
