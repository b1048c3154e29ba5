"""What the REST server does for each request, over ONE shared :class:`OlympiaCatalog`.

One catalog object per server process: every commit goes through the library's commit path,
whose group commit serves the requests of all threads. A table commit that loses a race to a
concurrent commit of the same table is tried again here against the new state: it lands if
the client's requirements still hold, and is refused (``CommitFailedException``, 409) only
when they do not.

Clients choose names, never places outside the server's warehouse: every place a client
names (a table or namespace location, a registered metadata file) is parsed once by
:func:`olympia.iceberg.locations.confine` and must lie under the warehouse in a form every
file IO reads alike (a ``TableLocationError``, answered 400, otherwise), and table
properties that steer the server's own file IO (``s3.*``, ``py-io-impl``, ...) are refused.
The catalog is :meth:`~olympia.iceberg.OlympiaCatalog.confined`: every file a table
references (``write.*.path`` too) must lie under the table's own location, so a purge never
deletes a file another table references.

A client configured with ``warehouse=<warehouse>@<version>`` (or ``@<ISO-8601 instant>``,
``@export:<name>``) gets the prefix ``version-<n>``: every table read through it is as it
was in Olympia version ``n``, consistently across tables, and nothing can be written there.
With ``@txn:<id>`` it gets ``txn-<id>``: inside distributed transaction ``<id>``
(:mod:`olympia.server.transactions`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyiceberg.catalog import LOCATION, WAREHOUSE_LOCATION
from pyiceberg.catalog.rest import TableResponse, ViewResponse
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableRequest, CommitTableResponse, Namespace, TableIdentifier
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import SetLocationUpdate, SetPropertiesUpdate, TableUpdate
from pyiceberg.view.metadata import ViewMetadata

from olympia import exceptions as oe
from olympia.catalog.commit import CommitOptions
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.iceberg.locations import confine, place
from olympia.iceberg.metadata import IcebergMetadataError
from olympia.lru import LruCache
from olympia.server.errors import RestError, bad_request
from olympia.server.models import (
    CommitTableBody,
    CommitTransactionBody,
    CommitViewBody,
    CreateNamespaceBody,
    CreateTableBody,
    CreateViewBody,
    RegisterTableBody,
    RenameTableBody,
    UpdateNamespacePropertiesBody,
)
from olympia.server.views import IcebergViews

T = TypeVar("T")

#: Table properties a client may not set: they steer the server's own file IO.
REFUSED_PROPERTY_PREFIXES = ("s3.", "gcs.", "adls.", "hdfs.", "oss.", "hf.", "client.", "py-",
                             "write.py-location-provider.")


#: The prefix under which catalog version ``n`` is served.
VERSION_PREFIX = "version-{}"  # one path segment: clients encode a prefix as one
#: The prefix under which distributed transaction ``<id>`` is served.
TXN_PREFIX = "txn-{}"
#: How many pinned catalog versions a server keeps open.
PINNED_VERSIONS = 16
LOADED_TABLES = 64  # encoded load_table answers a service keeps (CatalogService.load_table)


@dataclass(frozen=True)
class Page:
    """One page of a listing: ``token`` is where the previous page ended (``None`` or empty:
    the first page), ``size`` the most entries to return (``None``: all)."""

    token: str | None
    size: int | None


class CatalogService:
    """The REST catalog's operations over one Olympia catalog.

    Args:
        catalog: The catalog every request uses (one per server process); the service
            uses it :meth:`~olympia.iceberg.OlympiaCatalog.confined`.
        client_properties: What the operator gives clients (``--client-property``): the
            config defaults and every loaded table's ``config``. Never the server's own
            storage settings.

    Raises:
        InvalidArgumentError: the catalog has no warehouse (clients could place tables
            anywhere the server can write), or it is a form a FileIO could read differently
            (a relative path, a query, a ``..`` step...).
    """

    def __init__(self, catalog: OlympiaCatalog, client_properties: Mapping[str, str], *,
                 shown_as: Sequence[str] = ()) -> None:
        warehouse = catalog.properties.get(WAREHOUSE_LOCATION)
        if not warehouse:
            raise oe.InvalidArgumentError(
                "the server needs a warehouse: pass --warehouse or set the catalog's "
                "warehouse property")
        try:
            self._place = place(warehouse, "the server's warehouse")
        except oe.TableLocationError as exc:
            raise oe.InvalidArgumentError(str(exc)) from None
        self.catalog = catalog.confined()
        self.warehouse = warehouse.rstrip("/")
        self.client_properties = dict(client_properties)
        #: The levels answers put before a namespace (``sys.dtxns.<id>`` for a transaction
        #: reached by those names), and that a body's namespaces may start with.
        self.shown_as = tuple(shown_as)
        self.views = IcebergViews(catalog, self.warehouse)
        self._pinned: LruCache[int, CatalogService] = LruCache(PINNED_VERSIONS)
        self._loaded: LruCache[tuple[str, str], tuple[TableMetadata, bytes]] = LruCache(
            LOADED_TABLES)

    def at_version(self, version: int) -> CatalogService:
        """This service reading catalog version ``version``, read-only.

        Raises:
            NoSuchVersionError, VersionExpiredError: no such version (any more).
        """
        pinned = self._pinned.get(version)
        if pinned is None:
            pinned = CatalogService(self.catalog.at_version(version), self.client_properties)
            self._pinned.put(version, pinned)
        return pinned

    # --- config ------------------------------------------------------------------------

    def config(self, warehouse: str | None, endpoints: Sequence[str]) -> dict[str, Any]:
        """``GET /v1/config``.

        Args:
            warehouse: The warehouse a client asked for (``None``: this server's), in any
                spelling of the same place (:meth:`_version_selector`), with ``@<version>``,
                ``@<ISO-8601 instant>`` or ``@export:<name>`` for a read-only catalog
                version, or ``@txn:<id>`` for distributed transaction ``<id>`` (answered
                with its prefix).
            endpoints: The endpoints the server supports.

        Raises:
            RestError: 400 when ``warehouse`` is another one (this server serves one).
            NoSuchVersionError, NoSuchExportError, InvalidArgumentError: the version asked
                for does not exist, or the selector is neither a number, an instant nor an
                export.
        """
        overrides: dict[str, str] = {}
        selector = self._version_selector(warehouse) if warehouse else None
        if selector is not None:
            overrides["prefix"] = (self._transaction_prefix(selector.removeprefix("txn:"))
                                   if selector.startswith("txn:")
                                   else VERSION_PREFIX.format(self._select(selector)))
        return {"defaults": dict(self.client_properties), "overrides": overrides,
                "endpoints": list(endpoints)}

    def _transaction_prefix(self, txn_id: str) -> str:
        """The prefix of open transaction ``txn_id``.

        Raises:
            NoSuchTransactionError, TransactionExpiredError, CatalogError: it is gone,
                expired, or being committed or aborted.
        """
        self.catalog.olympia.distributed_transaction(txn_id).check_open()
        return TXN_PREFIX.format(txn_id)

    def _version_selector(self, warehouse: str) -> str | None:
        """What follows the ``@`` of a client's ``warehouse`` (``None``: it has none, the
        latest catalog). The warehouse is compared as a place
        (:func:`olympia.iceberg.locations.place`), never as a string, so every spelling of
        the server's warehouse names it: ``/w``, ``file:/w`` and ``file:///w`` on local
        disk, and a trailing ``/`` or none.

        Raises:
            RestError: 400 naming the server's warehouse when ``warehouse`` names another
                place or is a refused form (a relative path, a ``..`` step, ...).
        """
        if self._names_this(warehouse):
            return None
        for at, char in enumerate(warehouse):
            if char == "@" and self._names_this(warehouse[:at]):
                return warehouse[at + 1:]
        base = warehouse.partition("@")[0]
        try:
            place(base, "its location")
            why = ""
        except oe.TableLocationError as exc:
            why = f" ({exc})"
        spelt = ("file:///<path>, file:/<path> or /<path>, " if self._place[0] == "" else "")
        raise bad_request(
            f"warehouse {warehouse!r} is not served here{why}: this server serves one "
            f"warehouse, {self.warehouse} (spelt {spelt}with or without a trailing /), "
            "optionally followed by @<version>, @<instant>, @export:<name> or @txn:<id>")

    def _names_this(self, warehouse: str) -> bool:
        """Whether ``warehouse`` is a spelling of this server's warehouse."""
        try:
            return place(warehouse, "the warehouse asked for") == self._place
        except oe.TableLocationError:
            return False

    def _select(self, selector: str) -> int:
        """The catalog version ``<version>``, ``<instant>`` or ``export:<name>`` names."""
        if selector.isdigit():
            return self.at_version(int(selector)).catalog.version
        if selector.startswith("export:"):
            return self.catalog.at_export(selector.removeprefix("export:")).version
        return self.catalog.as_of(selector).version

    # --- namespaces --------------------------------------------------------------------

    def list_namespaces(self, parent: str | None, page: Page) -> dict[str, Any]:
        """``GET /v1/namespaces``: every namespace, or the children of ``parent`` (none:
        namespaces are one level).

        Raises:
            NoSuchNamespaceError: ``parent`` does not exist.
        """
        if parent is not None:
            if not self.catalog.namespace_exists(parent):
                raise NoSuchNamespaceError(f"Namespace does not exist: {parent}")
            names: list[str] = []
        else:
            names = sorted(ns for (ns,) in self.catalog.list_namespaces())
        shown, token = paginate(names, page)
        return {"namespaces": [[*self.shown_as, name] for name in shown],
                "next-page-token": token}

    def create_namespace(self, body: CreateNamespaceBody) -> dict[str, Any]:
        """``POST /v1/namespaces``.

        Raises:
            RestError: a multi-level or empty namespace.
            TableLocationError: a ``location`` property outside the warehouse (or in a
                refused form).
            NamespaceAlreadyExistsError: it exists.
        """
        name = self.one_level(body.namespace)
        self._check_namespace_location(body.properties, name)
        self.catalog.create_namespace(name, body.properties)
        return {"namespace": [*self.shown_as, name], "properties": body.properties}

    def load_namespace(self, namespace: str) -> dict[str, Any]:
        """``GET /v1/namespaces/{namespace}``.

        Raises:
            NoSuchNamespaceError: it does not exist.
        """
        return {"namespace": [*self.shown_as, namespace],
                "properties": self.catalog.load_namespace_properties(namespace)}

    def namespace_exists(self, namespace: str) -> bool:
        """``HEAD /v1/namespaces/{namespace}``."""
        return self.catalog.namespace_exists(namespace)

    def drop_namespace(self, namespace: str) -> None:
        """``DELETE /v1/namespaces/{namespace}``.

        Raises:
            NoSuchNamespaceError: it does not exist.
            NamespaceNotEmptyError: it holds tables or views.
        """
        self.catalog.drop_namespace(namespace)

    def update_namespace_properties(self, namespace: str,
                                    body: UpdateNamespacePropertiesBody) -> dict[str, Any]:
        """``POST /v1/namespaces/{namespace}/properties``.

        Raises:
            NoSuchNamespaceError: it does not exist.
            RestError: 422 when a key is both removed and updated.
            TableLocationError: a ``location`` outside the warehouse (or in a refused form).
        """
        both = sorted(set(body.removals) & set(body.updates))
        if both:
            raise RestError(422, "UnprocessableEntityException",
                            f"properties both removed and updated: {', '.join(both)}")
        self._check_namespace_location(body.updates, namespace)
        summary = self.catalog.update_namespace_properties(namespace, set(body.removals),
                                                           body.updates)
        return {"updated": summary.updated, "removed": summary.removed,
                "missing": summary.missing or []}

    # --- tables ------------------------------------------------------------------------

    def list_tables(self, namespace: str, page: Page) -> dict[str, Any]:
        """``GET /v1/namespaces/{namespace}/tables``: a page reads the catalog's keys from
        where the previous page ended up to its own end, never every definition.

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            RestError: a page token this server did not give out.
        """
        after = decode_token(page.token) if page.token else None
        names = self.catalog.iceberg_tables(namespace, after,
                                            None if page.size is None else page.size + 1)
        more = page.size is not None and len(names) > page.size
        shown = names[:page.size] if more else names
        return _listing([*self.shown_as, namespace], shown,
                        encode_token(shown[-1]) if more else None)

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
        self._check_properties(body.properties, f"table {namespace}.{body.name}")
        location = self.catalog._resolve_table_location(body.location, namespace, body.name)
        self._check_place(location, f"the location of table {namespace}.{body.name}")
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
            self.catalog.purge_table((namespace, name), within=self.warehouse)
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
        self._check_place(body.metadata_location, f"the metadata file registered as {what}")
        # read before anything is committed (the catalog keeps it cached for the register)
        try:
            metadata = self.catalog._read_metadata(body.metadata_location,
                                                   f"{namespace}.{body.name}")
        except IcebergMetadataError as exc:
            raise bad_request(f"cannot register {what}: {exc}") from None
        self._check_place(metadata.location, f"the location of {what}")
        self._check_properties(metadata.properties, what)
        table = self.catalog.register_table((namespace, body.name), body.metadata_location,
                                            body.overwrite)
        return self._response(table.metadata, table.metadata_location)

    def commit_table(self, namespace: str, name: str,
                     body: CommitTableBody) -> CommitTableResponse:
        """``POST /v1/namespaces/{namespace}/tables/{table}``: one table's requirements and
        updates as one Olympia version.

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
        if body.identifier is not None:
            named = self.table_identifier(body.identifier)
            if named != (namespace, name):
                raise bad_request(f"the body names table {'.'.join(named)} but the path "
                                  f"names {namespace}.{name}")
        return self._commit([change_of(namespace, name, body)])[0]

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

    def one_level(self, namespace: Sequence[str]) -> str:
        """The one-level namespace a body names (after :attr:`shown_as`).

        Raises:
            RestError: no level, a blank name, or more than one level.
        """
        if self.shown_as and tuple(namespace[:len(self.shown_as)]) == self.shown_as:
            namespace = namespace[len(self.shown_as):]
        return one_level(namespace)

    def table_identifier(self, identifier: TableIdentifier) -> tuple[str, str]:
        """``(namespace, name)`` of a body's table identifier.

        Raises:
            RestError: a multi-level or empty namespace.
        """
        return self.one_level(identifier.namespace.root), identifier.name

    def require_table(self, namespace: str, name: str) -> None:
        """Check that a table exists (metrics reports name one).

        Raises:
            NoSuchTableError: it does not exist.
        """
        if not self.catalog.table_exists((namespace, name)):
            raise RestError(404, "NoSuchTableException",
                            f"Table does not exist: {namespace}.{name}")

    # --- views -------------------------------------------------------------------------

    def list_views(self, namespace: str, page: Page) -> dict[str, Any]:
        """``GET /v1/namespaces/{namespace}/views``.

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
        """
        return _identifiers([*self.shown_as, namespace], self.catalog.list_views(namespace),
                            page)

    def create_view(self, namespace: str, body: CreateViewBody) -> ViewResponse:
        """``POST /v1/namespaces/{namespace}/views``.

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            AlreadyExistsError: a table or view of that name exists.
            RestError: a reserved property, or a version an Olympia view cannot hold.
            TableLocationError: a location outside the warehouse (or in a refused form).
        """
        return self._view_response(*self.views.create(namespace, body))

    def load_view(self, namespace: str, name: str) -> ViewResponse:
        """``GET /v1/namespaces/{namespace}/views/{view}``.

        Raises:
            NoSuchViewError: the view does not exist.
            NotImplementedError: it has no Iceberg view metadata (defined with Olympia's
                own tools).
        """
        return self._view_response(*self.views.load(namespace, name))

    def view_exists(self, namespace: str, name: str) -> bool:
        """``HEAD /v1/namespaces/{namespace}/views/{view}``."""
        return self.catalog.view_exists((namespace, name))

    def replace_view(self, namespace: str, name: str, body: CommitViewBody) -> ViewResponse:
        """``POST /v1/namespaces/{namespace}/views/{view}``: the client's view updates as one
        Olympia version (a lost race is tried again).

        Raises:
            NoSuchViewError: the view does not exist.
            CommitFailedException: its uuid is not the one required.
            NotImplementedError: it has no Iceberg view metadata.
            RestError: the body names another view, or an update the view cannot take.
            TableLocationError: a location outside the warehouse (or in a refused form).
        """
        if body.identifier is not None:
            named = self.table_identifier(body.identifier)
            if named != (namespace, name):
                raise bad_request(f"the body names view {'.'.join(named)} but the path "
                                  f"names {namespace}.{name}")
        return self._view_response(*retry_lost_races(
            lambda: self.views.replace(namespace, name, body),
            self.catalog.olympia.commit_options))

    def drop_view(self, namespace: str, name: str) -> None:
        """``DELETE /v1/namespaces/{namespace}/views/{view}`` (its files stay).

        Raises:
            NoSuchViewError: the view does not exist.
            ProtectedObjectError: it is protected.
        """
        self.catalog.drop_view((namespace, name))

    def rename_view(self, body: RenameTableBody) -> None:
        """``POST /v1/views/rename``.

        Raises:
            NoSuchViewError: the source does not exist.
            NoSuchNamespaceError: the destination namespace does not exist.
            AlreadyExistsError: the destination is taken.
        """
        self.views.rename(self.table_identifier(body.source),
                          self.table_identifier(body.destination))

    # --- helpers -----------------------------------------------------------------------

    def _view_response(self, metadata: ViewMetadata, location: str) -> ViewResponse:
        return ViewResponse(metadata_location=location,  # type: ignore[call-arg]
                            metadata=metadata, config=dict(self.client_properties))

    def _commit(self, changes: list[CommitTableRequest]) -> list[CommitTableResponse]:
        for change in changes:
            what = f"table {'.'.join(self.table_identifier(change.identifier))}"
            self._check_updates(change.updates, what)
        return retry_lost_races(lambda: self.catalog.commit_tables(changes),
                                self.catalog.olympia.commit_options)

    def _check_updates(self, updates: Sequence[TableUpdate], what: str) -> None:
        for update in updates:
            if isinstance(update, SetLocationUpdate):
                self._check_place(update.location, f"the location of {what}")
            elif isinstance(update, SetPropertiesUpdate):
                self._check_properties(update.updates, what)

    @staticmethod
    def _check_properties(properties: Mapping[str, str], what: str) -> None:
        for key in properties:
            if key.startswith(REFUSED_PROPERTY_PREFIXES):
                raise bad_request(f"{what}: property {key} steers the server's own file "
                                  "access and cannot be set through the REST catalog")

    def _check_namespace_location(self, properties: Mapping[str, str], name: str) -> None:
        """A namespace's ``location`` (where its tables go by default) is a place too."""
        if LOCATION in properties:
            self._check_place(properties[LOCATION], f"the location of namespace {name}")

    def _check_place(self, location: str, what: str) -> None:
        """Refuse a place outside the warehouse or in a form a FileIO could read
        differently (:func:`olympia.iceberg.locations.confine`): a TableLocationError,
        answered 400."""
        confine(location, self.warehouse, what, "the server's warehouse")

    def _response(self, metadata: TableMetadata, location: str | None) -> TableResponse:
        return TableResponse(metadata_location=location,  # type: ignore[call-arg]
                             metadata=metadata, config=dict(self.client_properties))


def retry_lost_races(commit: Callable[[], T], options: CommitOptions) -> T:
    """Run ``commit``; when it loses a race to a concurrent commit of the same table, run it
    again: it re-reads the tables and re-checks the client's requirements against them.
    Every round lands at least one of the racing commits, so each makes progress. The
    retries follow the library's own policy for lost root races: the same jittered,
    doubling pause and the same time budget, counted from the first try.

    Args:
        commit: Stages and commits the changes (``OlympiaCatalog.commit_tables``).
        options: The catalog's commit options (``Catalog.commit_options``).

    Returns:
        What ``commit`` returned.

    Raises:
        CommitFailedException: a requirement does not hold (at once), or races were still
            being lost when the budget was spent.
    """
    deadline = options.clock() + options.timeout_s
    losses = 0
    while True:
        try:
            return commit()
        except CommitFailedException as exc:
            # OlympiaCatalog raises a lost race from the library's CommitConflict; a failed
            # requirement carries no cause and is final.
            if not isinstance(exc.__cause__, oe.CommitConflict) or options.clock() > deadline:
                raise
        losses += 1
        options.sleep(options.jitter(options.pause(losses)))


def change_of(namespace: str, name: str,
              body: CommitTableBody | CommitTableRequest) -> CommitTableRequest:
    """A table change naming its table by a one-level namespace and a name."""
    return CommitTableRequest(identifier=TableIdentifier(namespace=Namespace([namespace]),
                                                         name=name),
                              requirements=body.requirements, updates=body.updates)


def one_level(namespace: Sequence[str]) -> str:
    """The name of a one-level namespace given as its list of levels.

    Raises:
        RestError: no level, a blank name, or more than one level.
    """
    if len(namespace) > 1:
        raise bad_request(f"namespace {'.'.join(namespace)!r} has {len(namespace)} levels; "
                          "Olympia namespaces have one level")
    if not namespace or not namespace[0].strip():
        raise bad_request("the namespace name is empty")
    return namespace[0]


def paginate(names: list[str], page: Page) -> tuple[list[str], str | None]:
    """One page of sorted ``names`` and the token of the next page (``None``: no more).

    Raises:
        RestError: a token this server did not give out.
    """
    start = 0
    if page.token:
        after = decode_token(page.token)
        start = next((i for i, name in enumerate(names) if name > after), len(names))
    if page.size is None or start + page.size >= len(names):
        return names[start:], None
    shown = names[start:start + page.size]
    return shown, encode_token(shown[-1])


def _identifiers(namespace: Sequence[str], found: Sequence[tuple[str, ...]], page: Page,
                 ) -> dict[str, Any]:
    """One page of a listing of tables or views (``found``: their identifiers) in
    ``namespace`` (its levels as answered), as the specification's
    ``ListTablesResponse``."""
    shown, token = paginate(sorted(identifier[-1] for identifier in found), page)
    return _listing(namespace, shown, token)


def _listing(namespace: Sequence[str], shown: Sequence[str], token: str | None,
             ) -> dict[str, Any]:
    """The ``ListTablesResponse`` of the names ``shown`` in ``namespace``."""
    return {"identifiers": [{"namespace": list(namespace), "name": name} for name in shown],
            "next-page-token": token}


def encode_token(name: str) -> str:
    """The page token of a page that ends at ``name`` (the next one starts after it)."""
    return base64.urlsafe_b64encode(name.encode()).decode()


def decode_token(token: str) -> str:
    """The name a page token continues after.

    Raises:
        RestError: the token is not one this server gives out.
    """
    try:
        return base64.b64decode(token.encode("ascii"), altchars=b"-_",
                                validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError):
        raise bad_request("pageToken is not a token this server gave out") from None

