"""Names from path segments, as the client sent them (percent-encoded): one segment is one
name whatever it holds, and a namespace segment holding the separator ``%1F`` names a
multi-level namespace, which no Olympia catalog has (writes there are refused, reads answer
that the object does not exist)."""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from olympia.server import transactions
from olympia.server.errors import RestError, bad_request

#: The separator of namespace levels in a path (``%1F`` on the wire).
NAMESPACE_SEPARATOR = "\x1f"


def levels_of(segment: str) -> list[str]:
    """The levels of the namespace a path segment names."""
    return _decoded(segment).split(NAMESPACE_SEPARATOR)


def _own(levels: list[str]) -> list[str]:
    """``levels`` without a leading ``sys.dtxns.<id>`` when one namespace follows it (the
    route's catalog is then that transaction)."""
    found = transactions.inside(levels)
    return found[1] if found is not None and len(found[1]) == 1 else levels


def namespace_of(segment: str) -> str:
    """The one-level namespace a write's path segment names.

    Raises:
        RestError: the segment is not UTF-8 once decoded, or names several levels (400).
    """
    levels = _own(levels_of(segment))
    name = NAMESPACE_SEPARATOR.join(levels)
    if len(levels) > 1:
        raise bad_request(f"namespace {'.'.join(levels)!r} has {len(levels)} levels; "
                          "Olympia namespaces have one level")
    return name


#: The ErrorModel type of a read of a missing object, by kind.
_NO_SUCH = {"namespace": "NoSuchNamespaceException", "table": "NoSuchTableException",
            "view": "NoSuchViewException"}


def read_namespace_of(segment: str, kind: str = "namespace", name: str = "") -> str:
    """The namespace a read's path segment names (a namespace, or the namespace of a
    ``kind`` object called ``name`` as sent in the path).

    Raises:
        RestError: the segment is not UTF-8 once decoded (400); it names several levels:
            404 of ``kind``'s type, as nothing exists in a multi-level namespace.
    """
    return existing_namespace(NAMESPACE_SEPARATOR.join(_own(levels_of(segment))), kind, name)


def existing_namespace(namespace: str, kind: str = "namespace", name: str = "") -> str:
    """``namespace`` (decoded), if a read of it or of a ``kind`` object in it may find
    something.

    Raises:
        RestError: it names several levels: 404 of ``kind``'s type.
    """
    levels = namespace.split(NAMESPACE_SEPARATOR)
    if len(levels) == 1:
        return namespace
    dotted = ".".join(levels)
    what = (f"namespace {dotted!r}" if kind == "namespace"
            else f"{kind} {dotted}.{name_of(name)}")
    raise RestError(404, _NO_SUCH[kind], f"{what} does not exist: namespace {dotted!r} has "
                    f"{len(levels)} levels, and Olympia namespaces have one level")


def name_of(segment: str) -> str:
    """The table name a path segment names.

    Raises:
        RestError: the segment is not UTF-8 once decoded.
    """
    return _decoded(segment)


def _decoded(segment: str) -> str:
    """A path segment as sent (bytes as latin-1 characters), percent-decoded as UTF-8."""
    try:
        return unquote_to_bytes(segment.encode("latin-1")).decode("utf-8")
    except UnicodeError:
        raise bad_request("a name in the path is not UTF-8 once percent-decoded") from None
