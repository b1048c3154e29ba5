"""Expiry: a catalog with thousands of versions and ~100k files, the Spark job (local[2])
against the single-process engine on identical copies, on local disk and on S3.

Reported per storage and engine: files listed, reachable and deleted, seconds identifying
(list + walk + anti-join) and deleting, seconds per step (``ExpireResult.timings``), files
deleted per second, and the Spark/local time ratios; once, the Spark session's start-up
(outside every run: a job on a cluster pays it once per submit); for Spark runs, the Spark
jobs and seconds of each action (``spark_jobs``: the engine's job groups). Both engines run
the same plan, so their counts must agree (``counts_agree``).
"""

from __future__ import annotations

import shutil
import time
import uuid
from typing import Any

from benchmarks.common import COLUMNS, s3_location, workdir
from olympia import Catalog
from olympia.expire import ExpirePolicy, expire_local, local_session
from olympia.expire.job import ExpireResult
from olympia.expire.job import run as run_expiry
from olympia.expire.spark import SparkEngine

POLICY = ExpirePolicy(keep_last=10, older_than_ms=0, grace_ms=0, force=True)
KEEP_ALL = ExpirePolicy(keep_last=1_000_000, older_than_ms=0, grace_ms=0, force=True)
ORPHAN = b"a node file a crashed commit left behind"


def build(uri: str, options: dict[str, Any], versions: int, orphans: int) -> Catalog:
    """``versions`` one-table commits (each writes a root, its path of nodes and a def),
    plus ``orphans`` unreferenced node files, all older than the run's grace cutoff."""
    catalog = Catalog.create(uri, options, order=16)
    catalog.create_namespace("s")
    for i in range(versions):
        catalog.create_table("s", f"t{i:06d}", columns=COLUMNS)
    for start in range(0, orphans, 5000):
        catalog.storage.write_many({f"node/{uuid.uuid4()}.arrow": ORPHAN
                                    for _ in range(min(5000, orphans - start))})
    return catalog


def load() -> str:
    """The 1, 5 and 15-minute load averages (other jobs share the cores)."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def measure(result: ExpireResult, seconds: float,
            engine: SparkEngine | None = None) -> dict[str, Any]:
    jobs = {} if engine is None else {
        "spark_jobs": {what: [n, round(s, 2)] for what, (n, s) in engine.jobs.items()},
        "spark_jobs_total": sum(n for n, _ in engine.jobs.values())}
    return {
        "engine": result.engine, "dry_run": result.dry_run, "seconds": round(seconds, 2),
        "identify_s": round(result.seconds_identifying, 2),
        "delete_s": round(result.seconds_deleting, 2),
        "files_listed": result.files_listed, "files_reachable": result.files_reachable,
        "candidates": result.files_candidates, "deleted": result.files_deleted,
        "failed": result.files_failed, "versions_expired": result.versions_expired,
        "nodes_walked": result.nodes_walked, "walk_levels": result.walk_levels,
        "deleted_per_s": round(result.files_deleted / result.seconds_deleting, 1)
        if result.seconds_deleting else None,
        "step_s": {name: round(seconds, 2) for name, seconds in result.timings.items()},
        **jobs,
    }


def expire(spark: Any, engine: str, uri: str, options: dict[str, Any], policy: ExpirePolicy,
           dry: bool, now: int) -> dict[str, Any]:
    """One run of ``engine`` (``spark`` or ``local``), measured."""
    catalog = Catalog.open(uri, options)
    start = time.perf_counter()
    if engine == "spark":
        spark_engine = SparkEngine(spark, catalog.uri, options)
        result = run_expiry(spark_engine, catalog, policy, dry, now_ms=now, settle_ms=0)
        return measure(result, time.perf_counter() - start, spark_engine)
    result = expire_local(catalog, policy, dry, now_ms=now, settle_ms=0)
    return measure(result, time.perf_counter() - start)


def compare(spark: Any, uris: tuple[str, str], options: dict[str, Any]) -> dict[str, Any]:
    """Dry runs of both engines on the first copy (identification only: keeping every
    version, then with the policy), then a real run of each engine on its own copy."""
    out: dict[str, Any] = {}
    now = int(time.time() * 1000)
    # keeping every version: the walk covers thousands of roots sharing most nodes
    for engine in ("spark", "local"):
        out[f"{engine}_walk_all_versions"] = expire(spark, engine, uris[0], options,
                                                    KEEP_ALL, True, now)
    for label, dry in (("dry", True), ("real", False)):
        for engine, uri in zip(("spark", "local"), uris, strict=True):
            out[f"{engine}_{label}"] = expire(spark, engine, uris[0] if dry else uri, options,
                                              POLICY, dry, now)
    keys = ("files_listed", "files_reachable", "candidates")
    out["counts_agree"] = all(out["spark_dry"][k] == out["local_dry"][k] for k in keys)
    out["spark_vs_local_identify_ratio"] = round(
        out["spark_dry"]["identify_s"] / max(out["local_dry"]["identify_s"], 1e-9), 2)
    out["spark_vs_local_walk_all_ratio"] = round(
        out["spark_walk_all_versions"]["identify_s"]
        / max(out["local_walk_all_versions"]["identify_s"], 1e-9), 2)
    out["spark_vs_local_total_ratio"] = round(
        out["spark_real"]["seconds"] / max(out["local_real"]["seconds"], 1e-9), 2)
    return out


def run(quick: bool) -> dict[str, Any]:
    local_size = (150, 2_000) if quick else (3_000, 88_000)
    s3_size = (60, 500) if quick else (600, 10_000)
    started = time.perf_counter()
    spark = local_session("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    out: dict[str, Any] = {"spark_session_start_s": round(time.perf_counter() - started, 1),
                           "loadavg_start": load()}
    with workdir() as tmp:
        started = time.perf_counter()
        build(str(tmp / "a"), {}, *local_size)
        shutil.copytree(tmp / "a", tmp / "b")
        time.sleep(1.1)
        out["local_disk"] = {"versions": local_size[0] + 2, "orphans": local_size[1],
                             "build_s": round(time.perf_counter() - started, 1),
                             **compare(spark, (str(tmp / "a"), str(tmp / "b")), {})}
    with s3_location("bench-expire") as (uri, options):
        started = time.perf_counter()
        for name in ("a", "b"):
            build(f"{uri}/{name}", options, *s3_size)
        time.sleep(1.1)  # S3 timestamps have whole seconds
        out["s3"] = {"versions": s3_size[0] + 2, "orphans": s3_size[1],
                     "build_s": round(time.perf_counter() - started, 1),
                     **compare(spark, (f"{uri}/a", f"{uri}/b"), options)}
    out["loadavg_end"] = load()
    return out
