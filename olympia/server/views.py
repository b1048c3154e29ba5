"""The REST catalog's view operations (``/v1/namespaces/{namespace}/views...``,
``/v1/views/rename``), part of :class:`~olympia.server.service.CatalogService`: each
delegates to :class:`olympia.iceberg.views.IcebergViews`, which the in-process
:class:`~olympia.iceberg.OlympiaCatalog` uses too, so both serve the same views."""

from __future__ import annotations

from pyiceberg.catalog.rest import ViewResponse
from pyiceberg.view.metadata import ViewMetadata

from olympia.iceberg.views import IcebergViews
from olympia.server.commits import retry_lost_races
from olympia.server.models import CommitViewBody, CreateViewBody, RenameTableBody
from olympia.server.operations import Operations
from olympia.server.paging import Page


class ViewOperations(Operations):
    """The view operations."""

    views: IcebergViews

    def list_views(self, namespace: str, page: Page) -> str:
        """``GET /v1/namespaces/{namespace}/views``: a page of its views (the answer's
        JSON text).

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            RestError: a page token this server did not give out for this listing.
        """
        return self._listing(namespace, page, "views", self.catalog.views_page)

    def create_view(self, namespace: str, body: CreateViewBody) -> ViewResponse:
        """``POST /v1/namespaces/{namespace}/views``.

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            ViewAlreadyExistsError: a table or view of that name exists.
            InvalidArgumentError: a reserved property, or a version an Olympia view cannot
                hold.
            TableLocationError: a location outside the warehouse (or in a refused form).
        """
        return self._view_response(*self.views.create(
            namespace, body.name, body.view_schema, body.view_version, body.location,
            body.properties))

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
            RestError: the body names another view.
            InvalidArgumentError: an update the view cannot take.
            TableLocationError: a location outside the warehouse (or in a refused form).
        """
        self.check_named(body.identifier, "view", namespace, name)
        return self._view_response(*retry_lost_races(
            lambda: self.views.replace(namespace, name, body.requirements, body.updates),
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

    def _view_response(self, metadata: ViewMetadata, location: str) -> ViewResponse:
        return ViewResponse(metadata_location=location,  # type: ignore[call-arg]
                            metadata=metadata, config=dict(self.client_properties))
