"""Iceberg through pyiceberg: load_table and single-row append commits per second with
OlympiaCatalog vs pyiceberg's SqlCatalog (SQLite), same machine, same run, same warehouse
disk; Olympia storage operations per commit counted."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

from benchmarks.common import guarded, per_second, percentiles, workdir
from olympia.iceberg import OlympiaCatalog

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


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
