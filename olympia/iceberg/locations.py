"""Where Iceberg tables live: locations derived from names, and which locations may be used.

Every location that comes from outside (a client's table location, ``write.*.path``, a
registered metadata file, the files a table's metadata names) is parsed ONCE, by
:func:`place`, into a normalised place: scheme (the scheme table's name for its spellings:
``file`` is ``""``, ``s3a``/``s3n`` are ``s3``, ``gcs`` is ``gs``, ``abfss``/``az`` are
``abfs``), bucket, container or host, and the path's steps. It refuses every form a FileIO
could read differently from the catalog: a relative path (resolved from the working
directory), a query or fragment (``?``, ``#``; ``;`` parameters: dropped), a ``.`` or ``..``
step before or after percent-decoding, a step that decodes to a separator, a backslash,
control characters, blank edges, a host in a local location, and on local disk a step of
more than 255 bytes (no local file system holds such a name). Places are compared step by
step, never as strings. :func:`confine` also requires the place to lie under a root (the
server's warehouse, a table's own location): same scheme and bucket or host, and on local
disk still under it once symlinks are resolved.

A default table location is built from ESCAPED name parts, so a name such as ``../x``,
``..``, ``a/b`` or ``s3://other/x`` is one folder name: RFC 3986 unreserved characters stay,
everything else is percent-encoded, and the characters that could make a path step once
decoded (``/``, ``\\``, ``%`` and the dots of a name made only of dots) are encoded twice,
so the part decodes to one harmless folder name. A part whose folder name would pass 255
bytes (a long name of multi-byte characters encodes to three times its size) is the name's
``~`` hash instead, as ruling 12 names definition files: local file systems refuse longer
names.

Two live tables never share files: a new or registered table's location may not equal,
contain or lie inside another live table's location, and its metadata file may not be one a
live table uses (checked at staging, and again against the versions a commit rebases onto:
:mod:`olympia.iceberg.live`).
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from olympia.catalog.keys import MAX_FILE_NAME_BYTES, hashed_name
from olympia.catalog.objects import Table as TableDef
from olympia.exceptions import LocationInUseError, TableLocationError
from olympia.storage.schemes import LOCATION_SCHEMES

Place = tuple[str, str, tuple[str, ...]]  # scheme, bucket or host, path steps

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# what pyiceberg's URL parsing cuts off at (the rest of the location is dropped)
_CUT = {"?": "a query (?)", "#": "a fragment (#)", ";": "parameters (;)"}
_TWICE = {"%2F": "%252F", "%5C": "%255C", "%25": "%2525"}


def escape_part(name: str) -> str:
    """``name`` as one folder name that stays one harmless folder name when percent-decoded:
    RFC 3986 unreserved characters kept, everything else percent-encoded, ``/``, ``\\`` and
    ``%`` encoded twice, and the dots of a name of dots only (``.``, ``..``) encoded twice."""
    escaped = quote(name, safe="")
    if escaped.strip(".") == "":
        return "%252E" * len(escaped)
    return re.sub("%2F|%5C|%25", lambda m: _TWICE[m.group(0)], escaped)


def _step_fault(step: str) -> tuple[str, bool]:
    """Why a path step is refused ("" if it is not), and whether it may lead upwards."""
    for char, what in _CUT.items():
        if char in step:
            return what, False
    if "\\" in step:  # a separator to some file systems
        return "a backslash", True
    if _CONTROL.search(step):  # URL parsing drops tabs and line breaks: '..\t' is '..'
        return "a control character", True
    if step in (".", ".."):
        return f"a {step!r} step", step == ".."
    decoded = unquote(step)
    if decoded.strip() in (".", "..") or "/" in decoded or "\\" in decoded:
        return f"the step {step!r}, which percent-decodes to a path step of its own", True
    return "", False


def _parse(location: str) -> tuple[Place, str]:
    """``location``'s place, and why it is refused ("" if it is not).

    A refused location's place is a part of it that holds everything a FileIO could take
    the location to name: the steps before the first refused one (none when that one may
    lead upwards, or the location is relative).
    """
    root: Place = ("", "", ())
    if not location or location != location.strip():
        return root, "it is empty or has blank edges"
    scheme, sep, rest = location.partition("://")
    if sep:
        scheme = scheme.lower()
        if not _SCHEME.fullmatch(scheme):
            return root, "it is a relative path (resolved from the working directory)"
        authority, _, path = rest.partition("/")
    elif location.lower().startswith("file:/"):
        scheme, authority, path = "file", "", location[len("file:"):]
    elif location.startswith("/"):
        scheme, authority, path = "", "", location
    else:
        return root, "it is a relative path (resolved from the working directory)"
    scheme = LOCATION_SCHEMES.get(scheme, scheme)
    if scheme == "" and authority:
        return root, f"a local location names a host ({authority})"
    if any(char in authority for char in (*_CUT, "\\")) or _CONTROL.search(authority):
        return (scheme, "", ()), "its bucket or host has a forbidden character"
    steps: list[str] = []
    for step in path.split("/"):
        if not step:
            continue
        fault, upwards = _step_fault(step)
        if not fault and scheme == "" and len(step.encode()) > MAX_FILE_NAME_BYTES:
            fault = (f"a step of {len(step.encode())} bytes, and a local file system holds "
                     f"names of at most {MAX_FILE_NAME_BYTES}")
        if fault:
            return (scheme, authority, () if upwards else tuple(steps)), f"it has {fault}"
        steps.append(step)
    return (scheme, authority, tuple(steps)), ""


def place(location: str, what: str) -> Place:
    """The normalised place of ``location``.

    Args:
        location: A location from outside (a table location, a metadata or data file).
        what: What it is, for the error (``the location of table sales.orders``).

    Returns:
        (scheme, bucket or host, path steps).

    Raises:
        TableLocationError: a form a FileIO could read differently (see the module).
    """
    parsed, fault = _parse(location)
    if fault:
        raise TableLocationError(f"{what}, {location!r}, is refused: {fault}")
    return parsed


def _within(inner: Place, top: Place) -> bool:
    steps = len(top[2])
    return inner[:2] == top[:2] and len(inner[2]) > steps and inner[2][:steps] == top[2]


def _local_path(at: Place) -> str:
    return "/" + "/".join(at[2])


def confine(location: str, root: str, what: str, where: str) -> Place:
    """The place of ``location``, which must lie strictly under ``root``
    (:class:`Confinement`, for one location).

    Args:
        location: The location from outside.
        root: Where it must lie (the server's warehouse, a table's location).
        what: What it is, for the error.
        where: What ``root`` is, for the error (``the server's warehouse``).

    Returns:
        Its place.

    Raises:
        TableLocationError: a refused form (:func:`place`), or not under ``root`` (on local
            disk: also once symlinks are resolved).
    """
    return Confinement(root, where)(location, what)


class Confinement:
    """Locations confined to one root (:func:`confine`), the root parsed once, and on
    local disk its symlinks resolved once, for every location checked against it (a
    table's files)."""

    def __init__(self, root: str, where: str) -> None:
        """Args:
            root: Where the locations must lie (the server's warehouse, a table's location).
            where: What ``root`` is, for the errors (``its location``).

        Raises:
            TableLocationError: ``root`` is a refused form (:func:`place`).
        """
        self._root, self._where = root, where
        self._top = place(root, where)
        self._real_top: str | None = None  # (local disk) with a trailing "/"

    def __call__(self, location: str, what: str) -> Place:
        """The place of ``location`` (``what``, for the error), which must lie under the
        root.

        Raises:
            TableLocationError: as :func:`confine`.
        """
        inner = place(location, what)
        if not _within(inner, self._top):
            raise TableLocationError(f"{what}, {location}, is outside {self._where} {self._root}")
        if inner[0] == "":
            if self._real_top is None:
                self._real_top = os.path.realpath(_local_path(self._top)).rstrip("/") + "/"
            real = os.path.realpath(_local_path(inner))
            if not real.startswith(self._real_top):
                raise TableLocationError(f"{what}, {location}, is outside {self._where} "
                                         f"{self._root} once symbolic links are resolved "
                                         f"({real})")
        return inner


def inside(location: str, root: str) -> bool:
    """Whether :func:`confine` takes ``location`` as lying under ``root``."""
    try:
        confine(location, root, "", "")
    except TableLocationError:
        return False
    return True


def derived_location(root: str, part: str, what: str, suffix: str = "") -> str:
    """``<root>/<escaped part><suffix>`` (the part's ``~`` hash where that folder name
    would pass 255 bytes), checked to lie under ``root``.

    Args:
        root: The warehouse or namespace location (a trailing ``/`` is ignored).
        part: A namespace or table name.
        what: The object, for the error (``table sales.orders``).
        suffix: Appended to the escaped name (RFC 3986 unreserved characters only).

    Returns:
        The location.

    Raises:
        TableLocationError: the location would not lie under ``root``, or ``root`` is a
            refused form.
    """
    folder = escape_part(part) + suffix
    if len(folder) > MAX_FILE_NAME_BYTES:
        folder = hashed_name(part) + suffix
    location = f"{root.rstrip('/')}/{folder}"
    confine(location, root, f"the location of {what}", "its root")
    return location


Key = tuple[str, str]  # namespace, table


@dataclass(frozen=True)
class LiveTable:
    """A table of the catalog and the files it uses: its location and, for an Iceberg
    table, its current metadata file (both also kept as places; a stored location that
    :func:`place` refuses, written before it did, is kept as the part of it that holds
    everything it could name)."""

    key: Key
    location: str
    metadata_file: str = ""
    uuid: str = ""  # an Iceberg table's uuid (the same table under any name and version)
    place: Place = field(init=False, repr=False, compare=False)
    metadata_place: Place | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "place", _parse(self.location)[0])
        object.__setattr__(self, "metadata_place",
                           _parse(self.metadata_file)[0] if self.metadata_file else None)

    @property
    def name(self) -> str:
        return ".".join(self.key)

    @classmethod
    def of(cls, definition: TableDef) -> LiveTable | None:
        """The files ``definition`` uses (None: a table declared without a location)."""
        key = (definition.namespace, definition.name)
        table_location = definition.format_properties.get("table-location", "")
        if definition.format == "iceberg" and table_location:
            return cls(key, table_location, definition.location,
                       definition.format_properties.get("table-uuid", ""))
        return cls(key, definition.location) if definition.location else None


class LiveIndex:
    """The live tables of a catalog by location and metadata file: a check costs a few
    dictionary and bisection steps, however many tables there are.

    Args:
        base: An index this one shows with the tables :meth:`put` here in place of its own
            (a transaction's staged tables over the version it began on). It is read at
            every lookup, never copied: the caller keeps it at that version meanwhile.
    """

    def __init__(self, base: LiveIndex | None = None) -> None:
        self._base = base
        self._replaced: set[Key] = set()  # the keys whose base table put() replaced
        self._tables: dict[Key, LiveTable] = {}
        self._by_place: dict[Place, list[LiveTable]] = {}
        self._by_metadata: dict[Place, list[LiveTable]] = {}
        self._places: list[Place] = []  # sorted: a folder's descendants follow it
        self._claims: set[tuple[Key, str, Place]] = set()  # what add() recorded

    def put(self, key: Key, table: LiveTable | None) -> None:
        """Record what table ``key`` uses now (None: nothing, or it is gone)."""
        if self._base is not None:
            self._replaced.add(key)
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
        if table is not None:
            self._tables[key] = table
            self._insert(table)

    def clear(self) -> None:
        """Forget every table recorded here (not those of the base)."""
        self._replaced.clear()
        self._tables.clear()
        self._by_place.clear()
        self._by_metadata.clear()
        self._places.clear()
        self._claims.clear()

    def __contains__(self, key: object) -> bool:
        """Whether table ``key`` is recorded (by :meth:`put`, here or in the base)."""
        if key in self._tables:
            return True
        return self._base is not None and key not in self._replaced and key in self._base

    def add(self, table: LiveTable) -> None:
        """Record what ``table`` uses, beside everything recorded already (an index of
        the tables of many catalog versions; :meth:`put` records one table's present). A
        table whose location was recorded already, with a metadata file inside it, adds
        nothing: its location holds that file."""
        claim = (table.key, table.uuid, table.place)
        inside_it = table.metadata_place is None or _within(table.metadata_place, table.place)
        if claim in self._claims and inside_it:
            return
        self._claims.add(claim)
        self._insert(table)

    def _insert(self, table: LiveTable) -> None:
        if table.place not in self._by_place:
            bisect.insort(self._places, table.place)
        self._by_place.setdefault(table.place, []).append(table)
        if table.metadata_place is not None:
            self._by_metadata.setdefault(table.metadata_place, []).append(table)

    def _inherited(self, find: Callable[[LiveIndex], Iterator[LiveTable]],
                   ) -> Iterator[LiveTable]:
        """What ``find`` finds in the base, but the tables replaced here."""
        if self._base is not None:
            yield from (t for t in find(self._base) if t.key not in self._replaced)

    def _at(self, at: Place) -> Iterator[LiveTable]:
        """Tables whose location is ``at``."""
        yield from self._inherited(lambda base: base._at(at))
        yield from self._by_place.get(at, ())

    def _with_metadata(self, at: Place) -> Iterator[LiveTable]:
        """Tables whose metadata file is ``at``."""
        yield from self._inherited(lambda base: base._with_metadata(at))
        yield from self._by_metadata.get(at, ())

    def _below(self, at: Place) -> Iterator[LiveTable]:
        """Tables whose location lies in ``at``."""
        yield from self._inherited(lambda base: base._below(at))
        for below in self._places[bisect.bisect_right(self._places, at):]:
            if not _within(below, at):
                break
            yield from self._by_place[below]

    def _around(self, at: Place) -> Iterator[LiveTable]:
        """Live tables at ``at``, above it, or below it."""
        scheme, authority, steps = at
        for depth in range(len(steps), -1, -1):
            yield from self._at((scheme, authority, steps[:depth]))
        yield from self._below(at)

    def holders(self, location: str, what: str) -> list[LiveTable]:
        """The tables whose location equals, holds or lies in ``location``.

        Raises:
            TableLocationError: ``location`` is a refused form (``what``: what it is).
        """
        return list(self._around(place(location, what)))

    def conflicts(self, what: str, location: str, metadata_file: str, exclude: Key,
                  ) -> Iterator[tuple[LiveTable, str]]:
        """The tables (but ``exclude``) whose files a table using ``location`` and
        ``metadata_file`` would share, each with how, in words (``location X overlaps the
        location Y of``); arguments as :meth:`check_free`.

        Raises:
            TableLocationError: as :meth:`check_free`.
        """
        at = place(location, f"the location of {what}")
        if metadata_file:
            for other in self._with_metadata(place(metadata_file,
                                                   f"the metadata file of {what}")):
                if other.key != exclude:
                    yield other, (f"metadata file {metadata_file} is the current metadata "
                                  "of")
        for other in self._around(at):
            if other.key != exclude:
                yield other, f"location {location} overlaps the location {other.location} of"

    def check_free(self, what: str, location: str, metadata_file: str, exclude: Key) -> None:
        """Refuse a table location (and metadata file) another live table uses.

        Args:
            what: The table about to use them, for the error (``table sales.orders``).
            location: Its table location.
            metadata_file: Its metadata file ("" for none).
            exclude: That table itself.

        Raises:
            TableLocationError: the location or metadata file is a refused form
                (:func:`place`).
            LocationInUseError: the metadata file is another live table's, or the location
                equals, contains or lies in another live table's location.
        """
        for other, clash in self.conflicts(what, location, metadata_file, exclude):
            raise LocationInUseError(f"{what}: {clash} live table {other.name}", other.name)

    def owner(self, file: Place, skip: Callable[[LiveTable], bool]) -> LiveTable | None:
        """A table (but those ``skip`` names) whose location holds the file at ``file``,
        or whose metadata file it is."""
        scheme, authority, steps = file
        candidates = [*self._with_metadata((scheme, authority, steps)),
                      *(t for depth in range(len(steps) - 1, -1, -1)
                        for t in self._at((scheme, authority, steps[:depth])))]
        return next((t for t in candidates if not skip(t)), None)
