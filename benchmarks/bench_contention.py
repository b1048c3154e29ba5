"""Commit throughput under concurrent writers: 1, 2, 4, 8 processes, each committing
one-table creates into one shared namespace (disjoint tables), on local disk and on S3.

Per run: aggregate commits/s (all writers, from a common start to the last commit), every
writer's p50/p99 commit latency (the worst writer's p99 shows starvation), root-creation
attempts per commit (exclusive creates of ``vn/...``: 1.0 means no lost race), lost
commits (creates that did not land; must be 0) and commits that gave up with CommitConflict
(the writer counts them and goes on, so a run never waits for a writer that died).
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from typing import Any

from benchmarks.common import guarded, recording, s3_location, workdir
from olympia import Catalog
from olympia.exceptions import CommitConflict

WRITERS = (1, 2, 4, 8)
COLUMNS = [{"name": "id", "type": "int8"}]


def _writer(uri: str, options: dict[str, Any], writer: int, commits: int, start_at: float,
            out: Any) -> None:
    """One process: wait for the common start, then commit ``commits`` table creates; a
    commit that gives up (CommitConflict) is counted and the writer goes on."""
    catalog = Catalog.open(uri, options)
    latencies: list[float] = []
    gave_up: list[str] = []
    with recording(catalog.storage) as log:
        while time.time() < start_at:
            time.sleep(0.001)
        for i in range(commits):
            begun = time.perf_counter()
            try:
                catalog.create_table("bench", f"w{writer:02d}_{i:05d}", columns=COLUMNS)
            except CommitConflict as exc:
                gave_up.append(str(exc))
            latencies.append(time.perf_counter() - begun)
    out.put({"writer": writer, "latencies": latencies, "finished": time.time(),
             "attempts": log.count("create_exclusive", "root"), "gave_up": gave_up})


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _run(uri: str, options: dict[str, Any], writers: int, commits: int) -> dict[str, Any]:
    catalog = Catalog.create(uri, options)
    catalog.create_namespace("bench")
    ctx = mp.get_context("spawn")  # never share a storage client across fork
    out = ctx.Queue()
    start_at = time.time() + 3.0 + 0.3 * writers  # after every interpreter has started
    procs = [ctx.Process(target=_writer, args=(uri, options, w, commits, start_at, out))
             for w in range(writers)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=900) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    elapsed = max(r["finished"] for r in results) - start_at
    total = writers * commits
    landed = len(Catalog.open(uri, options).list_tables("bench"))
    per_writer = [{
        "writer": r["writer"],
        "p50_ms": round(statistics.median(r["latencies"]) * 1000, 2),
        "p99_ms": round(_quantile(r["latencies"], 0.99) * 1000, 2),
        "attempts_per_commit": round(r["attempts"] / commits, 2),
    } for r in sorted(results, key=lambda r: r["writer"])]
    return {
        "writers": writers, "commits": total,
        "commits_per_s": round(total / max(elapsed, 1e-6), 1),
        "lost_commits": total - landed,
        "gave_up": sum(len(r["gave_up"]) for r in results),
        "gave_up_example": next((r["gave_up"][0] for r in results if r["gave_up"]), ""),
        "attempts_per_commit": round(sum(r["attempts"] for r in results) / total, 2),
        "worst_p99_ms": max(w["p99_ms"] for w in per_writer),
        "per_writer": per_writer,
    }


def _series(location: Any, commits: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for writers in WRITERS:
        out[str(writers)] = guarded(lambda w=writers: location(w, commits))
    single = out["1"].get("commits_per_s") if "error" not in out["1"] else None
    if single:
        out["ratio_8_to_1"] = round(out["8"].get("commits_per_s", 0) / single, 2)
    return out


def run(quick: bool) -> dict[str, Any]:
    local_commits, s3_commits = (10, 4) if quick else (60, 15)
    result: dict[str, Any] = {}
    with workdir() as tmp:
        result["local"] = _series(
            lambda w, n: _run(str(tmp / f"w{w}"), {}, w, n), local_commits)

    def on_s3() -> dict[str, Any]:
        with s3_location("contention") as (uri, options):
            return _series(lambda w, n: _run(f"{uri}/w{w}", options, w, n), s3_commits)

    result["s3"] = guarded(on_s3)
    return result
