"""What the REST server does for each request, over ONE shared :class:`OlympiaCatalog`.

One catalog object per server process: every commit goes through the library's commit path.
A table or view commit that loses a race to a concurrent commit of the same object is tried
again (:mod:`olympia.server.commits`) against the new state: it lands if the client's
requirements still hold, and is refused (``CommitFailedException``, 409) only when they do
not. Every place and property a client gives is checked against the server's one warehouse
(:mod:`olympia.server.warehouse`); listings come a page at a time
(:mod:`olympia.server.paging`); Iceberg views are :mod:`olympia.iceberg.views`, shared with
the in-process :class:`OlympiaCatalog`.

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

from collections.abc import Mapping, Sequence
from typing import Any

from pyiceberg.catalog import WAREHOUSE_LOCATION
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.table.metadata import TableMetadata

from olympia import exceptions as oe
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.iceberg.views import IcebergViews
from olympia.lru import LruCache
from olympia.server.errors import RestError
from olympia.server.models import CreateNamespaceBody, UpdateNamespacePropertiesBody
from olympia.server.paging import Page, listing_page
from olympia.server.tables import LOADED_TABLES, TableOperations
from olympia.server.views import ViewOperations
from olympia.server.warehouse import NAME, Warehouse

#: The prefix under which catalog version ``n`` is served.
VERSION_PREFIX = "version-{}"  # one path segment: clients encode a prefix as one
#: The prefix under which distributed transaction ``<id>`` is served.
TXN_PREFIX = "txn-{}"
#: How many pinned catalog versions a server keeps open.
PINNED_VERSIONS = 16


class CatalogService(TableOperations, ViewOperations):
    """The REST catalog's operations over one Olympia catalog: its configuration,
    catalog versions and namespaces here, its tables (:class:`TableOperations`) and views
    (:class:`ViewOperations`) in their own modules.

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
        self.warehouse = Warehouse(warehouse)
        self.catalog = catalog.confined()
        self.client_properties = dict(client_properties)
        #: The levels answers put before a namespace (``sys.dtxns.<id>`` for a transaction
        #: reached by those names), and that a body's namespaces may start with.
        self.shown_as = tuple(shown_as)
        self.views = IcebergViews(catalog, self.warehouse.location, NAME)
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
                spelling of the same place (:meth:`Warehouse.selector`), with ``@<version>``,
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
        selector = self.warehouse.selector(warehouse) if warehouse else None
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

    def _select(self, selector: str) -> int:
        """The catalog version ``<version>``, ``<instant>`` or ``export:<name>`` names."""
        if selector.isdigit():
            return self.at_version(int(selector)).catalog.version
        if selector.startswith("export:"):
            return self.catalog.at_export(selector.removeprefix("export:")).version
        return self.catalog.as_of(selector).version

    # --- namespaces --------------------------------------------------------------------

    def list_namespaces(self, parent: str | None, page: Page) -> dict[str, Any]:
        """``GET /v1/namespaces``: a page of the namespaces, or of the children of
        ``parent`` (none: namespaces are one level).

        Raises:
            NoSuchNamespaceError: ``parent`` does not exist.
            RestError: a page token this server did not give out for this listing.
        """
        if parent is not None:
            if not self.catalog.namespace_exists(parent):
                raise NoSuchNamespaceError(f"Namespace does not exist: {parent}")
            shown: list[str] = []
            token = None
        else:
            shown, token = listing_page(page, "namespaces", self.catalog.namespaces_page)
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
        self.warehouse.check_namespace_location(body.properties, name)
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
        self.warehouse.check_namespace_location(body.updates, namespace)
        summary = self.catalog.update_namespace_properties(namespace, set(body.removals),
                                                           body.updates)
        return {"updated": summary.updated, "removed": summary.removed,
                "missing": summary.missing or []}
