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

import bisect
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
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


Place = tuple[str, str, tuple[str, ...]]  # scheme, bucket or host, path steps


def _normal(location: str) -> Place:
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


def _within(place: Place, top: Place) -> bool:
    steps = len(top[2])
    return place[:2] == top[:2] and len(place[2]) > steps and place[2][:steps] == top[2]


def inside(location: str, root: str) -> bool:
    """Whether ``location`` lies strictly under ``root`` after normalisation."""
    return _within(_normal(location), _normal(root))


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


Key = tuple[str, str]  # namespace, table


@dataclass(frozen=True)
class LiveTable:
    """A table of the catalog and the files it uses: its location and, for an Iceberg
    table, its current metadata file (both also kept normalised)."""

    key: Key
    location: str
    metadata_file: str = ""
    place: Place = field(init=False, repr=False, compare=False)
    metadata_place: Place | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "place", _normal(self.location))
        object.__setattr__(self, "metadata_place",
                           _normal(self.metadata_file) if self.metadata_file else None)

    @property
    def name(self) -> str:
        return ".".join(self.key)

    @classmethod
    def of(cls, definition: TableDef) -> LiveTable | None:
        """The files ``definition`` uses (None: a table declared without a location)."""
        key = (definition.namespace, definition.name)
        table_location = definition.format_properties.get("table-location", "")
        if definition.format == "iceberg" and table_location:
            return cls(key, table_location, definition.location)
        return cls(key, definition.location) if definition.location else None


class LiveIndex:
    """The live tables of a catalog by location and metadata file: a check costs a few
    dictionary and bisection steps, however many tables there are."""

    def __init__(self) -> None:
        self._tables: dict[Key, LiveTable] = {}
        self._by_place: dict[Place, list[LiveTable]] = {}
        self._by_metadata: dict[Place, list[LiveTable]] = {}
        self._places: list[Place] = []  # sorted: a folder's descendants follow it

    def put(self, key: Key, table: LiveTable | None) -> None:
        """Record what table ``key`` uses now (None: nothing, or it is gone)."""
        old = self._tables.pop(key, None)
        if old is not None:
            self._by_place[old.place].remove(old)
            if not self._by_place[old.place]:
                del self._by_place[old.place]
                del self._places[bisect.bisect_left(self._places, old.place)]
            if old.metadata_place is not None:
                self._by_metadata[old.metadata_place].remove(old)
                if not self._by_metadata[old.metadata_place]:
                    del self._by_metadata[old.metadata_place]
        if table is None:
            return
        self._tables[key] = table
        if table.place not in self._by_place:
            bisect.insort(self._places, table.place)
        self._by_place.setdefault(table.place, []).append(table)
        if table.metadata_place is not None:
            self._by_metadata.setdefault(table.metadata_place, []).append(table)

    def _around(self, place: Place) -> Iterator[LiveTable]:
        """Live tables at ``place``, above it, or below it."""
        scheme, authority, steps = place
        for depth in range(len(steps), -1, -1):
            yield from self._by_place.get((scheme, authority, steps[:depth]), ())
        for below in self._places[bisect.bisect_right(self._places, place):]:
            if not _within(below, place):
                break
            yield from self._by_place[below]

    def check_free(self, what: str, location: str, metadata_file: str, exclude: Key) -> None:
        """Refuse a table location (and metadata file) another live table uses.

        Args:
            what: The table about to use them, for the error (``table sales.orders``).
            location: Its table location.
            metadata_file: Its metadata file ("" for none).
            exclude: That table itself.

        Raises:
            LocationInUseError: the metadata file is another live table's, or the location
                equals, contains or lies in another live table's location.
        """
        if metadata_file:
            for other in self._by_metadata.get(_normal(metadata_file), ()):
                if other.key != exclude:
                    raise LocationInUseError(
                        f"{what}: metadata file {metadata_file} is the current metadata of "
                        f"live table {other.name}", other.name)
        for other in self._around(_normal(location)):
            if other.key != exclude:
                raise LocationInUseError(
                    f"{what}: location {location} overlaps the location {other.location} of "
                    f"live table {other.name}", other.name)

    def owner(self, path: str, exclude: Key) -> LiveTable | None:
        """The live table (but ``exclude``) whose location holds the file ``path``, or whose
        metadata file it is."""
        scheme, authority, steps = _normal(path)
        candidates = [*self._by_metadata.get((scheme, authority, steps), ()),
                      *(t for depth in range(len(steps) - 1, -1, -1)
                        for t in self._by_place.get((scheme, authority, steps[:depth]), ()))]
        return next((t for t in candidates if t.key != exclude), None)
