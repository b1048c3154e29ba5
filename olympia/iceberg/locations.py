"""Where Iceberg tables live: locations derived from names, and which locations may be used.

A default table location is built from ESCAPED name parts: every character outside RFC 3986
unreserved is percent-encoded, and a part made only of dots has its dots encoded too, so a
name such as ``../x``, ``..``, ``a/b`` or ``s3://other/x`` is one folder name and never a path
step. Every location derived from a name is then checked to lie under its root (warehouse or
namespace location) after normalisation.

Two live tables never share files: a new or registered table's location may not equal,
contain or lie inside another live table's location, and its metadata file may not be one a
live table uses. Comparisons are on normalised locations (scheme, bucket or host, and the
path with ``.``/``..`` steps and repeated slashes resolved; ``\\`` counts as a separator).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote

from olympia.catalog.objects import Table as TableDef
from olympia.exceptions import LocationInUseError, TableLocationError

_LOCAL = ("", "file")


def escape_part(name: str) -> str:
    """``name`` as one folder name: RFC 3986 unreserved characters kept, everything else
    percent-encoded; a name of dots only (``.``, ``..``) has its dots encoded."""
    escaped = quote(name, safe="")
    if escaped.strip(".") == "":
        return "%2E" * len(escaped)
    return escaped


def _normal(location: str) -> tuple[str, str, tuple[str, ...]]:
    """(scheme, authority, path steps) of ``location`` with ``.``/``..`` resolved."""
    scheme, sep, rest = location.partition("://")
    if not sep:
        scheme, rest = ("file", location[len("file:"):]) if location.startswith("file:") \
            else ("", location)
        authority = ""
    else:
        authority, _, rest = rest.partition("/")
    scheme = scheme.lower()
    if scheme in _LOCAL:
        scheme = ""
    elif scheme in ("s3a", "s3n"):
        scheme = "s3"
    path = posixpath.normpath("/" + rest.replace("\\", "/"))
    return scheme, authority, tuple(p for p in path.split("/") if p)


def inside(location: str, root: str) -> bool:
    """Whether ``location`` lies strictly under ``root`` after normalisation."""
    loc, top = _normal(location), _normal(root)
    return loc[:2] == top[:2] and len(loc[2]) > len(top[2]) and loc[2][:len(top[2])] == top[2]


def overlaps(a: str, b: str) -> bool:
    """Whether two table locations share files: the same folder, or one inside the other."""
    return _normal(a) == _normal(b) or inside(a, b) or inside(b, a)


def derived_location(root: str, part: str, what: str) -> str:
    """``<root>/<escaped part>``, checked to lie under ``root``.

    Args:
        root: The warehouse or namespace location (a trailing ``/`` is ignored).
        part: A namespace or table name.
        what: The object, for the error (``table sales.orders``).

    Returns:
        The location.

    Raises:
        TableLocationError: the location would not lie under ``root``.
    """
    location = f"{root.rstrip('/')}/{escape_part(part)}"
    if not inside(location, root):
        raise TableLocationError(f"{what}: its location {location} would lie outside {root}")
    return location


@dataclass(frozen=True)
class LiveTable:
    """A table of the catalog and the files it uses: its location and, for an Iceberg
    table, its current metadata file."""

    name: str
    location: str
    metadata_file: str = ""

    @classmethod
    def of(cls, definition: TableDef) -> LiveTable | None:
        """The files ``definition`` uses (None: a table declared without a location)."""
        name = f"{definition.namespace}.{definition.name}"
        table_location = definition.format_properties.get("table-location", "")
        if definition.format == "iceberg" and table_location:
            return cls(name, table_location, definition.location)
        return cls(name, definition.location) if definition.location else None


def live_tables(definitions: Iterable[TableDef], exclude: tuple[str, str]) -> list[LiveTable]:
    """The live tables among ``definitions``, leaving out the table ``exclude``."""
    found = (LiveTable.of(d) for d in definitions if (d.namespace, d.name) != exclude)
    return [t for t in found if t is not None]


def check_free(what: str, location: str, metadata_file: str, live: Iterable[LiveTable]) -> None:
    """Refuse a table location (and metadata file) another live table uses.

    Args:
        what: The table about to use them, for the error (``table sales.orders``).
        location: Its table location.
        metadata_file: Its metadata file ("" for none).
        live: The other live tables.

    Raises:
        LocationInUseError: the metadata file is another table's, or the locations overlap.
    """
    for other in live:
        if metadata_file and other.metadata_file and \
                _normal(metadata_file) == _normal(other.metadata_file):
            raise LocationInUseError(
                f"{what}: metadata file {metadata_file} is the current metadata of live table "
                f"{other.name}", other.name)
        if overlaps(location, other.location):
            raise LocationInUseError(
                f"{what}: location {location} overlaps the location {other.location} of live "
                f"table {other.name}", other.name)


def owner_of(path: str, live: Iterable[LiveTable]) -> LiveTable | None:
    """The live table whose location holds ``path`` (or whose metadata file it is)."""
    for other in live:
        if inside(path, other.location) or (
                other.metadata_file and _normal(path) == _normal(other.metadata_file)):
            return other
    return None
