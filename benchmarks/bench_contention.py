"""Commit throughput under concurrent writers: 1, 2, 4, 8 processes sharing one job of
one-table creates into one shared namespace (disjoint tables), on local disk and on S3.

The job is :data:`SHARES` shares of table creates (``wSS_IIIII``: share SS, its I-th
table); 8 writers take a share each, fewer take several, and one writer makes them all,
interleaved as the 8 would (see :func:`_names`). So every writer count builds the same
catalog, and the 8:1 ratio compares the same work: one writer making only one share builds
a catalog an eighth the size, whose commits are cheaper (at 2,400 tables one writer made
576-610 commits/s against 656-689 at 300, with 0.96 node writes per commit against 0.59),
and that part of the gap is not contention. That one-share writer, the baseline of every
figure before this change, still runs in each round (``1_one_share``), its ratio beside
the new one (``ratio_8_to_1_one_share``).

The local series runs :data:`LOCAL_ROUNDS` times, the S3 series :data:`S3_ROUNDS` times,
interleaved, and reports medians (see :func:`_series`). Per run: aggregate commits/s (all
writers, from a common start to the last commit), every writer's p50/p99 and worst commit
latency (the worst writer's shows starvation), root-creation attempts per commit (exclusive
creates of ``vn/...``: 1.0 means no lost race), lost commits (creates that did not land;
must be 0) and commits that gave up with CommitConflict (the writer counts them and goes on,
so a run never waits for a writer that died). Where the time goes, in counts that do not
depend on the machine's load: storage operations per commit by kind of file (``per_commit``:
root reads, reads that found no file, node reads and writes, definition writes, bytes
written), seconds paused per commit (``paused_ms_per_commit``) and the writers' CPU per
commit (``cpu_ms_per_commit``, user and system, all writers); the load average before and
after each run (``loadavg``), since the seconds are only as good as the machine was quiet;
every run starts after ``sync``, its ``dirty_kb_before_sync`` saying how much write-back it
was spared. Each round also runs 8 writers into catalogs of their own (``8_separate``): what
8 processes reach on these cores with no contention, against which the shared catalog's 8
writers are measured (``share_of_ceiling``). Then 8 threads of one process committing
through one catalog object, each commit separate and coalesced (``coalesce_commits``):
commits/s and versions written. ``local_coalesced``: one writer and 8 processes with
``coalesce_commits`` (paired rounds), where the writers of one host share versions
through letters to the holder of the local turn (``versions_per_commit``: versions made
over commits); the S3 series does the same through the host turn (``s3.coalesced``).
``local_sustained``: the job of 8 shares of
:data:`SUSTAINED_COMMITS` creates, made by one writer and by 8, once: whether a writer
starves while others keep committing (the worst commit's wait, commits that gave up).
Last, the S3 series again through a relay that delays each request by :data:`LATENCY_S`
(``s3_latency``): on this machine the S3 server shares the writers' CPU, so CPU, not
latency, bounds even one writer; with the delay, latency bounds one writer as it does
against a real S3 region.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing as mp
import os
import statistics
import threading
import time
from typing import Any

from benchmarks.common import guarded, recording, s3_location, stopwatch, workdir
from olympia import Catalog
from olympia.exceptions import CommitConflict

WRITERS = (1, 2, 4, 8)
THREADS = 8
LATENCY_S = 0.02  # per request in the s3_latency series: a small object's round trip to S3
LOCAL_COMMITS = 300  # a share: one share's run lasts about half a second (60 lasted 0.15 s)
LOCAL_ROUNDS = 5  # one writer ranged 405-615 commits/s within one 3-round run
S3_COMMITS = 30  # a share on S3 (15 made a share's run a quarter of a second)
S3_ROUNDS = 5  # paired rounds on S3 too: one writer ranged 36-76 commits/s, rounds 0.81-1.34
SUSTAINED_COMMITS = 2000  # a share in local_sustained: writers keep committing for seconds
SHARES = 8  # the job: 8 shares, a writer's each when 8 write
ONE_SHARE = "1_one_share"  # one writer making one share (the baseline before the shared job)
SEPARATE = "8_separate"  # 8 writers, each into a catalog of its own (see _series)
COLUMNS = [{"name": "id", "type": "int8"}]


def _names(writer: int, writers: int, shares: int, share: int) -> list[str]:
    """The tables ``writer`` (of ``writers``, which divide ``shares``) creates: shares
    ``writer``, ``writer + writers``, ..., of ``share`` tables each, interleaved (the I-th
    table of each of its shares, then the next I), so one writer inserts keys across the
    tree as 8 writers together do, not only at its right edge."""
    mine = range(writer, shares, writers)
    return [f"w{s:02d}_{i:05d}" for i in range(share) for s in mine]


def _writer(uri: str, options: dict[str, Any], names: list[str], writer: int,
            start_at: float, out: Any, coalesce: bool = False) -> None:
    """One process: wait for the common start, then create the tables ``names``, a commit
    each (``coalesce``: commits may share a version with other writers'); a commit that
    gives up (CommitConflict) is counted and the writer goes on."""
    catalog = Catalog.open(uri, options, coalesce_commits=coalesce)
    latencies: list[float] = []
    gave_up: list[str] = []
    paused: list[float] = []
    sleep = catalog.commit_options.sleep

    def pause(seconds: float) -> None:
        paused.append(seconds)
        sleep(seconds)

    catalog.commit_options = dataclasses.replace(catalog.commit_options, sleep=pause)
    with recording(catalog.storage) as log:
        catalog.storage.stats.reset()
        while time.time() < start_at:
            time.sleep(0.001)
        cpu_before = os.times()
        for name in names:
            begun = time.perf_counter()
            try:
                catalog.create_table("bench", name, columns=COLUMNS)
            except CommitConflict as exc:
                gave_up.append(str(exc))
            latencies.append(time.perf_counter() - begun)
        cpu_after = os.times()
    stats = catalog.storage.stats.snapshot()
    out.put({"writer": writer, "latencies": latencies, "finished": time.time(),
             "attempts": log.count("create_exclusive", "root"), "gave_up": gave_up,
             "paused": sum(paused), "cpu_s": {
                 "user": cpu_after.user - cpu_before.user,
                 "system": cpu_after.system - cpu_before.system}, "ops": {
                 "root_reads": log.count("read", "root"), "read_misses": stats["misses"],
                 "node_reads": log.count("read", "node"), "node_writes": log.count("write", "node"),
                 "def_writes": log.count("write", "def"), "hint_reads": log.count("read", "hint"),
                 "hint_writes": log.count("write", "hint"),
                 "exists": log.count("exists"),
                 "bytes_written": stats["bytes_written"],
                 "bytes_read": stats["bytes_read"]}})


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _loadavg() -> float:
    """The one-minute load average (0 where the system does not report one)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0


def _dirty_kb() -> int | None:
    """Data waiting to be written back to disk (``Dirty`` in /proc/meminfo), in kB."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("Dirty:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _run(uri: str, options: dict[str, Any], writers: int, share: int,
         shared: bool = True, shares: int = SHARES, coalesce: bool = False) -> dict[str, Any]:
    """``writers`` processes making a job of ``shares`` shares of ``share`` table creates
    between them (:func:`_names`), committing into one catalog at ``uri`` or, when not
    ``shared``, each into a catalog of its own under it (the same work with no contention:
    what the machine's cores allow ``writers`` processes)."""
    if shares % writers:
        raise ValueError(f"{writers} writers cannot split {shares} shares")
    uris = [uri if shared else f"{uri}/own-{w}" for w in range(writers)]
    for place in sorted(set(uris)):
        Catalog.create(place, options).create_namespace("bench")
    dirty = _dirty_kb()
    os.sync()  # no run pays for the write-back of the runs (or benchmarks) before it
    load_before = _loadavg()
    ctx = mp.get_context("spawn")  # never share a storage client across fork
    out = ctx.Queue()
    start_at = time.time() + 3.0 + 0.3 * writers  # after every interpreter has started
    procs = [ctx.Process(target=_writer, args=(
        uris[w], options, _names(w, writers, shares, share), w, start_at, out, coalesce))
        for w in range(writers)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=900) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    elapsed = max(r["finished"] for r in results) - start_at
    total = shares * share
    landed = sum(len(Catalog.open(place, options).list_tables("bench"))
                 for place in set(uris))
    per_writer = [{
        "writer": r["writer"],
        "p50_ms": round(statistics.median(r["latencies"]) * 1000, 2),
        "p99_ms": round(_quantile(r["latencies"], 0.99) * 1000, 2),
        "max_ms": round(max(r["latencies"]) * 1000, 2),
        "attempts_per_commit": round(r["attempts"] / len(r["latencies"]), 2),
    } for r in sorted(results, key=lambda r: r["writer"])]
    versions = max(Catalog.open(place, options).version for place in set(uris))
    return {
        "writers": writers, "commits": total, "versions": versions,
        "commits_per_s": round(total / max(elapsed, 1e-6), 1),
        "lost_commits": total - landed,
        "gave_up": sum(len(r["gave_up"]) for r in results),
        "gave_up_example": next((r["gave_up"][0] for r in results if r["gave_up"]), ""),
        "attempts_per_commit": round(sum(r["attempts"] for r in results) / total, 2),
        "worst_p99_ms": max(w["p99_ms"] for w in per_writer),
        "worst_max_ms": max(w["max_ms"] for w in per_writer),
        "per_commit": {name: round(sum(r["ops"][name] for r in results) / total, 2)
                       for name in results[0]["ops"]},
        "paused_ms_per_commit": round(sum(r["paused"] for r in results) * 1000 / total, 2),
        "cpu_ms_per_commit": {kind: round(sum(r["cpu_s"][kind] for r in results) * 1000 / total, 2)
                              for kind in ("user", "system")},
        "loadavg": [load_before, _loadavg()],
        "dirty_kb_before_sync": dirty,
        "per_writer": per_writer,
    }


def _threads(uri: str, options: dict[str, Any], threads: int, commits: int,
             coalesce: bool) -> dict[str, Any]:
    """``threads`` threads of this process committing through ONE catalog object, with
    and without coalescing: versions written against commits made."""
    Catalog.create(uri, options).create_namespace("bench")
    catalog = Catalog.open(uri, options, coalesce_commits=coalesce)
    start = threading.Barrier(threads)
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def work(thread: int) -> None:
        start.wait()
        for i in range(commits):
            begun = time.perf_counter()
            catalog.create_table("bench", f"t{thread:02d}_{i:05d}", columns=COLUMNS)
            latencies[thread].append(time.perf_counter() - begun)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    with stopwatch() as elapsed:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    total = threads * commits
    final = Catalog.open(uri, options)
    return {"threads": threads, "coalesce": coalesce, "commits": total,
            "commits_per_s": round(total / max(elapsed["seconds"], 1e-6), 1),
            "versions": final.version - 1, "lost_commits": total - len(final.list_tables("bench")),
            "worst_max_ms": round(max(max(t) for t in latencies) * 1000, 2),
            "loadavg": _loadavg()}


def _thread_series(location: Any, commits: int) -> dict[str, Any]:
    return {("coalesced" if on else "separate"): guarded(lambda on=on: location(on, commits))
            for on in (False, True)}


def _series(location: Any, share: int, rounds: int = 1) -> dict[str, Any]:
    """1, 2, 4 and 8 writers sharing the job of :data:`SHARES` shares of ``share`` creates
    (``location(writers, share, shared, shares)`` runs it), ``rounds`` times over,
    interleaved (1, 2, 4, 8, 1, 2, ...): this machine's disk speed drifts over minutes, and
    a ratio of two runs taken minutes apart measures the drift as much as the code. Each
    writer count reports its median run (by commits/s) with every round's commits/s in
    ``rounds``. ``ratio_8_to_1_by_round`` divides each round's pair, and ``ratio_8_to_1`` is
    their median: a paired figure, since the two medians can come from rounds minutes apart
    (``ratio_of_medians``, kept beside it, read 0.83 in a run whose rounds gave 0.58-0.98
    with a median of 0.69).

    Each round also runs 8 writers each committing one share into a catalog of its own
    (``8_separate``): the same number of commits without contention, what the machine's
    cores allow 8 processes. ``ceiling_8_to_1`` is that run's rate over one writer's, and
    ``share_of_ceiling`` the shared catalog's 8 writers over it: the part of the 8:1 ratio
    the catalog costs, apart from what the machine does. And one writer making one share
    (``1_one_share``), the baseline before the job was shared: ``ratio_8_to_1_one_share``."""
    counts: list[Any] = [*WRITERS, SEPARATE, ONE_SHARE]
    runs_as = {SEPARATE: (8, False, SHARES), ONE_SHARE: (1, True, 1)}
    trials: dict[Any, list[dict[str, Any]]] = {count: [] for count in counts}
    for _ in range(rounds):
        for count in counts:
            writers, shared, shares = runs_as.get(count, (count, True, SHARES))
            trials[count].append(guarded(
                lambda w=writers, s=shared, n=shares: location(w, share, s, n)))
    out: dict[str, Any] = {}
    for count, runs in trials.items():
        done = sorted((r for r in runs if "error" not in r), key=lambda r: r["commits_per_s"])
        out[str(count)] = done[len(done) // 2] if done else runs[0]
        if rounds > 1:
            out[str(count)]["rounds"] = [r.get("commits_per_s") for r in runs]
    rate = {count: out[str(count)].get("commits_per_s", 0) for count in counts}
    if rate[1]:
        out["ratio_8_to_1"] = round(rate[8] / rate[1], 2)
        out["ceiling_8_to_1"] = round(rate[SEPARATE] / rate[1], 2)
    if rate[ONE_SHARE]:
        out["ratio_8_to_1_one_share"] = round(rate[8] / rate[ONE_SHARE], 2)
    if rate[SEPARATE]:
        out["share_of_ceiling"] = round(rate[8] / rate[SEPARATE], 2)
    if rounds > 1:
        for one, key in ((1, "ratio_8_to_1"), (ONE_SHARE, "ratio_8_to_1_one_share")):
            by_round = _by_round(trials[one], trials[8])
            out[f"{key}_by_round"] = by_round
            if by_round:
                if one == 1:
                    out["ratio_of_medians"] = out.get(key)
                out[key] = statistics.median(by_round)
    return out


def _by_round(ones: list[dict[str, Any]], eights: list[dict[str, Any]]) -> list[float]:
    """Each round's 8:1 ratio (rounds whose one-writer run failed left out)."""
    return [round(eight.get("commits_per_s", 0) / one["commits_per_s"], 2)
            for one, eight in zip(ones, eights, strict=True) if one.get("commits_per_s")]


def _coalesced(location: Any, rounds: int) -> dict[str, Any]:
    """One writer and 8, coalescing on (``location(writers)`` runs the job), in ``rounds``
    paired rounds: 8 writers' commits share versions through letters to the holder of the
    turn (:func:`olympia.catalog.commit._land_shared`; the local turn on local disk, the
    host turn on S3). ``versions_per_commit`` is
    the share of commits that made a version of their own."""
    trials: dict[int, list[dict[str, Any]]] = {1: [], 8: []}
    for _ in range(rounds):
        for writers in trials:
            trials[writers].append(guarded(lambda w=writers: location(w)))
    out: dict[str, Any] = {}
    for writers, runs in trials.items():
        done = sorted((r for r in runs if "error" not in r), key=lambda r: r["commits_per_s"])
        out[str(writers)] = done[len(done) // 2] if done else runs[0]
        out[str(writers)]["rounds"] = [r.get("commits_per_s") for r in runs]
        if done:
            out[str(writers)]["versions_per_commit"] = round(
                (out[str(writers)]["versions"] - 1) / out[str(writers)]["commits"], 2)
    by_round = _by_round(trials[1], trials[8])
    out["ratio_8_to_1_by_round"] = by_round
    if by_round:
        out["ratio_8_to_1"] = statistics.median(by_round)
    return out


def _sustained(location: Any, share: int) -> dict[str, Any]:
    """The job of :data:`SHARES` shares of ``share`` creates, made by one writer, then by 8:
    the writers keep committing for many seconds, where a writer that keeps losing would
    wait for the others to finish (in the short runs each writer's whole run is under a
    second). ``worst_max_ms`` is the longest any commit waited; ``gave_up`` counts the
    commits that spent their time budget."""
    out = {str(w): guarded(lambda w=w: location(w, share)) for w in (1, 8)}
    if out["1"].get("commits_per_s") and out["8"].get("commits_per_s"):
        out["ratio_8_to_1"] = round(out["8"]["commits_per_s"] / out["1"]["commits_per_s"], 2)
    return out


def run(quick: bool) -> dict[str, Any]:
    local_commits, s3_commits = (10, 4) if quick else (LOCAL_COMMITS, S3_COMMITS)
    s3_rounds = 1 if quick else S3_ROUNDS
    result: dict[str, Any] = {}
    with workdir() as tmp:
        trial = itertools.count()
        result["local"] = _series(
            lambda w, n, shared, shares: _run(str(tmp / f"w{w}-{next(trial)}"), {}, w, n,
                                              shared, shares),
            local_commits,
            rounds=2 if quick else LOCAL_ROUNDS)
        result["local_coalesced"] = _coalesced(
            lambda w: _run(str(tmp / f"coalesced-w{w}-{next(trial)}"), {}, w, local_commits,
                           coalesce=True),
            rounds=2 if quick else LOCAL_ROUNDS)
        result["local_sustained"] = _sustained(
            lambda w, n: _run(str(tmp / f"sustained-w{w}"), {}, w, n),
            20 if quick else SUSTAINED_COMMITS)
        result["threads_local"] = _thread_series(
            lambda on, n: _threads(str(tmp / f"threads-{on}"), {}, THREADS, n, on),
            local_commits)

    def on_s3() -> dict[str, Any]:
        with s3_location("contention") as (uri, options):
            trial = itertools.count()
            series = _series(
                lambda w, n, shared, shares: _run(
                    f"{uri}/w{w}-{shared}-{next(trial)}", options, w, n, shared, shares),
                s3_commits, rounds=s3_rounds)
            series["threads"] = _thread_series(
                lambda on, n: _threads(f"{uri}/threads-{on}", options, THREADS, n, on),
                s3_commits)
            series["coalesced"] = _coalesced(
                lambda w: _run(f"{uri}/coalesced-w{w}-{next(trial)}", options, w,
                               s3_commits, coalesce=True), rounds=s3_rounds)
            return series

    result["s3"] = guarded(on_s3)

    def on_distant_s3() -> dict[str, Any]:
        with s3_location("contention", latency_s=LATENCY_S) as (uri, options):
            trial = itertools.count()
            series = _series(
                lambda w, n, shared, shares: _run(
                    f"{uri}/w{w}-{shared}-{next(trial)}", options, w, n, shared, shares),
                s3_commits, rounds=s3_rounds)
            series["latency_ms"] = LATENCY_S * 1000
            return series

    result["s3_latency"] = guarded(on_distant_s3)
    return result
