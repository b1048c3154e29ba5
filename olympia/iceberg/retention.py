"""A kept catalog version stays readable: what the versions the retention policy keeps need of
an Iceberg table, and the two commit rules that keep it reachable from the table's current
metadata (which is all that Iceberg's snapshot expiry and orphan-file removal look at).

A catalog version reads a table through the metadata file its definition names: that file,
and the snapshots its refs point at (``main`` and every branch and tag head) with their
manifest lists, manifests and data files. The versions kept are those an ``olympia expire``
run with the catalog's own settings would keep now (:func:`olympia.versions.policy.decide`:
the retention window), the versions recorded as exports in the latest catalog definition and
the beginning versions of live distributed transactions.

1. A commit that removes snapshots (``remove-snapshots``, what ``expire_snapshots`` sends) is
   refused with :class:`KeptSnapshotError` when a kept version's metadata file of the same
   table (same uuid, whatever its name then) has one of them as a ref head. The metadata
   files of the window are found on the table's lineage, not by walking the versions: every
   file from the one the window's oldest version names to the current one is in the current
   file's ``metadata-log`` (rule 2). When the oldest one is neither there nor the table's
   beginning, the check refuses: it cannot tell what those versions read. (Versions later in
   the window that a catalog rollback left off the lineage are not seen: docs/ICEBERG.md.)
2. The ``metadata-log`` (how orphan-file removal reaches older metadata files) is trimmed
   only by a commit that removes snapshots, and then only of files no kept version names;
   other commits keep every entry pyiceberg would have dropped for
   ``write.metadata.previous-versions-max``.

What is read costs nothing for other commits; a commit removing snapshots reads the window's
oldest root, each kept metadata file of the table once per catalog object (Iceberg metadata
files are immutable; what they say is kept by location) and the transaction records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import RemoveSnapshotsUpdate, TableUpdate

from olympia import exceptions as oe
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import path_version
from olympia.catalog.objects import Table as TableDef
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import now_millis
from olympia.iceberg.metadata import is_iceberg
from olympia.lru import LruCache
from olympia.versions.dtxn import list_transactions
from olympia.versions.policy import ExpirePolicy, decide, export_roots, format_duration

#: Metadata files whose ref heads a catalog object remembers.
HEADS_CACHE_SIZE = 4096


class KeptSnapshotError(oe.CatalogError, CommitFailedException):
    """A commit would remove snapshots that catalog versions the retention policy keeps
    read, or cannot tell which snapshots those versions read. Also pyiceberg's
    ``CommitFailedException`` (the REST server answers 409, as for any refused commit)."""


@dataclass(frozen=True)
class Heads:
    """What one metadata file says that the check needs: which snapshots its refs point at
    (snapshot id -> ref names) and whether it begins its table's lineage (no metadata-log)."""

    refs: dict[int, tuple[str, ...]]
    first: bool

    @classmethod
    def of(cls, metadata: TableMetadata) -> Heads:
        """The heads of ``metadata`` (``main`` is its current snapshot in format 1)."""
        refs: dict[int, list[str]] = {}
        for ref_name, ref in metadata.refs.items():
            refs.setdefault(ref.snapshot_id, []).append(ref_name)
        if metadata.current_snapshot_id is not None and metadata.current_snapshot_id not in refs:
            refs[metadata.current_snapshot_id] = ["main"]
        return cls({s: tuple(sorted(names)) for s, names in refs.items()},
                   not metadata.metadata_log)


@dataclass(frozen=True)
class KeptVersions:
    """The catalog versions kept now: the window ``start``..``latest`` of ``policy``, and
    the ``pinned`` versions outside it (version -> why: an export, a transaction)."""

    start: int
    latest: int
    policy: ExpirePolicy
    pinned: dict[int, str]

    def window(self) -> str:
        """The retention window in words, for messages."""
        return (f"catalog versions {self.start} to {self.latest} (the retention window: "
                f"keep-last {self.policy.keep_last}, older-than "
                f"{format_duration(self.policy.older_than_ms or 0)})")


def kept_versions(store: Catalog, now_ms: int | None = None) -> KeptVersions:
    """The versions an expiry run with the catalog's own settings would keep at ``now_ms``
    (default: now), with the exports of the latest catalog definition and the beginning
    versions of live distributed transactions.

    Raises:
        InvalidArgumentError: a retention property of the catalog is malformed.
    """
    now = now_millis() if now_ms is None else now_ms
    latest = store.files.discover_latest()
    # the catalog's settings as they are, even below the minimum a run needs force for
    policy = ExpirePolicy(force=True).resolved(latest.catalog_def.properties)
    decision = decide(store.files, policy, now)
    pinned: dict[int, str] = {}
    for root, reason in export_roots(latest.catalog_def).items():
        version = path_version(root)
        if version is not None and version < decision.new_oldest:
            pinned.setdefault(version, reason)
    assert policy.grace_ms is not None
    for record in list_transactions(store):
        version = path_version(record.beginning_root_node_file_path)
        if (version is not None and version < decision.new_oldest
                and record.expire_at_millis > now - policy.grace_ms):
            pinned.setdefault(version, f"distributed transaction {record.id}")
    return KeptVersions(decision.new_oldest, decision.latest, policy, pinned)


def files_at(snapshot: Snapshot, ns: str, name: str, uuid: str) -> list[str]:
    """The metadata files tables with ``uuid`` have at ``snapshot``'s version: looked up
    under ``ns.name`` first, else among every table (it was renamed, or did not exist)."""

    def same(definition: TableDef) -> bool:
        return (is_iceberg(definition)
                and definition.format_properties.get("table-uuid") == uuid)

    try:
        definition = snapshot.load_table(ns, name)
        if same(definition):
            return [definition.location]
    except oe.NoSuchTableError:
        pass
    _, tables, _ = snapshot.load_all()
    return [t.location for t in tables if same(t)]


def removes_snapshots(updates: Iterable[TableUpdate]) -> set[int]:
    """The snapshot ids ``updates`` remove."""
    return {s for u in updates if isinstance(u, RemoveSnapshotsUpdate) for s in u.snapshot_ids}


class Retention:
    """Applies the two rules to a table commit (see the module). One per catalog object; it
    remembers the ref heads of metadata files it read.

    Args:
        store: The Olympia catalog.
        read: Reads and parses a metadata file (``location``, ``table`` for messages).
        parallel: Runs a function over items concurrently (the storage's pool).
    """

    def __init__(self, store: Catalog, read: Callable[[str, str], TableMetadata],
                 parallel: Callable[[Callable[[str], Heads], list[str]], list[Heads]]) -> None:
        self._store = store
        self._read = read
        self._parallel = parallel
        self._heads: LruCache[str, Heads] = LruCache(HEADS_CACHE_SIZE)

    def apply(self, ns: str, name: str, base: TableMetadata, base_location: str,
              new: TableMetadata, updates: Sequence[TableUpdate]) -> TableMetadata:
        """The metadata to commit instead of ``new`` (what pyiceberg made of ``base``, whose
        file is ``base_location``, and ``updates``).

        Raises:
            KeptSnapshotError: ``updates`` remove a snapshot a kept version reads, or the
                versions of the retention window cannot be told.
        """
        full = [*base.metadata_log, *new.metadata_log[-1:]]
        dropped = len(full) - len(new.metadata_log)
        removed = removes_snapshots(updates)
        if not removed:
            # nothing dropped from the log: kept versions' files stay reachable
            return new if not dropped else new.model_copy(update={"metadata_log": full})
        table = f"{ns}.{name}"
        chain = [entry.metadata_file for entry in base.metadata_log] + [base_location]
        kept = kept_versions(self._store)
        start, pinned = self._needed(ns, name, str(base.table_uuid), chain, kept)
        if start is None:
            raise KeptSnapshotError(
                f"cannot remove snapshots of table {table}: {kept.window()} include versions "
                "whose metadata files of this table its metadata-log no longer lists (trimmed "
                "before this catalog kept them, or left behind by a rollback or "
                "register_table), so the snapshots they read cannot be told. Expire those "
                "catalog versions first (olympia expire), or wait until they leave the window")
        segment = chain[start:]
        locations = [*segment, *pinned]
        heads = dict(zip(locations, self._heads_of(locations, table), strict=True))
        self._refuse_needed(table, removed, heads, set(segment), pinned, kept)
        # what pyiceberg dropped from the log goes, except the files kept versions name
        keep = set(locations)
        head = [e for e in full[:dropped] if e.metadata_file in keep]
        return new.model_copy(update={"metadata_log": head + list(new.metadata_log)})

    def _needed(self, ns: str, name: str, uuid: str, chain: list[str], kept: KeptVersions,
                ) -> tuple[int | None, dict[str, str]]:
        """Where on ``chain`` (the table's metadata files, oldest first, the current last)
        the files of the retention window begin (None: they cannot be told), and the
        metadata files of the pinned versions (file -> why)."""
        files = self._store.files
        oldest = files_at(Snapshot(files, files.read_root(kept.start)), ns, name, uuid)
        start: int | None
        if oldest:
            found = [i for i, f in enumerate(chain) if f in oldest]
            start = min(found) if found else None
        else:  # the table came later: its whole lineage is the window's, if it is all here
            start = 0 if self._heads_of(chain[:1], f"{ns}.{name}")[0].first else None
        pinned: dict[str, str] = {}
        for version, reason in sorted(kept.pinned.items()):
            for location in files_at(Snapshot(files, files.read_root(version)), ns, name, uuid):
                pinned.setdefault(location, f"{reason} (catalog version {version})")
        return start, pinned

    def _heads_of(self, locations: list[str], table: str) -> list[Heads]:
        def heads(location: str) -> Heads:
            known = self._heads.get(location)
            if known is None:
                known = Heads.of(self._read(location, table))
                self._heads.put(location, known)
            return known

        return self._parallel(heads, locations)

    @staticmethod
    def _refuse_needed(table: str, removed: set[int], heads: dict[str, Heads],
                       window: set[str], pinned: dict[str, str], kept: KeptVersions) -> None:
        needs: dict[int, list[str]] = {}
        for location, found in heads.items():
            for snapshot in sorted(removed & found.refs.keys()):
                refs = ", ".join(found.refs[snapshot])
                who = (kept.window() if location in window else pinned[location])
                needs.setdefault(snapshot, []).append(f"{who} read it as {refs}")
        if not needs:
            return
        listed = "; ".join(f"snapshot {s}: " + ", and ".join(dict.fromkeys(reasons))
                           for s, reasons in sorted(needs.items()))
        raise KeptSnapshotError(
            f"cannot remove {len(needs)} snapshot(s) of table {table} that kept catalog "
            f"versions read — {listed}. Expire only snapshots no kept version reads, or "
            "expire those catalog versions first (olympia expire; an export keeps its "
            "version)")
