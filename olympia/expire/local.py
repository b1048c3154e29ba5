"""Expiry in one process: the same plan as the Spark job, for small catalogs and tests."""

from __future__ import annotations

import time

from olympia.catalog.catalog import Catalog
from olympia.expire.policy import ExpirePolicy
from olympia.expire.retention import (
    SAMPLE_SIZE,
    ExpireResult,
    advance_oldest,
    decide,
    delete_batch,
    expand,
    folder_of,
    is_candidate,
    late_arrivals,
    listing_prefixes,
    merge_delete_stats,
    new_result,
)


def expire_local(catalog: Catalog, policy: ExpirePolicy, dry_run: bool = False, *,
                 now_ms: int | None = None, settle_seconds: float = 2.0) -> ExpireResult:
    """Expire old versions and remove unreferenced files of ``catalog`` in this process."""
    started = time.monotonic()
    policy = policy.resolved(catalog.properties)
    storage = catalog.storage
    listed = [f for files in storage.map(storage.list, listing_prefixes()) for f in files]
    retention = decide(catalog, policy, now_ms)
    reachable = set(retention.seed_files)
    frontier = sorted(retention.seed_nodes)
    while frontier:
        reachable.update(frontier)
        found = list(expand(storage, retention.order, frontier))
        reachable.update(v for kind, v in found if kind == "def")
        frontier = sorted({v for kind, v in found if kind == "node"} - reachable)
    result = new_result(catalog, "local", dry_run, policy, retention)
    cutoff = (retention.now_ms - (policy.grace_ms or 0)) / 1000
    expired_roots, expired_dtxns = set(retention.expired_roots), set(retention.expired_dtxns)
    candidates = []
    for f in listed:
        stats = result.folders[folder_of(f.path)]
        stats.listed += 1
        if f.path in reachable:
            stats.reachable += 1
        elif is_candidate(f.path, f.modified, cutoff, expired_roots, expired_dtxns):
            stats.candidates += 1
            candidates.append((f.path, f.size))
    result.sample = sorted(p for p, _ in candidates)[:SAMPLE_SIZE]
    result.seconds_identifying = time.monotonic() - started
    if dry_run:
        return result
    started = time.monotonic()
    advance_oldest(catalog, retention)
    keep = late_arrivals(catalog, retention, settle_seconds)
    candidates = [(p, s) for p, s in candidates if p not in keep]
    # roots first: a version disappears before the files only it referenced
    roots = [c for c in candidates if folder_of(c[0]) == "vn"]
    for phase in (roots, [c for c in candidates if folder_of(c[0]) != "vn"]):
        batches = [phase[i:i + 500] for i in range(0, len(phase), 500)]
        for deleted in storage.map(lambda batch: delete_batch(storage, batch), batches):
            merge_delete_stats(result, deleted)
    result.seconds_deleting = time.monotonic() - started
    return result
