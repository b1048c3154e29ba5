"""Versions: timestamp travel reads on many versions, diff cost, export throughput."""

from __future__ import annotations

import math
import time
from typing import Any

from benchmarks.common import build_catalog, ops, s3_location, workdir
from olympia import Catalog, versions


def timestamp_travel(uri: str, count: int) -> dict[str, Any]:
    catalog = Catalog.create(uri)
    for i in range(count):
        catalog.create_namespace(f"n{i:06d}")
    probes = [catalog.at_version(v).created_at_millis for v in (1, count // 3, count - 7)]
    reads = []
    for millis in probes:
        cold = Catalog.open(uri)
        reads.append(ops(cold.storage, lambda c=cold, m=millis: versions.at_timestamp(c, m)))
    return {"versions": count + 1, "root_reads": [r["reads"] for r in reads],
            "exists_probes": [r["exists"] for r in reads],
            "goal_reads_at_most": round(2 * math.log2(count + 1), 1)}


def diff_cost(uri: str, objects: int) -> dict[str, Any]:
    catalog = build_catalog(uri, {}, objects)
    before = catalog.version
    catalog.alter_table("ns03", "t0000013", set_properties={"k": "v"})
    cold = Catalog.open(uri)
    started = time.perf_counter()
    counts = ops(cold.storage, lambda: versions.diff(cold, before, cold.version))
    return {"objects": objects, "depth": cold.snapshot.depth(), "reads": counts["reads"],
            "seconds": round(time.perf_counter() - started, 4)}


def export_rate(uri: str, options: dict[str, Any], target: str, objects: int) -> dict[str, Any]:
    catalog = build_catalog(uri, options, objects)
    started = time.perf_counter()
    result = versions.export(catalog, "bench", target, "full",
                             target_storage_options=options)
    seconds = time.perf_counter() - started
    return {"objects": objects, "files": result.files_copied,
            "files_per_s": round(result.files_copied / seconds, 1)}


def run(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with workdir() as tmp:
        out["timestamp_travel"] = timestamp_travel(str(tmp / "tt"), 300 if quick else 10_000)
        out["diff_one_object"] = diff_cost(str(tmp / "diff"), 2000 if quick else 100_000)
        out["export_local"] = export_rate(str(tmp / "ex"), {}, str(tmp / "ex-target"),
                                          1000 if quick else 20_000)
    with s3_location("bench-export") as (uri, options):
        out["export_s3"] = export_rate(uri, options, uri + "-target", 300 if quick else 5000)
    return out
