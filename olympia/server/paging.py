"""The REST catalog's listings a page at a time (``pageToken`` and ``pageSize``).

A page of namespaces, tables or views is one key range of the catalog's tree
(:meth:`olympia.catalog.reader.CatalogReader.names_page`, the same paging the UI uses): it
starts after the name the previous page ended at and reads no definition outside the page.
A page token names that listing and that name; a token that is malformed, or was given for
another listing (another namespace's tables, the views of a namespace, ...), is refused with
400, never read as a nearby place.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from olympia.catalog.reader import NamePage
from olympia.server.errors import bad_request

#: What separates a token's listing from its name (no name holds a control character).
_SEPARATOR = "\n"


@dataclass(frozen=True)
class Page:
    """One page of a listing as a client asks for it.

    Args:
        token: The ``pageToken`` the previous page gave (``None`` or empty: the first page).
        size: The ``pageSize``: the most entries to return (``None``: all).
    """

    token: str | None
    size: int | None


def listing_page(page: Page, listing: str,
                 read: Callable[[str | None, int | None], NamePage],
                 ) -> tuple[list[str], str | None]:
    """One page of a listing and the token of the next page.

    Args:
        page: The page asked for.
        listing: Which listing this is (``namespaces``, ``tables <namespace>``, ...): a
            token given for another one is refused.
        read: Reads the names after a cursor, at most a number of them
            (``OlympiaCatalog.tables_page`` and its siblings).

    Returns:
        The names of the page, and the token of the next one (``None``: the last page).

    Raises:
        RestError: a token this server did not give out for ``listing`` (400).
    """
    after = decode_token(page.token, listing) if page.token else None
    found = read(after, page.size)
    return found.names, (None if found.next_after is None
                         else encode_token(listing, found.next_after))


def paginate(names: Sequence[str], page: Page, listing: str,
             ) -> tuple[list[str], str | None]:
    """One page of sorted ``names`` held in memory (the server's own ``sys.dtxns``).

    Raises:
        RestError: a token this server did not give out for ``listing`` (400).
    """
    def read(after: str | None, size: int | None) -> NamePage:
        rest = [(name, "") for name in names if after is None or name > after]
        if size is None or len(rest) <= size:
            return NamePage(rest, None)
        return NamePage(rest[:size], rest[size - 1][0])

    return listing_page(page, listing, read)


def encode_token(listing: str, name: str) -> str:
    """The page token of a page of ``listing`` that ends at ``name``."""
    return base64.urlsafe_b64encode(f"{listing}{_SEPARATOR}{name}".encode()).decode()


def decode_token(token: str, listing: str) -> str:
    """The name a page token of ``listing`` continues after.

    Raises:
        RestError: the token is not one this server gives out, or was given for another
            listing (400).
    """
    try:
        text = base64.b64decode(token.encode("ascii"), altchars=b"-_",
                                validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError):
        text = ""
    given, sep, name = text.partition(_SEPARATOR)
    if not sep or not name:
        raise bad_request("pageToken is not a page token this server gave out")
    if given != listing:
        raise bad_request(f"pageToken was given for another listing ({given[:200]!r}), not "
                          f"for {listing!r}: start again without pageToken")
    return name
