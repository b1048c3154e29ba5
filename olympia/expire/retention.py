"""What an expiry run keeps and may delete — decided on the driver, shared by both engines.

Order of a run (docs/EXPIRY.md explains why each step is safe):

1. identify: list the prefix; read vn/latest..; decide the new oldest version; collect
   protected roots (exports, live distributed transactions); walk every file reachable from
   the retained and protected roots. Any unreadable node aborts here (fail closed).
2. raise ``vn/oldest`` (never lowered);
3. settle, then re-read the latest version: roots committed since step 1 (including a
   rollback to an old tree) and exports recorded since then are walked and kept too;
4. delete expired roots, then unreachable node/def/dtxn files older than the grace period.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from olympia.catalog.catalog import Catalog
from olympia.catalog.files import LATEST, OLDEST
from olympia.catalog.keys import path_version, version_path
from olympia.catalog.transaction import now_millis
from olympia.exceptions import FileNotFound
from olympia.expire.policy import ExpirePolicy
from olympia.storage import Storage
from olympia.tree.btree import NodeStore
from olympia.tree.node import decode_node
from olympia.versions.dtxn import list_transactions

FOLDERS = ("vn", "node", "def", "dtxn")
HEX = "0123456789abcdef"
SAMPLE_SIZE = 20


def listing_prefixes() -> list[str]:
    """Prefixes that split the catalog's files into similar-sized listings (uuid4 names)."""
    prefixes = ["vn/", "dtxn/"] + [f"node/{h}" for h in HEX]
    prefixes += [f"def/{kind}/{h}" for kind in ("catalog", "namespace", "table", "view")
                 for h in HEX]
    return prefixes


def folder_of(path: str) -> str:
    return path.split("/", 1)[0]


@dataclass
class Retention:
    """The decision of step 1, before any file is touched."""

    now_ms: int
    latest: int
    old_oldest: int
    new_oldest: int
    order: int
    retained_roots: list[str]
    protected: dict[str, str]  # root or node path -> why (export NAME / dtxn ID)
    expired_roots: list[str]
    expired_dtxns: list[str]
    seed_files: set[str]  # roots, catalog defs, defs held in roots, live dtxn files
    seed_nodes: set[str]  # children of kept roots, running roots of live transactions

    @property
    def versions_expired(self) -> int:
        return self.new_oldest - self.old_oldest


def decide(catalog: Catalog, policy: ExpirePolicy, now_ms: int | None = None) -> Retention:
    """Step 1 on the driver: versions to keep, roots to protect, seeds of the walk."""
    now = now_millis() if now_ms is None else now_ms
    files = catalog.files
    latest_root = files.discover_latest()
    latest = latest_root.version
    oldest = files.oldest_version()
    assert policy.keep_last is not None and policy.older_than_ms is not None
    keep_from = max(oldest, latest - policy.keep_last + 1)
    new_oldest = oldest
    # version v may go when a newer one superseded it long enough ago (monotonic in v)
    while new_oldest < keep_from and (
            files.read_root(new_oldest + 1).created_at_millis <= now - policy.older_than_ms):
        new_oldest += 1
    retained = [version_path(v) for v in range(new_oldest, latest + 1)]
    protected: dict[str, str] = {}
    for name, root_path in latest_root.catalog_def.exported_snapshots.items():
        protected[root_path] = f"export {name}"
    expired_dtxns = []
    running_nodes: set[str] = set()
    records = list_transactions(catalog)
    for record in records:
        if record.expire_at_millis < now:
            expired_dtxns.append(f"dtxn/{record.id}.binpb")
            continue
        protected[record.beginning_root_node_file_path] = f"transaction {record.id}"
        protected[record.running_root_node_file_path] = f"transaction {record.id}"
        running_nodes.add(record.running_root_node_file_path)
    kept_roots = sorted(set(retained) | {p for p in protected if p.startswith("vn/")})
    roots = catalog.storage.map(lambda p: _root_or_none(catalog, p), kept_roots)
    seed_files = {LATEST, OLDEST, *running_nodes}
    seed_files.update(f"dtxn/{r.id}.binpb" for r in records
                      if f"dtxn/{r.id}.binpb" not in expired_dtxns)
    seed_nodes: set[str] = set()
    order = latest_root.catalog_def.order
    for path in running_nodes:  # root-like nodes under node/: read them as roots
        running = decode_node(catalog.storage.read(path), catalog.storage.display(path), order,
                              root=True)
        seed_files.update(running.values)
        seed_nodes.update(running.children or ())
    for path, root in zip(kept_roots, roots, strict=True):
        if root is None:  # an export whose root is gone already: nothing to keep
            continue
        seed_files.add(path)
        seed_files.add(root.node.catalog_def or "")
        seed_files.update(root.node.values)
        seed_nodes.update(root.node.children or ())
    expired = [version_path(v) for v in range(oldest, new_oldest)
               if version_path(v) not in protected]
    return Retention(now, latest, oldest, new_oldest, order, retained,
                     protected, expired, expired_dtxns, seed_files - {""}, seed_nodes)


def _root_or_none(catalog: Catalog, path: str) -> Any:
    version = path_version(path)
    if version is None:
        return None
    try:
        return catalog.files.read_root(version)
    except Exception:
        if catalog.storage.exists(path):
            raise  # present but unreadable: fail closed
        return None


def expand(storage: Storage, order: int, paths: Iterable[str]) -> Iterator[tuple[str, str]]:
    """For each node path: ("node", child) and ("def", value) pairs. Raises on any
    unreadable node — a partial walk must never lead to a delete."""
    store = NodeStore(storage, order, cache_size=1)
    for path in paths:
        node = store.load(path)
        for child in node.children or ():
            yield "node", child
        for value in node.values:
            yield "def", value


def is_candidate(path: str, modified: float, cutoff_s: float, expired_roots: set[str],
                 expired_dtxns: set[str]) -> bool:
    """Whether an unreachable listed file may be deleted."""
    folder = folder_of(path)
    if folder == "vn":
        return path in expired_roots
    if folder == "dtxn":
        return path in expired_dtxns
    return folder in ("node", "def") and modified < cutoff_s


def delete_batch(storage: Storage, paths: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Delete (path, size) pairs; per folder [deleted, failed, bytes]. Missing = deleted."""
    out: dict[str, list[int]] = {}
    for path, size in paths:
        stats = out.setdefault(folder_of(path), [0, 0, 0])
        try:
            storage.delete(path)
            stats[0] += 1
            stats[2] += size
        except FileNotFound:
            stats[0] += 1
        except Exception:
            stats[1] += 1
    return out


def advance_oldest(catalog: Catalog, retention: Retention) -> None:
    """Step 2: raise vn/oldest (re-read first: it only ever moves up)."""
    current = catalog.files.oldest_version()
    if retention.new_oldest > current:
        catalog.files.write_hint(OLDEST, retention.new_oldest)


def late_arrivals(catalog: Catalog, retention: Retention, settle_seconds: float) -> set[str]:
    """Step 3: files reachable from roots committed, or exports recorded, since step 1."""
    if settle_seconds:
        time.sleep(settle_seconds)
    latest = catalog.files.discover_latest()
    extra_roots = [version_path(v) for v in range(retention.latest + 1, latest.version + 1)]
    extra_roots += [p for p in latest.catalog_def.exported_snapshots.values()
                    if p not in retention.protected]
    keep: set[str] = set()
    store = NodeStore(catalog.storage, retention.order)
    for path in extra_roots:
        root = _root_or_none(catalog, path)
        if root is None:
            continue
        keep.update({path, root.node.catalog_def or "", *root.node.values})
        level = list(root.node.children or ())
        while level:
            keep.update(level)
            nodes = store.load_many(level)
            keep.update(v for n in nodes for v in n.values)
            level = [c for n in nodes for c in (n.children or ())]
    return keep


@dataclass
class FolderStats:
    listed: int = 0
    reachable: int = 0
    candidates: int = 0
    deleted: int = 0
    failed: int = 0
    bytes_deleted: int = 0


@dataclass
class ExpireResult:
    catalog: str
    engine: str
    dry_run: bool
    policy: dict[str, Any]
    latest_version: int
    old_oldest_version: int
    new_oldest_version: int
    versions_expired: int
    protected: dict[str, str]
    folders: dict[str, FolderStats] = field(default_factory=dict)
    seconds_identifying: float = 0.0
    seconds_deleting: float = 0.0
    sample: list[str] = field(default_factory=list)

    @property
    def files_deleted(self) -> int:
        return sum(f.deleted for f in self.folders.values())

    @property
    def files_failed(self) -> int:
        return sum(f.failed for f in self.folders.values())

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["files_deleted"] = self.files_deleted
        data["files_failed"] = self.files_failed
        return data

    def rows(self) -> list[dict[str, Any]]:
        """One row per folder (what the Spark job returns as a DataFrame)."""
        return [{"folder": name, **asdict(stats)} for name, stats in sorted(self.folders.items())]


def new_result(catalog: Catalog, engine: str, dry_run: bool, policy: ExpirePolicy,
               retention: Retention) -> ExpireResult:
    return ExpireResult(catalog.uri, engine, dry_run, policy.to_dict(), retention.latest,
                        retention.old_oldest, retention.new_oldest,
                        retention.versions_expired, dict(retention.protected),
                        {f: FolderStats() for f in FOLDERS})


def merge_delete_stats(result: ExpireResult, stats: dict[str, list[int]]) -> None:
    for folder, (deleted, failed, size) in stats.items():
        entry = result.folders.setdefault(folder, FolderStats())
        entry.deleted += deleted
        entry.failed += failed
        entry.bytes_deleted += size

