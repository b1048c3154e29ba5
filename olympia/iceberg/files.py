"""The files an Iceberg table references, and the rule a catalog whose writers are not
trusted (``OlympiaCatalog.confined``, what ``olympia serve`` uses) holds them to: every file
a table references lies under the table's own location.

Table locations never overlap (:class:`olympia.iceberg.locations.LiveIndex`), so a purge,
which deletes only under the purged table's location, then never deletes a file another
table references. The rule is checked where files enter a table: at create and register,
and on every commit, each file before it is read (:func:`olympia.iceberg.locations.confine`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import SetLocationUpdate, SetPropertiesUpdate, TableUpdate

from olympia.exceptions import TableLocationError
from olympia.iceberg.locations import Confinement, Place, inside, place
from olympia.iceberg.manifests import entries, manifest_paths
from olympia.lru import LruCache

#: Table properties that place the files a table's writers write.
PLACEMENT_PROPERTIES = ("write.metadata.path", "write.data.path", "write.object-storage.path")
RULE = "every file a table references must lie under the table's own location"

Check = Callable[[str, str], Place]  # (path, kind of file) -> its place, or raises
T = TypeVar("T")
R = TypeVar("R")


class Map(Protocol):
    """Runs ``fn`` over ``items`` (concurrently), results in input order."""

    def __call__(self, fn: Callable[[T], R], items: Iterable[T], /) -> list[R]: ...


def table_files(table: Table, check: Check) -> dict[str, dict[str, Place]]:
    """Every file ``table``'s current metadata names, by kind, with its place.

    Args:
        table: The table.
        check: Gives the place of a file (path, kind), or raises; called before the file
            is read.

    Returns:
        kind -> path -> place, for the kinds metadata, previous metadata, statistics,
        manifest list, manifest and data (data and delete files).
    """
    io, metadata = table.io, table.metadata
    stats = [s.statistics_path for s in (*metadata.statistics, *metadata.partition_statistics)]
    files: dict[str, dict[str, Place]] = {
        "metadata": {table.metadata_location: check(table.metadata_location, "metadata")},
        "previous metadata": {log.metadata_file: check(log.metadata_file, "previous metadata")
                              for log in metadata.metadata_log},
        "statistics": {path: check(path, "statistics") for path in stats},
        "manifest list": {}, "manifest": {}, "data": {}}
    for snapshot in metadata.snapshots:
        files["manifest list"][snapshot.manifest_list] = check(snapshot.manifest_list,
                                                               "manifest list")
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path not in files["manifest"]:
                files["manifest"][manifest.manifest_path] = check(manifest.manifest_path,
                                                                  "manifest")
                files["data"].update(_entries(io, manifest.manifest_path, check))
    return files


def _entries(io: FileIO, manifest: str, check: Check) -> dict[str, Place]:
    """The data and delete files the manifest at ``manifest`` names (deleted entries too),
    checked."""
    return {entry.data_file.file_path: check(entry.data_file.file_path, "data")
            for entry in entries(io, manifest)}


@contextlib.contextmanager
def _stating_rule() -> Iterator[None]:
    """Refusals raised inside state the rule."""
    try:
        yield
    except TableLocationError as exc:
        raise TableLocationError(f"{exc}; {RULE}") from None


def _confined(confinement: Confinement, path: str, what: str) -> Place:
    with _stating_rule():
        return confinement(path, what)


def under(location: str, table: str) -> Check:
    """A :data:`Check` refusing a file outside ``location``, the location of ``table``
    (``TableLocationError`` naming the table, the file and the rule)."""
    with _stating_rule():
        confinement = Confinement(location, "its location")
    return lambda path, kind: _confined(confinement, path, f"table {table}: its {kind} file")


def check_placement(metadata: TableMetadata, table: str) -> None:
    """Refuse a ``write.*.path`` property of ``metadata`` outside its table location.

    Raises:
        TableLocationError: a placement property outside the location (or a refused form).
    """
    keys = [key for key in PLACEMENT_PROPERTIES if key in metadata.properties]
    if keys:
        with _stating_rule():
            confinement = Confinement(metadata.location, "its location")
        for key in keys:
            _confined(confinement, metadata.properties[key], f"{key} of table {table}")


def check_commit(before: TableMetadata | None, after: TableMetadata,
                 updates: Iterable[TableUpdate], io: FileIO, table: str, parallel: Map,
                 seen: LruCache[tuple[str, str, str], frozenset[str]] | None = None) -> int:
    """Refuse a commit that would make ``table`` (at ``before``; ``None``: a create)
    reference a file outside its location in force after the commit (``after``).

    Checked: a location change (only to one holding the old location, so the files
    written so far stay under it), the ``write.*.path`` properties when the commit sets one
    or the location, new statistics files, and for each new snapshot its manifest list,
    every manifest it lists that its parent snapshot (one of ``before``'s, or one checked
    here) does not, and every data and delete file of those manifests, each before it is
    read. Which manifests are new is told by the manifest lists, never by what a manifest
    says of itself (``added_snapshot_id``). A parent's manifest list that an earlier check
    read for this table at this location (``seen``) is not read again: what it named then
    were the manifests checked then, so a list replaced since can only make more manifests
    count as new, never fewer.

    Args:
        before: The table's current metadata (``None``: the commit creates it).
        after: Its metadata after the commit.
        updates: The commit's updates.
        io: Reads the table's files.
        table: The table, for messages.
        parallel: Runs a function over items concurrently (the storage's pool).
        seen: The manifests named by each manifest list checks read before, by (table
            uuid, table location, the list's path); the new snapshots' lists are added
            (``None``: every list is read).

    Returns:
        How many files were read (manifest lists and manifests).

    Raises:
        TableLocationError: a file, location or property breaks the rule.
    """
    location, check = after.location, under(after.location, table)
    what = f"the location of table {table}"
    if before is not None and place(before.location, what) != place(location, what) \
            and not inside(before.location, location):
        raise TableLocationError(
            f"table {table}: its location may change only to one holding its files, under "
            f"{before.location}; {location} does not hold them ({RULE}: copy the files and "
            "register the copy's metadata instead)")
    if before is None or any(isinstance(u, SetLocationUpdate) or (
            isinstance(u, SetPropertiesUpdate) and set(u.updates) & set(PLACEMENT_PROPERTIES))
            for u in updates):
        check_placement(after, table)
    old = before or after.model_copy(update={"snapshots": [], "statistics": [],
                                             "partition_statistics": []})
    known_stats = {s.statistics_path for s in (*old.statistics, *old.partition_statistics)}
    for stats in (*after.statistics, *after.partition_statistics):
        if stats.statistics_path not in known_stats:
            check(stats.statistics_path, "statistics")
    ids = {s.snapshot_id for s in old.snapshots}
    new = [s for s in after.snapshots if s.snapshot_id not in ids]
    parents = {s.parent_snapshot_id for s in new} & ids
    parent_lists = [s.manifest_list for s in old.snapshots if s.snapshot_id in parents]
    new_lists = [s.manifest_list for s in new]
    for path in dict.fromkeys([*parent_lists, *new_lists]):
        check(path, "manifest list")
    scope = (str(after.table_uuid), location)  # checked against this table's location
    remembered = {path: names for path in parent_lists
                  if seen is not None and (names := seen.get((*scope, path))) is not None}
    unread = [*dict.fromkeys([*(p for p in parent_lists if p not in remembered), *new_lists])]
    listed = dict(zip(unread, parallel(lambda path: manifest_paths(io, path), unread),
                      strict=True))
    named = {**remembered, **{path: frozenset(paths) for path, paths in listed.items()}}
    checked = {s.snapshot_id: named[s.manifest_list]
               for s in old.snapshots if s.snapshot_id in parents}
    fresh: dict[str, None] = {}  # (in order)
    for snapshot in new:  # in the order they were added: a parent before its child
        known = checked.get(snapshot.parent_snapshot_id or -1, frozenset())
        for manifest in listed[snapshot.manifest_list]:
            if manifest not in known and manifest not in fresh:
                check(manifest, "manifest")
                fresh[manifest] = None
        checked[snapshot.snapshot_id] = named[snapshot.manifest_list]
    parallel(lambda manifest: _entries(io, manifest, check), list(fresh))
    if seen is not None:
        for path in new_lists:
            seen.put((*scope, path), named[path])
    return len(unread) + len(fresh)
