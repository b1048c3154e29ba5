"""`olympia serve`: load_table through the server vs in process, and concurrent appends.

(a) load_table of one table with a few snapshots: pyiceberg's RestCatalog through a running
server vs OlympiaCatalog and pyiceberg's SqlCatalog (SQLite) in process, each warm (one client
object) and cold (a new client object per load, so no metadata cache), and in process with
the metadata cache off (``parsing``: each load parses the metadata file, as a REST client
parses every answer); on local disk and on the S3 test server. Where the server's time
goes is measured in layers: the server's own work without HTTP (its CatalogService in this
process, answer serialised), a raw HTTP GET (adding HTTP and the ASGI stack), and
RestCatalog.load_table (adding the client parsing the answer). Goal: through the server
<= 3x in process.

(b) 16 clients (threads, each its own RestCatalog) appending one row at a time to 16 tables
vs one client appending to one table: aggregate commits/s (goal >= 2x one client's), p99,
rows and versions counted afterwards (zero lost); then 16 clients appending to ONE table,
retrying 409s as pyiceberg users do: every append must land.

(c) issue 46, on local disk: a create's latency in a catalog of 100, 1,000 and 10,000
tables, in process (OlympiaCatalog) and through the server (RestCatalog), with the table
definitions a create decodes and the storage reads it makes (counted in process; goal: they
do not grow with the catalog, but for a tree level); and listing a namespace of 2,000
tables: in process warm and in a fresh catalog object (cold), a page of 100 through the
service, and RestCatalog.list_tables.

(d) with ``OLYMPIA_BENCH_BASELINE`` (the path of a git worktree of an earlier commit), (a)
on local disk by this code and by that checkout's own, each in a process of its own,
taking turns in paired rounds: each way's median per side and the per-round ratios this /
main (``local_vs_main``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException

from benchmarks.common import ROOT, guarded, per_second, percentiles, s3_location, workdir
from olympia.catalog.objects import Table as TableDef
from olympia.iceberg import OlympiaCatalog
from olympia.server import CatalogService
from olympia.server.paging import Page

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
TABLE = ("bench", "events")
CLIENTS = 16
GOAL_LOAD = 3.0
GOAL_SCALE = 2.0


def _row(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64()), "name": [f"row-{i}"]}, schema=SCHEMA)


def _latency(fn: Callable[[], Any], count: int) -> dict[str, float]:
    fn()  # the first call of each kind pays for imports and connections
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


@contextlib.contextmanager
def _server(uri: str, warehouse: str, options: dict[str, Any],
            client_properties: dict[str, str]) -> Iterator[Any]:
    """``olympia serve`` in a subprocess (the test suite's runner), stopped by its PID."""
    sys.path.insert(0, str(ROOT / "tests"))
    from restserver import RestServer

    extra = tuple(f"--client-property={k}={v}" for k, v in client_properties.items())
    with RestServer(uri, warehouse, options, extra) as server:
        yield server


def _get(url: str, path: str) -> Callable[[], None]:
    """A raw HTTP GET of ``path`` on one kept-alive connection."""
    address = urlsplit(url)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)

    def get() -> None:
        conn.request("GET", path)
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"GET {path}: {answer.status}")

    return get


def load_table(uri: str, warehouse: str, options: dict[str, Any],
               iceberg_properties: dict[str, str], sql_uri: str, sql_warehouse: str,
               loads: int, snapshots: int) -> dict[str, Any]:
    """(a) on one storage: latencies (ms) of each way to load the same table."""
    props = {"uri": uri, "warehouse": warehouse, "olympia.create": "true",
             **iceberg_properties}
    catalog = OlympiaCatalog("bench", **props)
    catalog.create_namespace(TABLE[0])
    table = catalog.create_table(TABLE, SCHEMA)
    sql = SqlCatalog("sql", uri=sql_uri, warehouse=sql_warehouse, **iceberg_properties)
    sql.create_namespace(TABLE[0])
    sql_table = sql.create_table(TABLE, SCHEMA)
    for i in range(snapshots):
        table.append(_row(i))
        sql_table.append(_row(i))
    out: dict[str, Any] = {"loads": loads, "snapshots": snapshots}
    out["in_process_warm"] = _latency(lambda: catalog.load_table(TABLE), loads)
    out["in_process_cold"] = _latency(lambda: _cold_load(props), loads)
    parsing = OlympiaCatalog("bench", **{**props, "olympia.metadata-cache-size": "0"})
    out["in_process_parsing"] = _latency(lambda: parsing.load_table(TABLE), loads)
    parsing.close()
    out["sql_warm"] = _latency(lambda: sql.load_table(TABLE), loads)
    out["sql_cold"] = _latency(
        lambda: SqlCatalog("sql", uri=sql_uri, warehouse=sql_warehouse,
                           **iceberg_properties).load_table(TABLE), loads)
    service = CatalogService(catalog, {})
    out["server_work_in_process"] = _latency(
        lambda: service.load_table(*TABLE, "all"), loads)
    with _server(uri, warehouse, options, iceberg_properties) as server:
        out["http_get"] = _latency(_get(server.url, "/v1/namespaces/bench/tables/events"),
                                   loads)
        client = server.client()
        out["rest_warm"] = _latency(lambda: client.load_table(TABLE), loads)
        out["rest_cold"] = _latency(lambda: server.client().load_table(TABLE), loads)
    catalog.close()
    out["ratios"] = {
        "rest_vs_in_process_warm": _ratio(out["rest_warm"], out["in_process_warm"]),
        "rest_vs_in_process_cold": _ratio(out["rest_cold"], out["in_process_cold"]),
        "rest_vs_in_process_parsing": _ratio(out["rest_warm"], out["in_process_parsing"]),
        "rest_vs_sql_warm": _ratio(out["rest_warm"], out["sql_warm"]),
        "rest_vs_sql_cold": _ratio(out["rest_cold"], out["sql_cold"]),
    }
    return out


LOAD_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from benchmarks.bench_rest import load_table
print(json.dumps(load_table(*json.loads(sys.argv[2]))))
"""


def _checkout_load(checkout: Path, args: list[Any]) -> dict[str, Any]:
    """:func:`load_table` of the code in ``checkout`` (its own olympia, benchmark code and
    ``olympia serve``), in a process of its own.

    Raises:
        RuntimeError: The run failed (its error output is in the message).
    """
    done = subprocess.run([sys.executable, "-c", LOAD_RUN, str(checkout), json.dumps(args)],
                          cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)},
                          capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode:
        raise RuntimeError(f"load_table of {checkout} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def load_vs_baseline(tmp: Path, baseline: Path, rounds: int, loads: int,
                     snapshots: int) -> dict[str, Any]:
    """(d): :func:`load_table` on local disk by this checkout and by ``baseline`` in turns
    (the side going first alternates), each on fresh files."""
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "main": []}
    for n in range(rounds):
        for side in ("this", "main") if n % 2 == 0 else ("main", "this"):
            place = tmp / f"vs-{side}-{n}"
            args = [str(place / "catalog"), f"file://{place}/warehouse", {}, {},
                    f"sqlite:///{tmp}/vs-{side}-{n}.db", f"file://{place}/sql-wh", loads,
                    snapshots]
            runs[side].append(_checkout_load(ROOT if side == "this" else baseline, args))
    ways = [k for k, v in runs["this"][0].items()
            if isinstance(v, dict) and "median_ms" in v and k in runs["main"][0]]
    out: dict[str, Any] = {"rounds": rounds, "loads": loads}
    for way in ways:
        this = [r[way]["median_ms"] for r in runs["this"]]
        main = [r[way]["median_ms"] for r in runs["main"]]
        by_round = [round(t / m, 2) for t, m in zip(this, main, strict=True)]
        out[way] = {"this_ms": statistics.median(this), "main_ms": statistics.median(main),
                    "ratio_this_to_main": statistics.median(by_round),
                    "ratio_by_round": by_round}
    return out


def _cold_load(props: dict[str, str]) -> None:
    """A new OlympiaCatalog loads the table (and is closed)."""
    catalog = OlympiaCatalog("bench", **props)
    try:
        catalog.load_table(TABLE)
    finally:
        catalog.close()


def _latest(catalog: OlympiaCatalog) -> int:
    catalog.olympia.refresh()
    return catalog.olympia.version


def _ratio(a: dict[str, float], b: dict[str, float]) -> float:
    return round(a["median_ms"] / b["median_ms"], 2)


class _Retries(logging.Handler):
    """Counts pyiceberg's own commit retries: it answers a 409 by waiting (100 ms, doubling,
    jittered), reloading, rebuilding its snapshot and committing again, and logs each."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Commit failed due to a concurrent update"):
            self.count += 1


def _append_round(server: Any, clients: int, tables: list[tuple[str, str]],
                  per_client: int) -> dict[str, Any]:
    """``clients`` threads, each with its own RestCatalog, appending ``per_client`` rows to
    ``tables[i % len(tables)]``; a 409 that pyiceberg's own retries give up on is answered
    by reloading and appending again. A client that fails otherwise stops, and its error is
    reported (``clients_failed``). ``acknowledged`` holds the ids of the rows whose append
    was acknowledged."""
    loaded = [server.client(f"c{i}").load_table(tables[i % len(tables)])
              for i in range(clients)]
    latencies: list[float] = []
    acknowledged: set[int] = set()
    failures: list[str] = []
    retries = [0] * clients
    lock = threading.Lock()
    marks: dict[str, float] = {}
    barrier = threading.Barrier(clients, action=lambda: marks.setdefault(
        "start", time.perf_counter()))

    def work(i: int) -> None:
        table = loaded[i]
        barrier.wait()
        for k in range(per_client):
            started = time.perf_counter()
            while True:
                try:
                    table.append(_row(i * 10**6 + k))
                    break
                except CommitFailedException:
                    retries[i] += 1
                    table = table.refresh()
                except Exception as exc:  # the outcome of this append is unknown
                    with lock:
                        failures.append(f"client {i}, append {k}: {type(exc).__name__}: {exc}")
                    return
            with lock:
                latencies.append(time.perf_counter() - started)
                acknowledged.add(i * 10**6 + k)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    cpu_before = _cpu(psutil.Process()), _cpu(psutil.Process(server.process.pid))
    pyiceberg_log = logging.getLogger("pyiceberg.table")
    counter = _Retries()
    pyiceberg_log.addHandler(counter)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        pyiceberg_log.removeHandler(counter)
    seconds = time.perf_counter() - marks["start"]
    cpu_after = _cpu(psutil.Process()), _cpu(psutil.Process(server.process.pid))
    ordered = sorted(latencies)
    return {"clients": clients, "tables": len(tables), "appends": len(latencies),
            "acknowledged": acknowledged, "clients_failed": len(failures),
            "failures": failures[:5],
            "commits_per_s": per_second(len(latencies), seconds),
            **percentiles(latencies),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
            "pyiceberg_retries_of_409": counter.count,
            "client_retries_after_pyiceberg_gave_up": sum(retries),
            "wall_s": round(seconds, 3),
            # where the time goes: CPU seconds of the clients' process and the server's
            "client_cpu_s": round(cpu_after[0] - cpu_before[0], 3),
            "server_cpu_s": round(cpu_after[1] - cpu_before[1], 3)}


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def appends(tmp: Path, per_client: int) -> dict[str, Any]:
    """(b) on local disk: one client vs 16 on 16 tables vs 16 on one table, each checked
    afterwards: every acknowledged row there (``lost`` counts those missing), one catalog
    version per append."""
    uri, warehouse = str(tmp / "appends"), f"file://{tmp}/appends-wh"
    catalog = OlympiaCatalog("bench", uri=uri, warehouse=warehouse, **{"olympia.create": "true"})
    catalog.create_namespace("bench")
    names = [("bench", f"t{i:02d}") for i in range(CLIENTS)] + [("bench", "one"),
                                                                 ("bench", "shared")]
    for name in names:
        catalog.create_table(name, SCHEMA)
    out: dict[str, Any] = {"per_client": per_client}
    with _server(uri, warehouse, {}, {}) as server:
        for key, clients, tables, count in (
                ("one_client", 1, [("bench", "one")], per_client * 4),
                ("clients_16_tables_16", CLIENTS, names[:CLIENTS], per_client),
                ("clients_16_one_table", CLIENTS, [("bench", "shared")], per_client)):
            before = _latest(catalog)
            result = _append_round(server, clients, tables, count)
            landed = {i for t in tables
                      for i in catalog.load_table(t).scan().to_arrow()["id"].to_pylist()}
            result["rows_landed"] = len(landed)
            result["lost"] = len(result.pop("acknowledged") - landed)  # acknowledged, missing
            result["versions"] = _latest(catalog) - before
            out[key] = result
    catalog.close()
    out["scale_16_vs_1"] = round(out["clients_16_tables_16"]["commits_per_s"]
                                 / out["one_client"]["commits_per_s"], 2)
    return out


class _Decodes:
    """Counts the table definitions decoded (``Table.from_proto``) while in use."""

    def __init__(self) -> None:
        self.count = 0
        self._decode = TableDef.__dict__["from_proto"]

    def __enter__(self) -> _Decodes:
        decode = self._decode.__func__

        def counting(cls: type[TableDef], *args: Any) -> TableDef:
            self.count += 1
            return decode(cls, *args)  # type: ignore[no-any-return]

        TableDef.from_proto = classmethod(counting)  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        TableDef.from_proto = self._decode  # type: ignore[method-assign]


def _grow(catalog: OlympiaCatalog, tables: int) -> int:
    """Tables ``bench.t000000``... until namespace ``bench`` holds ``tables``, a thousand a
    version; how many it holds."""
    start = len(catalog.list_tables("bench"))
    for first in range(start, tables, 1000):
        with catalog.transaction() as tx:
            for i in range(first, min(tables, first + 1000)):
                tx.create_table(("bench", f"t{i:06d}"), SCHEMA)
    return len(catalog.list_tables("bench"))


def _new_table(catalog: Any) -> Callable[[], None]:
    """A create of a new table in ``bench`` through ``catalog`` (OlympiaCatalog or
    RestCatalog)."""
    return lambda: catalog.create_table(("bench", f"new-{uuid.uuid4().hex[:12]}"), SCHEMA)


def _create_costs(catalog: OlympiaCatalog) -> dict[str, int]:
    """What one create decodes and reads, counted after one create (which reads what
    changed since the catalog last checked a create: here, the tables just added)."""
    _new_table(catalog)()
    stats = catalog.olympia.storage.stats
    reads = stats.reads
    with _Decodes() as decodes:
        _new_table(catalog)()
    return {"definitions_decoded": decodes.count, "storage_reads": stats.reads - reads}


def creates(tmp: Path, sizes: tuple[int, ...], count: int) -> dict[str, Any]:
    """(c) a create's p50 in catalogs of each size, in process and through the server."""
    uri, warehouse = str(tmp / "scale"), f"file://{tmp}/scale-wh"
    catalog = OlympiaCatalog("bench", uri=uri, warehouse=warehouse,
                             **{"olympia.create": "true"})
    catalog.create_namespace("bench")
    out: dict[str, Any] = {"creates_per_size": count}
    for size in sizes:
        step: dict[str, Any] = {"tables": _grow(catalog, size)}
        step["counted"] = _create_costs(catalog)
        step["in_process"] = _latency(_new_table(catalog), count)
        with _server(uri, warehouse, {}, {}) as server:
            step["rest"] = _latency(_new_table(server.client()), count)
        out[str(size)] = step
    catalog.close()
    return out


def lists(tmp: Path, tables: int, count: int) -> dict[str, Any]:
    """(c) listing a namespace of ``tables`` tables."""
    uri, warehouse = str(tmp / "lists"), f"file://{tmp}/lists-wh"
    props = {"uri": uri, "warehouse": warehouse, "olympia.create": "true"}
    catalog = OlympiaCatalog("bench", **props)
    catalog.create_namespace("bench")
    out: dict[str, Any] = {"tables": _grow(catalog, tables), "lists": count}
    with _Decodes() as decodes:
        catalog.list_tables("bench")
    out["warm_definitions_decoded"] = decodes.count
    out["in_process_warm"] = _latency(lambda: catalog.list_tables("bench"), count)

    def cold() -> None:
        fresh = OlympiaCatalog("bench", **props)
        try:
            fresh.list_tables("bench")
        finally:
            fresh.close()

    out["in_process_cold"] = _latency(cold, max(3, count // 10))
    service = CatalogService(catalog, {})
    out["service_page_100"] = _latency(lambda: service.list_tables("bench", Page(None, 100)),
                                       count)
    with _server(uri, warehouse, {}, {}) as server:
        client = server.client()
        out["rest"] = _latency(lambda: client.list_tables("bench"), count)
    catalog.close()
    return out


def run(quick: bool) -> dict[str, Any]:
    loads, snapshots, per_client = (50, 10, 5) if quick else (500, 50, 25)
    out: dict[str, Any] = {"goal": f"rest_vs_in_process <= {GOAL_LOAD}x; scale_16_vs_1 >= "
                                   f"{GOAL_SCALE}x; lost == 0"}
    with workdir() as tmp:
        out["local"] = guarded(lambda: load_table(
            str(tmp / "catalog"), f"file://{tmp}/warehouse", {}, {}, f"sqlite:///{tmp}/sql.db",
            f"file://{tmp}/sql-wh", loads, snapshots))
        out["appends"] = guarded(lambda: appends(tmp, per_client))
        out["creates"] = guarded(lambda: creates(
            tmp, (100, 1000) if quick else (100, 1000, 10000), 10 if quick else 30))
        out["list_2000"] = guarded(lambda: lists(tmp, 2000, 10 if quick else 50))
        baseline = os.environ.get("OLYMPIA_BENCH_BASELINE")
        if baseline:
            out["local_vs_main"] = guarded(lambda: load_vs_baseline(
                tmp, Path(baseline), 2 if quick else 4, loads // 2, snapshots))
        with s3_location("rest") as (uri, options):
            bucket = uri.removeprefix("s3://").split("/", 1)[0]
            iceberg = {"s3.endpoint": options["client_kwargs"]["endpoint_url"],
                       "s3.access-key-id": options["key"],
                       "s3.secret-access-key": options["secret"], "s3.region": "us-east-1",
                       "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}
            out["s3"] = guarded(lambda: load_table(
                f"{uri}/catalog", f"s3://{bucket}/rest/warehouse", options, iceberg,
                f"sqlite:///{tmp}/sql-s3.db", f"s3://{bucket}/rest/sql-wh", loads, snapshots))
    return out
