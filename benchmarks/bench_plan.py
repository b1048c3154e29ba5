"""Catalog-as-code (issue 4): load, plan and apply specs of 1k and 10k objects on local disk
and S3; a no-op plan on the applied catalog, cold (new process) and warm (same process),
with its storage operations by kind of file; a plan touching 1% of the tables.

Goals the numbers speak to: an apply writes ONE version (one root, one def per object); a
cold no-op plan reads tree nodes and only the definitions whose declared content may differ
(issue 16: at most node reads + 1% of the objects, ``within_read_goal``), and a warm re-plan
reads no definition at all (definition files are immutable, so they are cached by path).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import guarded, per_second, recording, s3_location, workdir
from olympia import Catalog
from olympia.plan import apply_plan, make_plan
from olympia.spec import load_spec
from olympia.spec.yamlpos import dump

NAMESPACES = 10
VIEW_EVERY = 10  # one view per this many tables, reading the table before it


def write_spec(directory: Path, objects: int, changed_every: int = 0) -> Path:
    """A spec of ``objects`` objects (namespaces, tables with nested columns, views) in one
    file per namespace; with ``changed_every``, every such table gets one more column."""
    directory.mkdir(parents=True, exist_ok=True)
    tables = objects - NAMESPACES
    tables -= tables // (VIEW_EVERY + 1)
    per_ns: list[dict[str, Any]] = [{"namespace": f"ns{n:02d}", "properties": {"owner": "bench"},
                                     "tables": {}, "views": {}} for n in range(NAMESPACES)]
    for i in range(tables):
        doc = per_ns[i % NAMESPACES]
        ns = doc["namespace"]
        columns: list[dict[str, Any]] = [
            {"name": "id", "type": "bigint", "nullable": False},
            {"name": "amount", "type": "decimal(12,2)"},
            {"name": "attrs", "type": "map", "key": {"type": "string"},
             "value": {"type": "list", "element": {"type": "string"}}}]
        if changed_every and i % changed_every == 0:
            columns.append({"name": "added", "type": "date"})
        doc["tables"][f"t{i:06d}"] = {"properties": {"team": f"team{i % 7}"}, "columns": columns}
        if i % VIEW_EVERY == VIEW_EVERY - 1:
            doc["views"][f"v{i:06d}"] = {"sql": f"SELECT id, amount FROM {ns}.t{i:06d}",
                                         "dialect": "spark", "references": [f"{ns}.t{i:06d}"]}
    for doc in per_ns:
        (directory / f"{doc['namespace']}.yaml").write_text(dump(doc), "utf-8")
    return directory


@contextlib.contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """Wall seconds, and the process's CPU seconds (all its threads), which depend less on
    what else runs on the machine; with the load average at the end."""
    out: dict[str, float] = {}
    start, cpu = time.perf_counter(), time.process_time()
    try:
        yield out
    finally:
        out["seconds"] = round(time.perf_counter() - start, 3)
        out["cpu_seconds"] = round(time.process_time() - cpu, 3)
        out["load_average"] = round(os.getloadavg()[0], 2)


def _reads(log: Any) -> dict[str, int]:
    return {kind: log.count("read", kind) for kind in ("root", "node", "def", "hint")} | {
        "exists": log.count("exists"), "list": log.count("list")}


def _read_goal(log: Any, objects: int) -> dict[str, Any]:
    """Issue 16's goal for a cold no-op plan: at most its node reads + 1% of the objects
    (every read counted: roots, hints, definitions, existence probes)."""
    total = log.count("read") + log.count("exists")
    goal = log.count("read", "node") + objects // 100
    return {"reads_total": total, "reads_goal": goal, "within_read_goal": total <= goal}


def measure(uri: str, options: dict[str, Any], spec_dir: Path, changed_dir: Path,
            ) -> dict[str, Any]:
    with stopwatch() as t_load:
        spec = load_spec(spec_dir)
    objects = len(spec.namespaces) + len(spec.tables) + len(spec.views)
    catalog = Catalog.create(uri, options)
    with stopwatch() as t_plan:
        plan = make_plan(catalog, spec)
    with recording(catalog.storage) as log, stopwatch() as t_apply:
        result = apply_plan(catalog, plan)
    apply_ops = {"versions_written": log.count("create_exclusive", "root"),
                 "def_writes": log.count("write", "def"),
                 "node_writes": log.count("write", "node")}

    cold = Catalog.open(uri, options)
    with recording(cold.storage) as cold_log, stopwatch() as t_cold:
        noop = make_plan(cold, spec)
    with recording(cold.storage) as warm_log, stopwatch() as t_warm:
        warm = make_plan(cold, spec)

    changed = load_spec(changed_dir)
    with stopwatch() as t_change_plan:
        change_plan = make_plan(cold, changed)
    with stopwatch() as t_change_apply:
        changed_version = apply_plan(cold, change_plan).version
    return {
        "objects": objects, "spec_files": len(spec.files),
        "load_spec": {**t_load, "objects_per_s": per_second(objects, t_load["seconds"])},
        "plan_create": {**t_plan, "changes": len(plan.changes)},
        "apply_create": {**t_apply, "objects_per_s": per_second(objects, t_apply["seconds"]),
                         "version": result.version, **apply_ops},
        "noop_plan_cold": {**t_cold, "has_changes": noop.has_changes,
                           "reads": _reads(cold_log),
                           "def_reads_per_object": round(cold_log.count("read", "def")
                                                         / objects, 3),
                           **_read_goal(cold_log, objects)},
        "noop_plan_warm": {**t_warm, "has_changes": warm.has_changes,
                           "reads": _reads(warm_log)},
        "change_1pct": {"plan_seconds": t_change_plan["seconds"],
                        "apply_seconds": t_change_apply["seconds"],
                        "changes": len(change_plan.changes),
                        "versions_written": changed_version - result.version},
    }


def run(quick: bool) -> dict[str, Any]:
    """Local disk at every size, S3 (a real SeaweedFS server) at every size."""
    sizes = [200, 1000] if quick else [1000, 10_000]
    out: dict[str, Any] = {"sizes": sizes, "local": [], "s3": []}
    with workdir() as tmp:
        specs = {n: (write_spec(tmp / f"spec{n}", n), write_spec(tmp / f"changed{n}", n, 100))
                 for n in sizes}
        for n in sizes:
            out["local"].append(guarded(partial(measure, str(tmp / f"wh{n}"), {"fsync": False},
                                                *specs[n])))

        def on_s3() -> list[Any]:
            with s3_location("bench-plan") as (uri, options):
                return [guarded(partial(measure, f"{uri}/{n}", options, *specs[n]))
                        for n in sizes]

        s3 = guarded(on_s3)
        out["s3"] = s3 if isinstance(s3, list) else [s3]
    return out
