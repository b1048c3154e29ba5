"""Iceberg through pyiceberg: load_table and single-row append commits per second with
OlympiaCatalog vs pyiceberg's SqlCatalog (SQLite), same machine, same run, same warehouse
disk; Olympia storage operations per commit counted.

``olympia_s3_latency``: OlympiaCatalog with its catalog and warehouse on SeaweedFS reached
through a relay that delays every request by :data:`LATENCY_S` (a real S3 region's round
trip): the p50 of a single-row append and of a property commit, and the catalog's storage
operations per commit. With requests this slow, a commit's time is the chain of round
trips on its path, which is what the count of round trips per commit (p50 over the delay)
shows."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

from benchmarks.common import guarded, per_second, percentiles, s3_location, workdir
from olympia.iceberg import OlympiaCatalog

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
LATENCY_S = 0.02  # per request in olympia_s3_latency (as bench_contention's s3_latency)


def _row(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64()), "name": [f"row-{i}"]}, schema=SCHEMA)


def _rate(fn: Callable[[int], Any], count: int) -> dict[str, Any]:
    samples = []
    started = time.perf_counter()
    for i in range(count):
        t0 = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t0)
    return {"count": count, "per_s": per_second(count, time.perf_counter() - started),
            **percentiles(samples)}


def measure(catalog: Catalog, loads: int, appends: int) -> dict[str, Any]:
    """load_table and append rates on one table of ``catalog``."""
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.events", SCHEMA)
    table.append(_row(-1))
    out = {"load_table": _rate(lambda _: catalog.load_table("bench.events"), loads),
           "append_commit": _rate(lambda i: table.append(_row(i)), appends)}
    rows = catalog.load_table("bench.events").scan().to_arrow().num_rows
    if rows != appends + 1:
        raise AssertionError(f"{rows} rows after {appends + 1} appends")
    return out


def olympia(tmp: Path, loads: int, appends: int, cache: bool) -> dict[str, Any]:
    catalog = OlympiaCatalog("bench", **{
        "uri": str(tmp / "olympia"), "warehouse": f"file://{tmp}/olympia-wh",
        "olympia.create": "true", "olympia.metadata-cache-size": "256" if cache else "0"})
    stats = catalog.olympia.storage.stats
    stats.reset()
    out = measure(catalog, loads, appends)
    total = stats.snapshot()
    # per commit: a separate short run, so the loads above do not count
    stats.reset()
    table = catalog.load_table("bench.events")
    sample = min(appends, 50)
    for i in range(sample):
        table.append(_row(10**6 + i))
    out["olympia_storage_ops_per_commit"] = {
        k: round(v / sample, 2) for k, v in stats.snapshot().items()
        if k in ("reads", "writes", "exists", "lists", "deletes")}
    out["olympia_storage_ops_whole_run"] = total
    return out


def olympia_s3_latency(commits: int) -> dict[str, Any]:
    """Appends and property commits through OlympiaCatalog on S3 with every request
    delayed by LATENCY_S."""
    with s3_location("iceberg", latency_s=LATENCY_S) as (uri, options):
        catalog = OlympiaCatalog("bench", **{
            "uri": f"{uri}/catalog", "warehouse": f"{uri}/warehouse", "olympia.create": "true",
            "s3.endpoint": options["client_kwargs"]["endpoint_url"],
            "s3.access-key-id": options["key"], "s3.secret-access-key": options["secret"],
            "s3.region": "us-east-1", "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"})
        catalog.create_namespace("bench")
        table = catalog.create_table("bench.events", SCHEMA)
        stats = catalog.olympia.storage.stats
        out: dict[str, Any] = {"latency_ms": LATENCY_S * 1000, "commits": commits}
        for name, commit in (("append_commit", lambda i: table.append(_row(i))),
                             ("property_commit", lambda i: table.transaction().set_properties(
                                 {"bench": str(i)}).commit_transaction())):
            stats.reset()
            out[name] = _rate(commit, commits)
            out[name]["round_trips"] = round(out[name]["median_ms"] / (LATENCY_S * 1000), 2)
            out[name]["olympia_storage_ops_per_commit"] = {
                k: round(v / commits, 2) for k, v in stats.snapshot().items()
                if k in ("reads", "writes", "exists", "lists", "deletes")}
        rows = catalog.load_table("bench.events").scan().to_arrow().num_rows
        if rows != commits:
            raise AssertionError(f"{rows} rows after {commits} appends")
        return out


def sql(tmp: Path, loads: int, appends: int) -> dict[str, Any]:
    catalog = SqlCatalog("bench", uri=f"sqlite:///{tmp}/sql.db",
                         warehouse=f"file://{tmp}/sql-wh")
    return measure(catalog, loads, appends)


def run(quick: bool) -> dict[str, Any]:
    loads, appends = (200, 50) if quick else (2000, 300)
    out: dict[str, Any] = {"loads": loads, "appends": appends}
    with workdir() as tmp:
        out["olympia"] = guarded(lambda: olympia(tmp, loads, appends, cache=True))
        out["olympia_no_metadata_cache"] = guarded(
            lambda: olympia(tmp / "nocache", loads, appends, cache=False))
        out["sql_sqlite"] = guarded(lambda: sql(tmp, loads, appends))
    out["olympia_s3_latency"] = guarded(lambda: olympia_s3_latency(10 if quick else 40))
    ratios: dict[str, float] = {}
    for key in ("load_table", "append_commit"):
        try:
            ratios[key] = round(out["olympia"][key]["per_s"] / out["sql_sqlite"][key]["per_s"], 2)
            ratios[f"{key}_no_cache"] = round(
                out["olympia_no_metadata_cache"][key]["per_s"] / out["sql_sqlite"][key]["per_s"],
                2)
        except (KeyError, TypeError, ZeroDivisionError):
            continue
    out["olympia_vs_sql"] = ratios
    out["goal"] = "olympia_vs_sql >= 1"
    return out
