"""`olympia serve` against the REST catalogs users would pick instead (issue 46), in paired
rounds: the same pyiceberg client and raw HTTP requests against each server, the two sides
taking turns (the first side alternates), medians over rounds with their range. Each side
first serves one round's work unmeasured (no creates), so that the peers' JVMs have
compiled their hot paths before anything is counted.

- Local disk: Apache Iceberg's reference REST server (JDBC on SQLite, :mod:`benchmarks.peers`)
  against ``olympia serve`` on a local catalog.
- S3: Project Nessie (RocksDB; its warehouse on the same SeaweedFS) against ``olympia serve``
  with its catalog on SeaweedFS.

Per side and round: in the first round, create p50 as the namespace grows (the creates
just before each size mark) and ``list_tables`` of 2,000 tables (the two sides taking
turns up to each mark, and listing in turns); ``load_table`` p50/p99 (pyiceberg) and a raw
GET, single-row appends by one client and by 8 processes on 8 tables and on one table
(each writer's p99, appends lost: must be 0), property commits and one client's appends
(both sides' in turns, after the round), and the server's CPU seconds per operation (the
server process and its children). Goals, never asserted: see the issue; ratios are olympia
/ peer for times and olympia / peer for rates.

On local disk, once the servers stopped, also what landing one version costs each side in
this process (:func:`landing`, :func:`sqlite_row`), and each server's CPU per append in
turns outside it.

On S3, also the cost of one request through the S3 client the server's catalog uses
(:class:`olympia.storage.Storage` over s3fs, against the same SeaweedFS in the same run): CPU
and wall time per read, existence probe and exclusive create of a small file. A commit is a
chain of such requests, so this bounds what the server's CPU per append can fall to.
"""

from __future__ import annotations

import contextlib
import gc
import http.client
import json
import multiprocessing
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from queue import Empty
from typing import Any
from urllib.parse import quote, urlsplit

import psutil
import pyarrow as pa

from benchmarks import peers
from benchmarks.bench_rest import _get
from benchmarks.common import ROOT, guarded, per_second, percentiles, timed, workdir
from olympia import Catalog
from olympia.storage import Storage

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
WRITERS = 8
LIST_SIZE = 2000
MARK_SAMPLES = 50  # creates measured just before each size mark
PROPERTY_BLOCKS = 4  # property commits of the two sides interleave in this many blocks
APPEND_TURNS = 5  # single-writer appends of the two sides interleave in this many turns
LIST_TURNS, LISTS_A_TURN = 4, 5  # the two sides' lists of LIST_SIZE tables interleave


@dataclass
class Side:
    """One server under test: how to reach it with pyiceberg, and its process."""

    name: str
    uri: str
    properties: dict[str, str]
    pid: int

    def client(self) -> Any:
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(self.name, **{"uri": self.uri, **self.properties})

    def cpu(self) -> float:
        process = psutil.Process(self.pid)
        total = 0.0
        for p in (process, *process.children(recursive=True)):
            with contextlib.suppress(psutil.NoSuchProcess):
                times = p.cpu_times()
                total += times.user + times.system
        return total


def _row(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64()), "name": [f"row-{i}"]}, schema=SCHEMA)


def _timed(fn: Callable[[], Any], count: int) -> list[float]:
    fn()  # the first call pays for connections
    return timed(fn, count)


def _in_turn(first: Side, second: Side, turn: int) -> tuple[Side, Side]:
    """The two sides in the order they take turn ``turn``: the side going first alternates,
    so that both meet the same moments of a machine whose speed drifts."""
    return (first, second) if turn % 2 == 0 else (second, first)


def _p99_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)


def creates(first: Side, second: Side, namespace: str,
            marks: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    """Grow ``namespace`` on each side table by table, the two sides taking turns up to
    each mark (the side going first alternates), so that both meet the same minutes of a
    machine whose speed drifts: per mark, the creates just before it; once it holds
    :data:`LIST_SIZE` tables, ``list_tables`` in LIST_TURNS turns a side; and the server's
    CPU per create."""
    clients = {side.name: side.client() for side in (first, second)}
    out: dict[str, dict[str, Any]] = {name: {} for name in clients}
    made = dict.fromkeys(clients, 0)
    cpu = dict.fromkeys(clients, 0.0)
    for client in clients.values():
        client.create_namespace(namespace)
    for n, mark in enumerate(marks):
        for side in _in_turn(first, second, n):
            samples: list[float] = []
            before = side.cpu()
            while made[side.name] < mark:
                started = time.perf_counter()
                clients[side.name].create_table((namespace, f"t{made[side.name]:06d}"), SCHEMA)
                if made[side.name] >= mark - MARK_SAMPLES:
                    samples.append(time.perf_counter() - started)
                made[side.name] += 1
            cpu[side.name] += side.cpu() - before
            out[side.name][f"create_at_{mark}"] = {**percentiles(samples),
                                                   "p99_ms": _p99_ms(samples)}
        if mark == LIST_SIZE:
            lists: dict[str, list[float]] = {name: [] for name in clients}
            for client in clients.values():
                client.list_tables(namespace)  # the first call pays for connections
            for turn in range(LIST_TURNS):
                for side in _in_turn(first, second, turn):
                    lists[side.name] += timed(
                        lambda c=clients[side.name]: c.list_tables(namespace), LISTS_A_TURN)
            for name, samples in lists.items():
                out[name]["list_2000"] = percentiles(samples)
    for name in clients:
        out[name]["server_cpu_ms_per_create"] = round(cpu[name] / made[name] * 1000, 3)
    return out


def _raw_get(side: Side, path: str) -> Callable[[], None]:
    """A GET of ``path`` under the server's prefix for the warehouse (as ``/v1/config``
    names it), on one kept-alive connection (:func:`benchmarks.bench_rest._get`)."""
    address = urlsplit(side.uri)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
    base = address.path.rstrip("/")
    warehouse = side.properties.get("warehouse")
    conn.request("GET", f"{base}/v1/config"
                 + (f"?warehouse={quote(warehouse, safe='')}" if warehouse else ""))
    answer = conn.getresponse()
    config = json.loads(answer.read())
    # as pyiceberg takes it: verbatim (already encoded), an override over a default
    prefix = config.get("overrides", {}).get("prefix") or config.get("defaults", {}).get(
        "prefix")
    conn.close()
    return _get(side.uri, f"{base}/v1/{prefix + '/' if prefix else ''}{path}")


def loads(side: Side, namespace: str, count: int) -> dict[str, Any]:
    client = side.client()
    client.create_namespace(namespace)
    table = client.create_table((namespace, "events"), SCHEMA)
    for i in range(5):
        table.append(_row(i))
    pyiceberg = _timed(lambda: client.load_table((namespace, "events")), count)
    raw = _timed(_raw_get(side, f"namespaces/{quote(namespace)}/tables/events"), count)
    return {"pyiceberg_load": {**percentiles(pyiceberg), "p99_ms": _p99_ms(pyiceberg)},
            "raw_load": {**percentiles(raw), "p99_ms": _p99_ms(raw)}}


def properties(side: Side, namespace: str, count: int) -> float:
    """Seconds ``count`` property commits to a new table take."""
    client = side.client()
    client.create_namespace(namespace)
    table = client.create_table((namespace, "props"), SCHEMA)
    started = time.perf_counter()
    for i in range(count):
        with table.transaction() as txn:
            txn.set_properties({"bench.round": str(i)})
    return time.perf_counter() - started


def property_blocks(first: Side, second: Side, tag: str, count: int) -> dict[str, float]:
    """Property commits/s of each side: ``count`` commits each, in PROPERTY_BLOCKS blocks
    taking turns (the side going first alternates), so that both sides meet the same
    moments of a machine whose speed drifts."""
    spent = {first.name: 0.0, second.name: 0.0}
    per_block = max(1, count // PROPERTY_BLOCKS)
    for block in range(PROPERTY_BLOCKS):
        for side in _in_turn(first, second, block):
            spent[side.name] += properties(side, f"props_{tag}_{block}", per_block)
    return {name: per_second(per_block * PROPERTY_BLOCKS, seconds)
            for name, seconds in spent.items()}


def append_turns(first: Side, second: Side, tag: str, count: int) -> dict[str, float]:
    """Each server's CPU per single-row append: ``count`` appends to a new table on each
    side by one client in this process, in APPEND_TURNS turns a side (the side going first
    alternates), so that both servers are measured over the same minutes of a machine
    whose speed drifts (one side's whole round takes minutes)."""
    tables = {}
    for side in (first, second):
        client = side.client()
        client.create_namespace(f"turns_{tag}")
        tables[side.name] = client.create_table((f"turns_{tag}", "t"), SCHEMA)
    spent = {first.name: 0.0, second.name: 0.0}
    per_turn = max(1, count // APPEND_TURNS)
    for turn in range(APPEND_TURNS):
        for side in _in_turn(first, second, turn):
            before = side.cpu()
            for i in range(per_turn):
                tables[side.name].append(_row(turn * per_turn + i))
            spent[side.name] += side.cpu() - before
    return {name: round(cpu / (per_turn * APPEND_TURNS) * 1000, 3)
            for name, cpu in spent.items()}


def _writer(uri: str, props: dict[str, str], table: tuple[str, str], first: int,
            count: int, out: Any) -> None:
    """One writer process: ``count`` single-row appends, retrying lost races as pyiceberg
    users do (reload, append again); puts its latencies and, per append, the time its
    commit requests took (``commit_table``: the server's round trips, every try). pyiceberg's
    own retry of a 409 can end in a ValidationException when the server moved the table
    under it (seen on Nessie): that too is reloaded and tried again."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    catalog = RestCatalog("w", **{"uri": uri, **props})
    in_commit = [0.0]
    commit_table = catalog.commit_table

    def timed_commit(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return commit_table(*args, **kwargs)
        finally:
            in_commit[0] += time.perf_counter() - started

    catalog.commit_table = timed_commit  # type: ignore[method-assign]
    loaded = catalog.load_table(table)
    latencies, commits = [], []
    for k in range(count):
        started, in_commit[0] = time.perf_counter(), 0.0
        while True:
            try:
                loaded.append(_row(first + k))
                break
            except (CommitFailedException, ValidationException):
                loaded = loaded.refresh()
        latencies.append(time.perf_counter() - started)
        commits.append(in_commit[0])
    out.put((latencies, commits))


def appends(side: Side, namespace: str, writers: int, tables: int,
            per_writer: int) -> dict[str, Any]:
    """``writers`` processes appending ``per_writer`` rows each to ``tables`` tables; rows
    counted afterwards."""
    client = side.client()
    client.create_namespace(namespace)
    names = [(namespace, f"a{i}") for i in range(tables)]
    for name in names:
        client.create_table(name, SCHEMA)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(side.uri, side.properties,
                                               names[i % tables], i * 10**6, per_writer,
                                               queue)) for i in range(writers)]
    cpu_before = side.cpu()
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    results: list[tuple[list[float], list[float]]] = []
    while len(results) < len(procs):
        try:
            results.append(queue.get(timeout=5))
        except Empty:  # a writer that died puts nothing: stop waiting once all have ended
            if all(proc.exitcode is not None for proc in procs) and queue.empty():
                break
    for proc in procs:
        proc.join()
    seconds = time.perf_counter() - started  # includes each writer's start-up
    cpu = side.cpu() - cpu_before
    loaded = [client.load_table(n) for n in names]
    rows = sum(t.scan().to_arrow().num_rows for t in loaded)
    latencies = [x for r, _ in results for x in r]
    commits = [x for _, c in results for x in c]
    return {"writers": writers, "tables": tables, "appends": len(latencies),
            "appends_per_s": per_second(len(latencies), seconds),
            **percentiles(latencies), "p99_ms": _p99_ms(latencies),
            "worst_writer_p99_ms": max(_p99_ms(r) for r, _ in results),
            # per append: in the commit requests, and in the client outside them (its
            # data, manifest and manifest list files; pyiceberg's work on the metadata)
            "commit_request_ms": round(statistics.mean(commits) * 1000, 3),
            "client_ms": round(statistics.mean(
                [lat - c for lat, c in zip(latencies, commits, strict=True)]) * 1000, 3),
            "snapshots_in_metadata": max(len(t.metadata.snapshots) for t in loaded),
            "writers_failed": writers - len(results),
            "lost": len(latencies) - rows,  # acknowledged, yet not in the table
            "server_cpu_ms_per_append": round(cpu / max(1, len(latencies)) * 1000, 3)}


def _round(side: Side, tag: str, quick: bool) -> dict[str, Any]:
    count, per_writer = (20, 5) if quick else (200, 25)
    out: dict[str, Any] = {}
    out.update(loads(side, f"load_{tag}", count))
    out["appends_1"] = appends(side, f"one_{tag}", 1, 1, per_writer * 4)
    out["appends_8_on_8"] = appends(side, f"eight_{tag}", WRITERS, WRITERS, per_writer)
    out["appends_8_on_1"] = appends(side, f"shared_{tag}", WRITERS, 1, per_writer)
    return out


def _median(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def _summary(rounds: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Per metric, olympia's and the peer's medians over rounds and their ratio (olympia /
    peer), with the range of the per-round ratios (creates and lists: the first round's)."""
    metrics: dict[str, Callable[[dict[str, Any]], float | None]] = {}
    for key in rounds[0][0]:
        if key.startswith("create_at_") or key in ("list_2000", "pyiceberg_load", "raw_load"):
            metrics[f"{key}_p50_ms"] = lambda r, k=key: r.get(k, {}).get("median_ms")
        if key in ("pyiceberg_load", "raw_load"):
            metrics[f"{key}_p99_ms"] = lambda r, k=key: r[k]["p99_ms"]
        if key.startswith("appends_"):
            metrics[f"{key}_per_s"] = lambda r, k=key: r[k]["appends_per_s"]
            metrics[f"{key}_server_cpu_ms"] = lambda r, k=key: r[k]["server_cpu_ms_per_append"]
            metrics[f"{key}_commit_request_ms"] = lambda r, k=key: r[k]["commit_request_ms"]
            metrics[f"{key}_client_ms"] = lambda r, k=key: r[k]["client_ms"]
            metrics[f"{key}_snapshots_in_metadata"] = (
                lambda r, k=key: r[k]["snapshots_in_metadata"])
    metrics["property_commits_per_s"] = lambda r: r["property_commits_per_s"]
    metrics["server_cpu_ms_per_append_in_turns"] = (
        lambda r: r["server_cpu_ms_per_append_in_turns"])
    metrics["server_cpu_ms_per_create"] = lambda r: r.get("server_cpu_ms_per_create")
    out: dict[str, Any] = {}
    for name, pick in metrics.items():
        pairs = [(pick(o), pick(p)) for o, p in rounds]
        pairs = [(o, p) for o, p in pairs if o is not None and p]
        if pairs:
            out[name] = {"olympia": _median([o for o, _ in pairs]),
                         "peer": _median([p for _, p in pairs]),
                         "ratio": _median([o / p for o, p in pairs])}
    # the bound the clients set: the peer's time per append over olympia's if olympia's
    # commit requests took exactly the peer's (each side's client keeps its own work)
    for key in (k for k in rounds[0][0] if k.startswith("appends_")):
        bounds = [(p[key]["client_ms"] + p[key]["commit_request_ms"])
                  / (o[key]["client_ms"] + p[key]["commit_request_ms"]) for o, p in rounds]
        out[f"{key}_ratio_bound_at_peer_commit_time"] = _median(bounds)
    out["lost"] = {side: sum(pair[i][k]["lost"] for pair in rounds for k in pair[i]
                             if k.startswith("appends_"))
                   for i, side in enumerate(("olympia", "peer"))}
    return out


def _compare(olympia: Side, peer: Side, rounds: int, quick: bool,
             marks: tuple[int, ...]) -> dict[str, Any]:
    for side in (olympia, peer):  # not measured: the JVMs compile their hot paths
        _round(side, "warm", quick)
    results: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for n in range(rounds):
        first, second = _in_turn(olympia, peer, n)
        done = creates(first, second, f"grow_r{n}", marks) if n == 0 else {
            first.name: {}, second.name: {}}
        done[first.name].update(_round(first, f"r{n}", quick))
        done[second.name].update(_round(second, f"r{n}", quick))
        rates = property_blocks(first, second, f"r{n}", 20 if quick else 200)
        cpu = append_turns(first, second, f"r{n}", 20 if quick else 100)
        for name in rates:
            done[name]["property_commits_per_s"] = rates[name]
            done[name]["server_cpu_ms_per_append_in_turns"] = cpu[name]
        results.append((done[olympia.name], done[peer.name]))
    return {"rounds": rounds, "summary": _summary(results), "per_round": results}


def landing(catalog_uri: str, count: int) -> dict[str, Any]:
    """CPU (this thread) and storage operations per version of ``count`` commits through
    the library in this process, each setting a property of one table in the catalog the
    server served (after its rounds, the server stopped): what landing one version in the
    format's files costs, whatever the change (the table's definition, the changed node
    files and the root, each created and synced; the base's root confirmed; vn/latest
    written)."""
    catalog = Catalog.open(catalog_uri)
    catalog.create_namespace("landing")
    catalog.create_table(("landing", "t"), columns=[
        {"name": "id", "type": "int8", "nullable": False}, {"name": "name", "type": "string"}],
        format="parquet", location=f"file://{catalog_uri}/landing/t")
    for i in range(10):  # the first commits read what the server's commits left
        catalog.alter_table(("landing", "t"), set_properties={"n": f"warm-{i}"})
    catalog.storage.stats.reset()
    gc.collect()
    gc.freeze()  # the collector does not walk this process's other objects meanwhile
    cpu = time.thread_time()
    for i in range(count):
        catalog.alter_table(("landing", "t"), set_properties={"n": str(i)})
    spent = time.thread_time() - cpu
    gc.unfreeze()
    ops = catalog.storage.stats.snapshot()
    catalog.close()
    return {"versions": count, "cpu_ms_per_version": round(spent / count * 1000, 3),
            **{f"{name}_per_version": round(ops[name] / count, 2)
               for name in ("reads", "writes", "exists", "lists")}}


def sqlite_row(database: str, count: int) -> dict[str, Any]:
    """CPU (this thread) per commit of the reference's JDBC catalog, on its own SQLite file
    (its server stopped): ``count`` (even) compare-and-set updates of one table's row as
    its commits make, each its own transaction, the metadata location changed to a name of
    the same length and back (SQLite skips writing a row that stays the same)."""
    db = sqlite3.connect(database, isolation_level=None)
    row = db.execute("SELECT catalog_name, table_namespace, table_name, metadata_location, "
                     "previous_metadata_location FROM iceberg_tables LIMIT 1").fetchone()
    update = ("UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ?"
              " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
              " AND metadata_location = ?")
    current, other = row[3], row[3][:-1] + ("y" if row[3].endswith("x") else "x")
    cpu = time.thread_time()
    for _ in range(count + count % 2):
        if db.execute(update, (other, current, *row[:3], current)).rowcount != 1:
            raise RuntimeError(f"the reference's row of {row[1]}.{row[2]} changed")
        current, other = other, current
    spent = time.thread_time() - cpu
    db.execute("UPDATE iceberg_tables SET previous_metadata_location = ? WHERE catalog_name ="
               " ? AND table_namespace = ? AND table_name = ?", (row[4], *row[:3]))
    db.close()
    return {"commits": count + count % 2,
            "cpu_ms_per_commit": round(spent / (count + count % 2) * 1000, 3)}


def outside_landing(compared: dict[str, Any], olympia: float, peer: float) -> dict[str, Any]:
    """Each server's CPU per append in turns less its cost of landing a version
    (``olympia``: :func:`landing`, ``peer``: :func:`sqlite_row`), by round: the CPU each
    spends on the rest of a commit (HTTP, the Iceberg update, the metadata file, the
    answer; olympia also its checks of the table's files)."""
    pairs = [(o["server_cpu_ms_per_append_in_turns"] - olympia,
              p["server_cpu_ms_per_append_in_turns"] - peer)
             for o, p in compared["per_round"]]
    return {"olympia": _median([o for o, _ in pairs]), "peer": _median([p for _, p in pairs]),
            "ratio": _median([o / p for o, p in pairs])}


def request_cost(uri: str, options: dict[str, Any], count: int) -> dict[str, Any]:
    """CPU and wall ms per request of the catalog's storage at ``uri``: ``count`` reads,
    probes and exclusive creates of a 2 KB file (after one of each, which opens the
    connections)."""
    storage = Storage(uri, options)
    storage.create_exclusive("cost/read", b"x" * 2048)
    ops: dict[str, Callable[[int], Any]] = {
        "read": lambda _: storage.read("cost/read"),
        "probe": lambda _: storage.probe("cost/read"),
        "create_exclusive": lambda i: storage.create_exclusive(f"cost/new-{i}", b"y" * 2048)}
    out: dict[str, Any] = {"requests": count}
    for name, op in ops.items():
        op(-1)
        cpu, started = time.process_time(), time.perf_counter()
        for i in range(count):
            op(i)
        out[name] = {"cpu_ms": round((time.process_time() - cpu) / count * 1000, 3),
                     "wall_ms": round((time.perf_counter() - started) / count * 1000, 3)}
    storage.close()
    return out


@contextlib.contextmanager
def _olympia(catalog_uri: str, warehouse: str, options: dict[str, Any],
             client: dict[str, str]) -> Iterator[Side]:
    sys.path.insert(0, str(ROOT / "tests"))
    from restserver import RestServer

    Catalog.create(catalog_uri, options).close()
    extra = tuple(f"--client-property={k}={v}" for k, v in client.items())
    with RestServer(catalog_uri, warehouse, options, extra) as server:
        assert server.process is not None
        yield Side("olympia", server.url, {"warehouse": warehouse, **client},
                   server.process.pid)


def run(quick: bool) -> dict[str, Any]:
    rounds = 2 if quick else 4
    marks = (50, 200) if quick else (100, 1000, LIST_SIZE, 10000)
    out: dict[str, Any] = {"goals": {
        "local_vs_reference": "create p50 <= 1.0x flat 100..10,000; list 2,000 <= 1.0x; "
                              "server CPU per append <= 1.0x; appends/s 1 client >= 1.0x",
        "s3_vs_nessie": "raw load <= 2x; property commits/s >= 0.6x; appends/s (1 and 8 "
                        "clients) >= 0.8x", "lost": "0"}}
    sys.path.insert(0, str(ROOT / "tests"))
    from s3server import SeaweedS3Server

    with workdir() as tmp:
        def local() -> dict[str, Any]:
            with peers.reference(tmp) as ref, _olympia(
                    str(tmp / "catalog"), f"file://{tmp}/warehouse", {}, {}) as olympia:
                compared = _compare(olympia, Side("reference", ref.uri, {}, ref.process.pid),
                                    rounds, quick, marks)
            # the servers stopped: landing a version against committing a row, in process
            count = 20 if quick else 200
            compared["landing"] = {"olympia": landing(str(tmp / "catalog"), count),
                                   "reference": sqlite_row(str(tmp / "reference.db"), count)}
            compared["summary"]["server_cpu_ms_per_append_in_turns_outside_landing"] = (
                outside_landing(compared, compared["landing"]["olympia"]["cpu_ms_per_version"],
                                compared["landing"]["reference"]["cpu_ms_per_commit"]))
            return compared

        def s3() -> dict[str, Any]:
            with SeaweedS3Server(identities=True) as server, peers.nessie(tmp, server) as ness:
                options = dict(server.storage_options)
                client = {"s3.endpoint": server.endpoint_url, "s3.region": "us-east-1",
                          "s3.access-key-id": options["key"],
                          "s3.secret-access-key": options["secret"]}
                # the server's catalog and table files through obstore (its opt-in client:
                # `olympia serve` never forks), the clients' through their own FileIO
                with _olympia(f"s3://{server.bucket}/olympia/catalog",
                              f"s3://{server.bucket}/olympia/warehouse",
                              {**options, "client": "obstore"}, client) as olympia:
                    compared = _compare(olympia, Side("nessie", ness.uri, ness.properties,
                                                      ness.process.pid),
                                        max(2, rounds - 1), quick, marks[:2])
                compared["s3_client_request"] = {
                    name: request_cost(f"s3://{server.bucket}/olympia/cost-{name}",
                                       {**options, "client": name}, 50 if quick else 300)
                    for name in ("s3fs", "obstore")}
                return compared

        out["local"] = guarded(local)
        out["s3"] = guarded(s3)
    return out


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv), indent=2))
