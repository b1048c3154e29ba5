"""Format core: depth, cold-lookup reads, files per commit, latencies; vs pyiceberg SqlCatalog."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from benchmarks.common import (
    COLUMNS,
    build_catalog,
    ops,
    percentiles,
    s3_location,
    table_name,
    timed,
    workdir,
)
from olympia import Catalog


def commit_levels(catalog: Catalog, fn: Callable[[], Any]) -> tuple[list[dict[str, Any]], Any]:
    """Run the commit ``fn`` and report what it wrote per tree level: the root file (it
    holds the root node), each level of nodes below it, the definition files and the
    ``vn/latest`` hint; the format's limit is one node file per level."""
    storage = catalog.storage
    written: dict[str, int] = {}

    def recorder(method: Callable[..., None]) -> Callable[..., None]:
        def record(path: str, data: bytes, **options: bool) -> None:
            written[path] = len(data)
            method(path, data, **options)
        return record

    storage.write = recorder(storage.write)  # type: ignore[method-assign]
    storage.create_exclusive = recorder(storage.create_exclusive)  # type: ignore[method-assign]
    try:
        result = fn()
    finally:
        del storage.write, storage.create_exclusive
    snap = catalog.snapshot
    levels: list[tuple[str | int, list[str]]] = [("root", [snap.root.path])]
    nodes = [snap.root.node]
    while True:  # the written nodes one level further down
        below = [c for node in nodes for c in node.children or () if c in written]
        if not below:
            break
        levels.append((len(levels), below))
        nodes = snap.nodes.load_many(below)
    placed = {p for _, paths in levels for p in paths}
    levels.append(("def", [p for p in written if p.startswith("def/")]))
    levels.append(("other", sorted(set(written) - placed - set(levels[-1][1]))))
    return [{"level": level, "files": len(paths), "bytes": sum(written[p] for p in paths)}
            for level, paths in levels], result


def measure(uri: str, options: dict[str, Any], objects: int, samples: int) -> dict[str, Any]:
    catalog = build_catalog(uri, options, objects)
    rng = random.Random(7)
    depth = catalog.snapshot.depth()
    cold = Catalog.open(uri, options)
    open_ops = cold.storage.stats.snapshot()
    ns, name = table_name(rng.randrange(10, objects))
    lookup_ops = ops(cold.storage, lambda: cold.load_table(ns, name))
    counter = iter(range(10**9))
    per_level, commit_ops = commit_levels(catalog, lambda: ops(
        catalog.storage, lambda: catalog.create_table("ns00", f"new{next(counter)}",
                                                      columns=COLUMNS)))
    commit_times = timed(lambda: catalog.create_table("ns00", f"new{next(counter)}",
                                                      columns=COLUMNS), samples)
    warm = Catalog.open(uri, options)
    picks = [table_name(rng.randrange(10, objects)) for _ in range(samples)]
    it = iter(picks)
    lookup_times = timed(lambda: warm.load_table(*next(it)), samples)
    cold_times = timed(lambda: Catalog.open(uri, options).load_table(*table_name(
        rng.randrange(10, objects))), max(5, samples // 5))
    return {
        "objects": objects, "depth": depth,
        "open_catalog_ops": open_ops,
        "cold_load_table": {"reads": lookup_ops["reads"], "node_reads": lookup_ops["reads"] - 1,
                            "goal_node_reads": depth - 1, "def_reads": 1},
        "one_object_commit": {
            "files_written": commit_ops["writes"] - 1,  # vn/latest is a hint, not a file of
            "goal_files": depth + 1,                    # the version: nodes per level + 1 def
            "bytes_written": commit_ops["bytes_written"], "ops": commit_ops,
            "per_level": per_level,
            "one_node_per_level": all(row["files"] <= 1 for row in per_level
                                      if row["level"] not in ("def", "other"))},
        "commit_latency": percentiles(commit_times),
        "warm_lookup_latency": percentiles(lookup_times),
        "cold_open_and_lookup_latency": percentiles(cold_times),
    }


def pyiceberg_rates(count: int) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType(), required=True),
                    NestedField(2, "payload", StringType(), required=False))
    with workdir() as tmp:
        cat = SqlCatalog("bench", uri=f"sqlite:///{tmp}/pyiceberg.db",
                         warehouse=f"file://{tmp}/warehouse")
        cat.create_namespace("s")
        create = timed_loop(lambda i: cat.create_table(("s", f"t{i}"), schema), count)
        load = timed_loop(lambda i: cat.load_table(("s", f"t{i}")), count)
    return {"create_table_per_s": round(count / create, 1),
            "load_table_per_s": round(count / load, 1)}


def olympia_rates(count: int) -> dict[str, Any]:
    with workdir() as tmp:
        catalog = Catalog.create(str(tmp / "wh"))
        catalog.create_namespace("s")
        create = timed_loop(lambda i: catalog.create_table("s", f"t{i}", columns=COLUMNS),
                            count)
        reader = Catalog.open(str(tmp / "wh"))
        load = timed_loop(lambda i: reader.load_table("s", f"t{i}"), count)
    return {"create_table_per_s": round(count / create, 1),
            "load_table_per_s": round(count / load, 1)}


def timed_loop(fn: Any, count: int) -> float:
    import time

    start = time.perf_counter()
    for i in range(count):
        fn(i)
    return time.perf_counter() - start


def run(quick: bool) -> dict[str, Any]:
    sizes = [200, 2000] if quick else [1000, 10_000, 100_000]
    samples = 20 if quick else 50
    out: dict[str, Any] = {"local": [], "s3": []}
    with workdir() as tmp:
        for n in sizes:
            out["local"].append(measure(str(tmp / f"wh{n}"), {}, n, samples))
    with s3_location("bench-core") as (uri, options):
        out["s3"].append(measure(uri, options, 500 if quick else 10_000, samples))
    count = 100 if quick else 500
    oly, ice = olympia_rates(count), pyiceberg_rates(count)
    out["vs_pyiceberg_sqlcatalog"] = {
        "objects": count, "olympia": oly, "pyiceberg": ice,
        "create_ratio": round(oly["create_table_per_s"] / ice["create_table_per_s"], 2),
        "load_ratio": round(oly["load_table_per_s"] / ice["load_table_per_s"], 2),
    }
    return out
