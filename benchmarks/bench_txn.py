"""Distributed transactions (issue 45): what a statement costs inside one, and what its
commit costs.

(a) Statements through a running ``olympia serve`` (local disk), pyiceberg's RestCatalog:
the same statement outside a transaction (warehouse ``<warehouse>``) and inside one
(warehouse ``<warehouse>@txn:<id>``), taking turns statement by statement (which side goes
first alternates), a fresh transaction per round, committed at the round's end (through
``sys.dtxns.<id>``, timed, one version) so both sides' tables grow alike. Statements: a
single-row append to an existing table, a table create, a ``load_table``. Per side p50/p90,
the ratio of medians (goal: inside <= 1.5x outside), and each round's own ratio. The server
reports no storage counts, so the catalog's storage operations per statement are measured
in a second, in-process run of the same statements through ``OlympiaCatalog.confined()``
(what the server uses) and its ``in_transaction``: ``Storage.stats`` of the catalog's own
files (table files -- data, manifests, metadata -- go through pyiceberg's FileIO and are
not counted). ``server_work``: the server's own work for a ``load_table`` without HTTP,
outside and inside (a service made per request, as the server does, and one kept).
``growth``: appends inside one long transaction, taking turns with appends outside it,
first statements against last.

(b) Commits, in process: transactions touching N tables with S appends spread over them
(configurations taking turns, order reversed every round); the time and storage operations
of ``catalog.distributed_transaction(id).commit()``, the versions it made (must be exactly
one) and the snapshots that landed on each table (must be all). Goal: cost tracks N, not S.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from benchmarks.common import ROOT, build_catalog, guarded, workdir
from olympia.iceberg import OlympiaCatalog
from olympia.server import CatalogService, transactions

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
NAMESPACE = "bench"
SYS = ("sys", "dtxns")
GOAL_RATIO = 1.5
COUNTED = ("reads", "writes", "exists", "lists", "deletes", "bytes_read", "bytes_written")


def _row(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64()), "name": [f"row-{i}"]}, schema=SCHEMA)


def _ms(samples: list[float]) -> dict[str, float]:
    """p50 and p90 in milliseconds."""
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))] * 1000, 3),
            "count": len(ordered)}


def _library(tmp: Path, name: str) -> OlympiaCatalog:
    return OlympiaCatalog("bench", uri=str(tmp / name), warehouse=f"file://{tmp}/{name}-wh",
                          **{"olympia.create": "true"})


def _latest(library: OlympiaCatalog) -> int:
    return library.olympia.refresh()


@contextlib.contextmanager
def _server(library: OlympiaCatalog) -> Iterator[Any]:
    """``olympia serve`` over ``library``'s catalog in a subprocess (the test suite's
    runner), stopped by its PID."""
    sys.path.insert(0, str(ROOT / "tests"))
    from restserver import RestServer

    with RestServer(library.olympia.uri, library.properties["warehouse"]) as server:
        yield server


class _Sides:
    """The statements of one round on one side, on a catalog (a RestCatalog or an
    OlympiaCatalog): appends to table ``stem`` (made by :func:`_targets`), creates of
    tables named after it, loads of it."""

    def __init__(self, catalog: Catalog, stem: str) -> None:
        self.catalog, self.stem = catalog, stem
        self.table: Table = catalog.load_table((NAMESPACE, stem))

    def statement(self, kind: str, i: int) -> Callable[[], object]:
        if kind == "append":
            return lambda: self.table.append(_row(i))
        if kind == "create":
            return lambda: self.catalog.create_table((NAMESPACE, f"{self.stem}_c{i}"), SCHEMA)
        return lambda: self.catalog.load_table((NAMESPACE, self.stem))


KINDS = ("append", "create", "load_table")


def _paired_round(outside: _Sides, inside: _Sides, r: int, per_kind: int,
                  samples: dict[str, dict[str, list[float]]]) -> dict[str, float]:
    """One round: ``per_kind`` statements of each kind on each side, taking turns (the
    side going first alternates); each round's ratio of medians per kind."""
    ratios = {}
    for kind in KINDS:
        mine: dict[str, list[float]] = {"outside": [], "inside": []}
        for k in range(per_kind):
            i = r * 10**6 + k
            order = (("outside", outside), ("inside", inside))
            for side, sides in order if (r + k) % 2 == 0 else order[::-1]:
                mine[side].append(_timed(sides.statement(kind, i)))
        for side, values in mine.items():
            samples[kind][side].extend(values)
        ratios[kind] = round(statistics.median(mine["inside"])
                             / statistics.median(mine["outside"]), 2)
    return ratios


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _summary(samples: dict[str, dict[str, list[float]]],
             rounds: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        outside, inside = _ms(samples[kind]["outside"]), _ms(samples[kind]["inside"])
        out[kind] = {"outside": outside, "inside": inside,
                     "ratio_of_medians": round(inside["p50_ms"] / outside["p50_ms"], 2),
                     "round_ratios": [r[kind] for r in rounds]}
    return out


def _targets(library: OlympiaCatalog, *stems: str) -> None:
    """Tables ``stems`` of one row each, committed before the round that appends to them:
    a fresh pair per round keeps pyiceberg's own work per append (it copies the table's
    metadata, which grows with its snapshots) alike on both sides and from round to
    round."""
    for stem in stems:
        library.create_table((NAMESPACE, stem), SCHEMA).append(_row(-1))


def statements_served(tmp: Path, rounds: int, per_kind: int) -> dict[str, Any]:
    """(a) through ``olympia serve``: statement latencies per side, and each round's
    commit through ``sys.dtxns.<id>``."""
    library = _library(tmp, "served")
    library.create_namespace(NAMESPACE)
    samples: dict[str, dict[str, list[float]]] = {k: {"outside": [], "inside": []}
                                                  for k in KINDS}
    per_round, commits, versions = [], [], []
    with _server(library) as server:
        client = server.client()
        for r in range(rounds):
            txn = f"stmt-{r}"
            _targets(library, f"out{r}", f"in{r}")
            client.create_namespace((*SYS, txn))
            outside = _Sides(client, f"out{r}")
            inside = _Sides(server.client(f"in{r}", warehouse=f"{server.warehouse}@txn:{txn}"),
                            f"in{r}")
            per_round.append(_paired_round(outside, inside, r, per_kind, samples))
            before = _latest(library)
            commits.append(_timed(partial(client.update_namespace_properties, (*SYS, txn),
                                          updates={"commit": "true"})))
            versions.append(_latest(library) - before)
    library.close()
    return {"rounds": rounds, "per_kind_per_round": per_kind, **_summary(samples, per_round),
            "commit_through_sys_dtxns": {**_ms(commits), "write_statements": 2 * per_kind,
                                         "versions_made": versions}}


class _Counted:
    """Times a statement and counts the catalog's storage operations it made."""

    def __init__(self, library: OlympiaCatalog) -> None:
        self.stats = library.olympia.storage.stats
        self.ops: list[dict[str, int]] = []

    def __call__(self, fn: Callable[[], object]) -> float:
        self.stats.reset()
        seconds = _timed(fn)
        self.ops.append(self.stats.snapshot())
        return seconds


def _ops_median(ops: list[dict[str, int]]) -> dict[str, float]:
    return {k: statistics.median(o[k] for o in ops) for k in COUNTED}


def statements_in_process(tmp: Path, rounds: int, per_kind: int) -> dict[str, Any]:
    """(a), second measurement: the same statements in process, with the catalog's storage
    operations of each."""
    library = _library(tmp, "inproc")
    library.create_namespace(NAMESPACE)
    confined = library.confined()
    samples: dict[str, dict[str, list[float]]] = {k: {"outside": [], "inside": []}
                                                  for k in KINDS}
    per_round: list[dict[str, float]] = []
    ops: dict[str, dict[str, list[dict[str, int]]]] = {k: {} for k in KINDS}
    for r in range(rounds):
        txn = f"stmt-{r}"
        _targets(library, f"out{r}", f"in{r}")
        library.olympia.begin_transaction(txn)
        outside = _Sides(confined, f"out{r}")
        inside = _Sides(confined.in_transaction(txn), f"in{r}")
        for kind in KINDS:  # the counts: one round of each side apart, not taking turns
            for side, sides in (("outside", outside), ("inside", inside)):
                counted = _Counted(library)
                for k in range(2):
                    counted(sides.statement(kind, 10**9 + r * 10 + k))
                ops[kind].setdefault(side, []).extend(counted.ops)
        per_round.append(_paired_round(outside, inside, r, per_kind, samples))
        library.olympia.distributed_transaction(txn).commit()
    library.close()
    out = _summary(samples, per_round)
    for kind in KINDS:
        for side in ("outside", "inside"):
            out[kind][side]["storage_ops_median"] = _ops_median(ops[kind][side])
    return {"rounds": rounds, "per_kind_per_round": per_kind, **out}


def server_work(tmp: Path, loads: int) -> dict[str, Any]:
    """The server's own work for a ``load_table`` (no HTTP: its CatalogService in this
    process, answer encoded), paired per call: outside; inside as the server does it (a
    service made for the request, :func:`olympia.server.transactions.in_transaction`); and
    inside through one service kept across requests (what keeping it would save)."""
    library = _library(tmp, "work")
    library.create_namespace(NAMESPACE)
    _targets(library, "out", "in")
    library.olympia.begin_transaction("work")
    inside = library.in_transaction("work").load_table((NAMESPACE, "in"))
    outside = library.load_table((NAMESPACE, "out"))
    for i in range(10):  # a few snapshots each, as a table being written has
        inside.append(_row(i))
        outside.append(_row(i))
    service = CatalogService(library, {})
    kept = transactions.in_transaction(service, "work")
    calls: dict[str, Callable[[], object]] = {
        "outside": lambda: service.load_table(NAMESPACE, "out", "all"),
        "inside_per_request": lambda: transactions.in_transaction(service, "work").load_table(
            NAMESPACE, "in", "all"),
        "inside_service_kept": lambda: kept.load_table(NAMESPACE, "in", "all")}
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()  # warm: the first call of each kind parses and encodes
    for i in range(loads):
        for name in list(calls) if i % 2 == 0 else list(calls)[::-1]:
            samples[name].append(_timed(calls[name]))
    library.olympia.distributed_transaction("work").abort()
    library.close()
    out: dict[str, Any] = {"loads": loads, **{name: _ms(v) for name, v in samples.items()}}
    out["ratio_of_medians"] = {name: round(out[name]["p50_ms"] / out["outside"]["p50_ms"], 2)
                               for name in calls if name != "outside"}
    return out


def growth(tmp: Path, statements: int, spread: int = 4) -> dict[str, Any]:
    """Appends inside ONE transaction, taking turns with appends outside it, each side's
    spread over ``spread`` tables (pyiceberg's own work grows with a table's snapshots):
    latency and storage operations of each side's first statements against its last. Does
    a statement cost more the more the transaction already holds?"""
    library = _library(tmp, "growth")
    library.create_namespace(NAMESPACE)
    sides = ("outside", "inside")
    _targets(library, *(f"{side}{j}" for side in sides for j in range(spread)))
    library.olympia.begin_transaction("growth")
    confined = library.confined()
    catalogs = {"outside": confined, "inside": confined.in_transaction("growth")}
    tables = {side: [catalogs[side].load_table((NAMESPACE, f"{side}{j}"))
                     for j in range(spread)] for side in sides}
    counted = {side: _Counted(library) for side in sides}
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    for i in range(statements):
        for side in sides if i % 2 == 0 else sides[::-1]:
            table = tables[side][i % spread]
            seconds[side].append(counted[side](partial(table.append, _row(i))))
    library.olympia.distributed_transaction("growth").abort()
    library.close()
    window = max(2, statements // 10)
    out: dict[str, Any] = {"statements": statements, "tables_per_side": spread,
                           "window": window}
    for side in sides:
        ops = counted[side].ops
        out[side] = {"first": {**_ms(seconds[side][:window]), **_ops_median(ops[:window])},
                     "last": {**_ms(seconds[side][-window:]), **_ops_median(ops[-window:])}}
    out["ratio_of_medians"] = {
        part: round(out["inside"][part]["p50_ms"] / out["outside"][part]["p50_ms"], 2)
        for part in ("first", "last")}
    return out


def _commit(library: OlympiaCatalog, txn: str) -> int:
    return library.olympia.distributed_transaction(txn).commit()


def commits(tmp: Path, rounds: int, sizes: tuple[int, ...], objects: int) -> dict[str, Any]:
    """(b) commit time and storage operations of transactions touching N tables with S
    appends (S = N and 4N), configurations taking turns, on a catalog of ``objects``
    objects in as many namespaces as the largest N (so its tree has two levels and each
    touched table, one per namespace, lies in a leaf of its own)."""
    uri = str(tmp / "commits")
    build_catalog(uri, {}, objects, namespaces=max(sizes)).close()
    library = OlympiaCatalog("bench", uri=uri, warehouse=f"file://{tmp}/commits-wh")
    names = [(f"ns{i:02d}", "iceberg") for i in range(max(sizes))]
    for name in names:
        library.create_table(name, SCHEMA)
    configs = [(n, s) for n in sizes for s in (n, 4 * n)]
    found: dict[tuple[int, int], dict[str, list[Any]]] = {
        c: {"seconds": [], "ops": [], "versions": [], "landed": []} for c in configs}
    for r in range(rounds):
        for n, s in configs if r % 2 == 0 else configs[::-1]:
            txn = f"c{n}-{s}-{r}"
            library.olympia.begin_transaction(txn)
            inside = library.in_transaction(txn)
            tables = [inside.load_table(name) for name in names[:n]]
            for i in range(s):
                tables[i % n].append(_row(i))
            before = {name: len(library.load_table(name).metadata.snapshots)
                      for name in names[:n]}
            version = _latest(library)
            counted = _Counted(library)
            seconds = counted(partial(_commit, library, txn))
            entry = found[n, s]
            entry["seconds"].append(seconds)
            entry["ops"].append(counted.ops[0])
            entry["versions"].append(_latest(library) - version)
            entry["landed"].append(all(
                len(library.load_table(name).metadata.snapshots) - before[name]
                == len(range(i, s, n)) for i, name in enumerate(names[:n])))
    out: dict[str, Any] = {"rounds": rounds, "catalog_objects": objects,
                           "tree_depth": library.olympia.snapshot.depth(), "configs": []}
    library.close()
    for (n, s), entry in found.items():
        out["configs"].append({
            "tables": n, "statements": s, **_ms(entry["seconds"]),
            "storage_ops_median": _ops_median(entry["ops"]),
            "versions_made": entry["versions"], "every_snapshot_landed": all(entry["landed"])})
    by = {(c["tables"], c["statements"]): c for c in out["configs"]}
    out["s4n_vs_sn_time_ratio"] = {
        str(n): round(by[n, 4 * n]["p50_ms"] / by[n, n]["p50_ms"], 2) for n in sizes}
    out["one_version_per_commit"] = all(
        v == 1 for c in out["configs"] for v in c["versions_made"])
    return out


def run(quick: bool) -> dict[str, Any]:
    rounds, per_kind, grow, commit_rounds, objects = ((2, 3, 12, 1, 2000) if quick
                                                      else (4, 5, 30, 3, 4000))
    out: dict[str, Any] = {
        "goal": f"inside <= {GOAL_RATIO}x outside per statement through the server; a commit "
                "is one version and its cost grows with the tables it touched, not the "
                "statements",
        "storage_ops_counted": "in process (Storage.stats of the catalog's files through "
                               "OlympiaCatalog.confined()); the server reports none"}
    load = os.getloadavg()
    with workdir() as tmp:
        out["served"] = guarded(lambda: statements_served(tmp, rounds, per_kind))
        out["in_process"] = guarded(lambda: statements_in_process(tmp, rounds, per_kind))
        out["server_work"] = guarded(lambda: server_work(tmp, 50 * per_kind))
        out["growth"] = guarded(lambda: growth(tmp, grow))
        out["commits"] = guarded(lambda: commits(tmp, commit_rounds, (1, 4, 16), objects))
    out["load_average"] = [round(x, 2) for x in (*load, *os.getloadavg())]
    return out
