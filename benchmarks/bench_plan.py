"""Catalog-as-code: plan and apply for many objects, and a no-op plan on a big catalog."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import s3_location, workdir
from olympia import Catalog
from olympia.plan import apply_plan, make_plan
from olympia.spec import load_spec

NAMESPACES = 20


def write_spec(directory: Path, objects: int) -> Path:
    directory.mkdir(parents=True)
    per_ns = objects // NAMESPACES
    for n in range(NAMESPACES):
        tables = {f"t{i:06d}": {"columns": [
            {"name": "id", "type": "bigint", "nullable": False},
            {"name": "attrs", "type": "map", "key": {"type": "string"},
             "value": {"type": "string"}}]} for i in range(per_ns)}
        doc = {"namespace": f"ns{n:02d}", "properties": {"owner": "bench"}, "tables": tables}
        (directory / f"ns{n:02d}.yaml").write_text(yaml.safe_dump(doc))
    return directory


def measure(uri: str, options: dict[str, Any], spec_dir: Path) -> dict[str, Any]:
    timings: dict[str, float] = {}

    def clock(name: str, fn: Any) -> Any:
        start = time.perf_counter()
        value = fn()
        timings[name] = round(time.perf_counter() - start, 3)
        return value

    spec = clock("load_spec_s", lambda: load_spec(spec_dir))
    catalog = Catalog.create(uri, options)
    plan = clock("plan_s", lambda: make_plan(catalog, spec))
    clock("apply_s", lambda: apply_plan(catalog, plan))
    cold = Catalog.open(uri, options)
    cold.storage.stats.reset()
    noop = clock("noop_plan_cold_s", lambda: make_plan(cold, spec))
    cold_reads = cold.storage.stats.snapshot()["reads"]
    cold.storage.stats.reset()
    clock("noop_plan_warm_s", lambda: make_plan(cold, spec))
    return {"objects": len(spec.tables) + len(spec.namespaces), "changes": len(plan.changes),
            "noop_has_changes": noop.has_changes, "noop_cold_reads": cold_reads,
            "noop_warm_reads": cold.storage.stats.snapshot()["reads"], **timings}


def run(quick: bool) -> dict[str, Any]:
    sizes = [200, 1000] if quick else [1000, 10_000]
    out: dict[str, Any] = {"local": [], "s3": []}
    with workdir() as tmp:
        specs = {n: write_spec(tmp / f"spec{n}", n) for n in sizes}
        for n in sizes:
            out["local"].append(measure(str(tmp / f"wh{n}"), {}, specs[n]))
        with s3_location("bench-plan") as (uri, options):
            for n in sizes:
                out["s3"].append(measure(f"{uri}/{n}", options, specs[n]))
    return out
