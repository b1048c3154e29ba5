"""What the REST catalog's operations share: the catalog, the server's warehouse, the
properties clients get, and how a request's namespaces, identifiers and answers are read and
written (:class:`Operations`, the base of :class:`~olympia.server.service.CatalogService`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii

from pyiceberg.catalog.rest import TableResponse
from pyiceberg.table import TableIdentifier
from pyiceberg.table.metadata import TableMetadata

from olympia.catalog.reader import NamePage
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.server.errors import bad_request
from olympia.server.paging import Page, listing_page
from olympia.server.warehouse import Warehouse


class Operations:
    """The state and helpers every group of operations uses (set by
    :class:`~olympia.server.service.CatalogService`)."""

    #: The catalog, :meth:`~olympia.iceberg.OlympiaCatalog.confined`.
    catalog: OlympiaCatalog
    #: Where clients' places must lie.
    warehouse: Warehouse
    #: What the operator gives clients (``--client-property``).
    client_properties: dict[str, str]
    #: The levels answers put before a namespace (``sys.dtxns.<id>`` for a transaction
    #: reached by those names), and that a body's namespaces may start with.
    shown_as: tuple[str, ...]

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

    def check_named(self, identifier: TableIdentifier | None, kind: str, namespace: str,
                    name: str) -> None:
        """Check that a body's optional identifier names the object its path names.

        Raises:
            RestError: it names another one (400).
        """
        if identifier is None:
            return
        named = self.table_identifier(identifier)
        if named != (namespace, name):
            raise bad_request(f"the body names {kind} {'.'.join(named)} but the path names "
                              f"{namespace}.{name}")

    def _listing(self, namespace: str, page: Page, kind: str,
                 read: Callable[[str, str | None, int | None], NamePage]) -> str:
        """A page of the tables or views of ``namespace``, as the JSON text of the
        specification's ``ListTablesResponse``; its tokens name the listing
        (``tables <namespace>``)."""
        shown, token = listing_page(page, f"{kind} {namespace}",
                                    lambda after, size: read(namespace, after, size))
        return identifiers_json([*self.shown_as, namespace], shown, token)

    def _response(self, metadata: TableMetadata, location: str | None) -> TableResponse:
        return TableResponse(metadata_location=location,  # type: ignore[call-arg]
                             metadata=metadata, config=dict(self.client_properties))


def identifiers_json(namespace: list[str], names: list[str], token: str | None) -> str:
    """The JSON text of a ``ListTablesResponse``: ``json.dumps`` of
    ``{"identifiers": [{"namespace": namespace, "name": name}...], "next-page-token": token}``,
    written without a dict per name (each name is encoded by the function ``json.dumps``
    encodes strings with), about a tenth of the time for a page of thousands.

    Args:
        namespace: The levels of the namespace the names are in.
        names: The names of the page.
        token: The next page's token (None: the last page).

    Returns:
        The JSON text.
    """
    entry = '{"namespace": ' + json.dumps(namespace) + ', "name": '
    entries = entry + ("}, " + entry).join(map(encode_basestring_ascii, names)) + "}"
    return (f'{{"identifiers": [{entries if names else ""}], '
            f'"next-page-token": {json.dumps(token)}}}')


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
