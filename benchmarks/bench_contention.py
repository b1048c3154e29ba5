"""Commit throughput under concurrent writers (issue 33's series), measured side by side
in paired rounds, never asserted in tests.

Writers share nothing but the catalog prefix (separate processes, each its own storage
client, as on separate machines). The job is :data:`SHARES` shares of one-table creates
into one namespace (``wSS_IIIII``: share SS, its I-th table); 8 writers take a share each,
fewer take several, interleaved as the 8 would (:func:`_names`), so every writer count
builds the same catalog.

- ``local``: 1, 2, 4 and 8 writer processes on local disk (:func:`_series`, interleaved
  rounds, medians, each round's 8:1 ratio), 8 writers into catalogs of their own as the
  machine's ceiling (``8_separate``) and one writer making one share (``1_one_share``).
- ``local_vs_main``: 8 writer processes of this code against 8 of an earlier checkout in
  the same rounds (``OLYMPIA_BENCH_BASELINE``: the path of a git worktree of that commit;
  skipped without it), ``ratio_this_to_main``.
- ``local_sustained``: the job of 8 shares of :data:`SUSTAINED_COMMITS` creates by one
  writer and by 8: whether a writer starves while others keep committing.
- ``threads_local`` and ``s3.threads``: 1 thread and 8 threads of one process committing
  through one catalog object with ``coalesce_commits`` (:func:`_paired`), versions made
  per commit, and 8 threads each committing into a catalog of its own (``8_separate``:
  what the interpreter allows 8 threads when nothing is shared).
- ``s3``: the local series on a SeaweedFS server on this machine (co-located: it shares
  the writers' CPU); ``s3_latency``: the same through a relay that delays every request by
  :data:`LATENCY_S`, as a real S3 region's round trip would.

Per run: aggregate commits/s (all writers, from a common start to the last commit), every
writer's p50/p99 and worst commit latency, root creates per commit (1.0: no lost race),
lost commits (tables that did not land: must be 0) and commits that gave up with
CommitConflict; storage operations, bytes and CPU per commit; the load average before and
after, since the seconds are only as good as the machine was quiet.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
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
# the threads series: (threads, through one coalescing catalog object) per side
THREAD_SIDES: dict[Any, tuple[int, bool]] = {
    1: (1, True), SEPARATE: (THREADS, False), THREADS: (THREADS, True)}
COLUMNS = [{"name": "id", "type": "int8"}]


def _names(writer: int, writers: int, shares: int, share: int) -> list[str]:
    """The tables ``writer`` (of ``writers``, which divide ``shares``) creates: shares
    ``writer``, ``writer + writers``, ..., of ``share`` tables each, interleaved (the I-th
    table of each of its shares, then the next I), so one writer inserts keys across the
    tree as 8 writers together do, not only at its right edge."""
    mine = range(writer, shares, writers)
    return [f"w{s:02d}_{i:05d}" for i in range(share) for s in mine]


def _writer(uri: str, options: dict[str, Any], names: list[str], writer: int,
            start_at: float, out: Any) -> None:
    """One process: wait for the common start, then create the tables ``names``, a commit
    each; a commit that gives up (CommitConflict) is counted and the writer goes on."""
    catalog = Catalog.open(uri, options)
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
         shared: bool = True, shares: int = SHARES) -> dict[str, Any]:
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
        uris[w], options, _names(w, writers, shares, share), w, start_at, out))
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


def _threads(uri: str, options: dict[str, Any], threads: int, shared: bool,
             total: int) -> dict[str, Any]:
    """``threads`` threads of this process, ``total`` table creates split evenly between
    them, through ONE catalog object with ``coalesce_commits`` or, when not ``shared``,
    each through a catalog of its own (the same work with nothing shared: what one
    interpreter allows ``threads`` threads): commits/s, versions made per commit, each
    thread's p99 and the worst commit."""
    places = [uri] if shared else [f"{uri}/own-{t}" for t in range(threads)]
    for place in places:
        Catalog.create(place, options).create_namespace("bench")
    catalogs = [Catalog.open(place, options, coalesce_commits=shared) for place in places]
    commits = total // threads
    start = threading.Barrier(threads)
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def work(thread: int) -> None:
        catalog = catalogs[thread % len(catalogs)]
        start.wait()
        for i in range(commits):
            begun = time.perf_counter()
            catalog.create_table("bench", f"t{thread:02d}_{i:05d}", columns=COLUMNS)
            latencies[thread].append(time.perf_counter() - begun)

    load_before = _loadavg()
    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    with stopwatch() as elapsed:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finals = [Catalog.open(place, options) for place in places]
    return {"threads": threads, "commits": total,
            "commits_per_s": round(total / max(elapsed["seconds"], 1e-6), 1),
            "versions_per_commit": round(sum(f.version - 1 for f in finals) / total, 2),
            "lost_commits": total - sum(len(final.list_tables("bench")) for final in finals),
            "worst_p99_ms": round(max(_quantile(t, 0.99) for t in latencies) * 1000, 2),
            "worst_max_ms": round(max(max(t) for t in latencies) * 1000, 2),
            "loadavg": [load_before, _loadavg()]}


BASELINE_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from benchmarks.bench_contention import _run
print(json.dumps(_run(sys.argv[2], json.loads(sys.argv[5]), int(sys.argv[3]), int(sys.argv[4]))))
"""


def _run_baseline(checkout: str, uri: str, writers: int, share: int,
                  options: dict[str, Any]) -> dict[str, Any]:
    """:func:`_run` of an earlier checkout of this repository (its own olympia and
    benchmark code, in a process of its own, with its storage ``options``): the same job
    on the same disk.

    Raises:
        RuntimeError: The run failed (its error output is in the message).
    """
    done = subprocess.run([sys.executable, "-c", BASELINE_RUN, checkout, uri, str(writers),
                           str(share), json.dumps(options)], cwd=checkout,
                          capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode:
        raise RuntimeError(f"baseline run failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


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


def _paired(location: Callable[[Any], dict[str, Any]], rounds: int,
            sides: Sequence[Any] = (1, 8)) -> dict[str, Any]:
    """Every one of ``sides`` (``location(side)`` runs one) in each of ``rounds`` rounds,
    taking turns: each side's median run (by commits/s) with every round's commits/s, and
    each round's ratio of every side to each one before it, with their median
    (``ratio_<later>_to_<earlier>``)."""
    trials: dict[Any, list[dict[str, Any]]] = {side: [] for side in sides}
    for _ in range(rounds):
        for side in sides:
            trials[side].append(guarded(lambda side=side: location(side)))
    out: dict[str, Any] = {}
    for side, runs in trials.items():
        done = sorted((r for r in runs if "error" not in r), key=lambda r: r["commits_per_s"])
        out[str(side)] = done[len(done) // 2] if done else runs[0]
        out[str(side)]["rounds"] = [r.get("commits_per_s") for r in runs]
    for earlier, later in itertools.combinations(sides, 2):
        by_round = _by_round(trials[earlier], trials[later])
        out[f"ratio_{later}_to_{earlier}_by_round"] = by_round
        if by_round:
            out[f"ratio_{later}_to_{earlier}"] = statistics.median(by_round)
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
    local_rounds, s3_rounds = (2, 1) if quick else (LOCAL_ROUNDS, S3_ROUNDS)
    baseline = os.environ.get("OLYMPIA_BENCH_BASELINE")
    result: dict[str, Any] = {}
    with workdir() as tmp:
        trial = itertools.count()
        result["local"] = _series(
            lambda w, n, shared, shares: _run(str(tmp / f"w{w}-{next(trial)}"), {}, w, n,
                                              shared, shares),
            local_commits, rounds=local_rounds)
        if baseline:
            def eight(side: str) -> dict[str, Any]:
                uri = str(tmp / f"{side}-{next(trial)}")
                if side == "main":
                    return _run_baseline(baseline, uri, 8, local_commits, {})
                return _run(uri, {}, 8, local_commits)

            result["local_vs_main"] = _paired(eight, local_rounds,
                                              sides=("main", "this"))
        result["local_sustained"] = _sustained(
            lambda w, n: _run(str(tmp / f"sustained-w{w}"), {}, w, n),
            20 if quick else SUSTAINED_COMMITS)
        result["threads_local"] = _paired(
            lambda side: _threads(str(tmp / f"threads-{side}-{next(trial)}"), {},
                                  *THREAD_SIDES[side], SHARES * local_commits),
            rounds=local_rounds, sides=tuple(THREAD_SIDES))

    def on_s3(latency_s: float) -> dict[str, Any]:
        with s3_location("contention", latency_s=latency_s) as (uri, options):
            trial = itertools.count()
            series = _series(
                lambda w, n, shared, shares: _run(
                    f"{uri}/w{w}-{shared}-{next(trial)}", options, w, n, shared, shares),
                s3_commits, rounds=s3_rounds)
            series["threads"] = _paired(
                lambda side: _threads(f"{uri}/threads-{side}-{next(trial)}", options,
                                      *THREAD_SIDES[side], SHARES * s3_commits),
                rounds=s3_rounds, sides=tuple(THREAD_SIDES))
            series["latency_ms"] = latency_s * 1000
            return series

    result["s3"] = guarded(lambda: on_s3(0.0))
    result["s3_latency"] = guarded(lambda: on_s3(LATENCY_S))
    return result
