"""Expiry: many versions and many files; the Spark job against the single-process engine."""

from __future__ import annotations

import time
import uuid
from typing import Any

from benchmarks.common import COLUMNS, s3_location, workdir
from olympia import Catalog
from olympia.expire import ExpirePolicy, expire_local, expire_with_spark, local_session

POLICY = ExpirePolicy(keep_last=5, older_than_ms=0, grace_ms=0, force=True)


def build(uri: str, options: dict[str, Any], versions: int, orphans: int) -> Catalog:
    catalog = Catalog.create(uri, options, order=16)
    catalog.create_namespace("s")
    for i in range(versions):
        catalog.create_table("s", f"t{i:06d}", columns=COLUMNS)
    blob = b"orphan from a crashed commit"
    catalog.storage.write_many({f"node/{uuid.uuid4()}.arrow": blob for _ in range(orphans)})
    return catalog


def run_engine(engine: str, spark: Any, uri: str, options: dict[str, Any], versions: int,
               orphans: int) -> dict[str, Any]:
    catalog = build(uri, options, versions, orphans)
    listed = len(catalog.storage.list())
    time.sleep(1)
    start = time.perf_counter()
    if engine == "spark":
        result = expire_with_spark(spark, uri, options, POLICY, settle_seconds=0)
    else:
        result = expire_local(catalog, POLICY, settle_seconds=0)
    seconds = time.perf_counter() - start
    return {"engine": engine, "files": listed, "versions": versions + 2,
            "deleted": result.files_deleted, "seconds": round(seconds, 2),
            "identify_s": round(result.seconds_identifying, 2),
            "delete_s": round(result.seconds_deleting, 2),
            "deleted_per_s": round(result.files_deleted / max(result.seconds_deleting, 1e-9),
                                   1)}


def run(quick: bool) -> dict[str, Any]:
    versions, orphans = (300, 2000) if quick else (3000, 90_000)
    spark = local_session("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    out: dict[str, Any] = {}
    with workdir() as tmp:
        out["local_disk"] = [run_engine(e, spark, str(tmp / e), {}, versions, orphans)
                             for e in ("spark", "local")]
    with s3_location("bench-expire") as (uri, options):
        small = (versions // 3, orphans // 10)
        out["s3"] = [run_engine(e, spark, f"{uri}/{e}", options, *small)
                     for e in ("spark", "local")]
    spark_s, local_s = out["local_disk"][0]["seconds"], out["local_disk"][1]["seconds"]
    out["spark_vs_local_time_ratio"] = round(spark_s / local_s, 2)
    return out
