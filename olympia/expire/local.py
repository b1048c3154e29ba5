"""The same expiry run in one process: Python sets instead of DataFrames, for small catalogs.

Only data movement lives here; the steps and their order (:mod:`olympia.expire.job`) and
every rule (:mod:`olympia.expire.reachability`) are the ones the Spark job uses.
"""

from __future__ import annotations

from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import version_path
from olympia.catalog.transaction import now_millis
from olympia.expire.job import DEFAULT_SETTLE_MS, ExpireResult, FolderStats, StepHook, Walk, run
from olympia.expire.reachability import (
    CDEF,
    FILE,
    MISSING,
    NODE,
    Clock,
    DeleteReport,
    TxnRoots,
    delete_paths,
    expand_nodes,
    expand_roots,
    folder_of,
    is_candidate,
    read_transactions,
)
from olympia.storage import FileInfo, Storage
from olympia.versions.policy import Decision, ExpirePolicy


class LocalEngine:
    """Runs every step with the catalog's own Storage (its bounded thread pool)."""

    name = "local"

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def list_files(self, prefixes: list[str]) -> dict[str, FileInfo]:
        listings = self.storage.map(self.storage.list, prefixes)
        return {f.path: f for files in listings for f in files}

    def transactions(self, listing: dict[str, FileInfo]) -> list[TxnRoots]:
        return list(read_transactions(self.storage, sorted(p for p in listing
                                                           if p.startswith("dtxn/"))))

    def walk(self, versions: range, roots: list[str], order: int, prior: Walk | None) -> Walk:
        reached: set[str] = set(prior.handle) if prior else set()
        cdefs: set[str] = set(prior.cdefs) if prior else set()
        level = [p for p in dict.fromkeys([*map(version_path, versions), *roots])
                 if p not in reached]
        missing, frontier = [], set()
        for kind, path in expand_roots(self.storage, order, level):
            if kind == MISSING:
                missing.append(path)
            elif kind == NODE:
                frontier.add(path)
            else:
                reached.add(path)
                if kind == CDEF:
                    cdefs.add(path)
        nodes = prior.nodes if prior else 0
        levels = 1
        frontier -= reached
        while frontier:  # one tree level of every root at once; shared nodes read once
            batch = sorted(frontier)
            reached.update(batch)
            nodes += len(batch)
            levels += 1
            frontier = set()
            for kind, path in expand_nodes(self.storage, order, batch):
                if kind == FILE:
                    reached.add(path)
                elif path not in reached:
                    frontier.add(path)
        return Walk(reached, cdefs, missing, nodes, max(levels, prior.levels if prior else 0))

    def classify(self, listing: dict[str, FileInfo], walk: Walk, keep: set[str],
                 decision: Decision, probe: list[str],
                 ) -> tuple[dict[str, FolderStats], list[FileInfo], set[str]]:
        stats: dict[str, FolderStats] = {}
        candidates = []
        for path, info in sorted(listing.items()):
            entry = stats.setdefault(folder_of(path), FolderStats())
            entry.listed += 1
            entry.listed_bytes += info.size
            if path in walk.handle or path in keep:
                entry.reachable += 1
            elif is_candidate(path, info.modified, decision.new_oldest, decision.cutoff_ms):
                entry.candidates += 1
                entry.candidate_bytes += info.size
                candidates.append(info)
        return stats, candidates, {p for p in probe if p in listing}

    def sample(self, candidates: list[FileInfo], size: int) -> list[str]:
        return [f.path for f in candidates[:size]]

    def delete(self, candidates: list[FileInfo], roots: bool) -> DeleteReport:
        return delete_paths(self.storage, [f.path for f in candidates
                                           if (folder_of(f.path) == "vn") == roots])

    def remaining(self, candidates: list[FileInfo], prefixes: list[str],
                  ) -> dict[str, tuple[int, int]]:
        now = self.list_files(prefixes)
        out: dict[str, tuple[int, int]] = {}
        for f in candidates:
            if f.path in now:
                count, size = out.get(folder_of(f.path), (0, 0))
                out[folder_of(f.path)] = (count + 1, size + f.size)
        return out

    def reached(self, candidates: list[FileInfo], walk: Walk, size: int) -> list[str]:
        return [f.path for f in candidates if f.path in walk.handle][:size]

    def release(self) -> None:
        pass


def expire_local(catalog: Catalog, policy: ExpirePolicy, dry_run: bool = False, *,
                 now_ms: int | None = None, settle_ms: int = DEFAULT_SETTLE_MS,
                 on_step: StepHook | None = None, prefix_split: int = 1,
                 clock: Clock = now_millis) -> ExpireResult:
    """Expire old versions of ``catalog`` and delete files nothing kept references, in
    this process (fine for small catalogs; the Spark job is the product). The arguments
    are :func:`olympia.expire.job.run`'s."""
    return run(LocalEngine(catalog.storage), catalog, policy, dry_run, now_ms=now_ms,
               settle_ms=settle_ms, on_step=on_step, prefix_split=prefix_split, clock=clock)
