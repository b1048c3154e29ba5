"""The olympia PySpark data source against Spark's own Parquet reader and writer, same rows,
same files, one run on local[2]: write throughput into a partitioned table against
``df.write.partitionBy(...).parquet`` and into an unpartitioned one against ``df.write.parquet``,
read throughput against ``spark.read.parquet`` (goal: at least 0.7x each), and the data files
a scan plans (from the planner's log line in Spark's Python worker logs). The machine is
shared, so the two sides of each ratio alternate run by run and the fastest of each counts;
the load average is recorded with them."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

import olympia.spark
from benchmarks.common import per_second, workdir
from olympia.expire import local_session
from olympia.iceberg import OlympiaCatalog

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "name", StringType(), required=False),
                NestedField(3, "part", IntegerType(), required=False),
                NestedField(4, "amount", DoubleType(), required=False))
SPEC = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "part"))
PARTS = 8
TOUCH_ALL = "sum(hash(id, name, part, amount)) AS h"
PLANNED = re.compile(r"olympia scan of table (\S+) at .*?: (\d+) of (\d+) data files")


def _best(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Fastest of ``repeat`` runs of each function, in seconds, the functions taking turns
    (a change of load on the shared machine hits both sides of a ratio); the first round
    also warms the JVM and the Python workers up. A function that returns a float has timed
    itself (leaving its set-up out)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            own = fn()
            times[name].append(own if isinstance(own, float) else time.perf_counter() - start)
    return {name: min(seconds) for name, seconds in times.items()}


def _loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def measure(spark: Any, tmp: Path, rows: int, repeat: int) -> dict[str, Any]:
    catalog = OlympiaCatalog("bench", uri=str(tmp / "catalog"),
                             warehouse=f"file://{tmp}/tables", **{"olympia.create": "true"})
    catalog.create_namespace("bench")
    options = {"catalog": str(tmp / "catalog")}
    df = spark.range(rows, numPartitions=2).selectExpr(
        "id", "concat('name-', id) AS name", f"CAST(id % {PARTS} AS INT) AS part",
        "CAST(id AS DOUBLE) / 7 AS amount").cache()
    df.count()

    tables = iter(range(1_000_000))
    written: dict[str, str] = {}

    def olympia_into(spec: PartitionSpec, kind: str) -> Callable[[], float]:
        def run() -> float:  # into a new, empty table each time, made before the clock runs
            name = written[kind] = f"bench.{kind}_{next(tables)}"
            catalog.create_table(name, SCHEMA, partition_spec=spec)
            start = time.perf_counter()
            df.write.format("olympia").options(**options).mode("append").save(name)
            return time.perf_counter() - start
        return run

    def parquet_into(*partition_by: str) -> Callable[[], None]:
        path = str(tmp / f"parquet_{len(partition_by)}")
        return lambda: df.write.mode("overwrite").partitionBy(*partition_by).parquet(path)

    load = [_loadavg()]
    seconds = _best({"olympia_partitioned": olympia_into(SPEC, "partitioned"),
                     "parquet_partitioned": parquet_into("part"),  # the same folders
                     "olympia_unpartitioned": olympia_into(PartitionSpec(), "unpartitioned"),
                     "parquet_unpartitioned": parquet_into()}, repeat)
    load.append(_loadavg())
    table = catalog.load_table(written["partitioned"])
    files = [task.file.file_path for task in table.scan().plan_files()]
    olympia_df = spark.read.format("olympia").options(**options).load(written["partitioned"])
    plain_df = spark.read.parquet(*files)
    seconds.update(_best({
        "olympia_read": lambda: olympia_df.selectExpr(TOUCH_ALL).collect(),
        "parquet_read": lambda: plain_df.selectExpr(TOUCH_ALL).collect()}, repeat))
    load.append(_loadavg())
    if olympia_df.selectExpr(TOUCH_ALL).collect() != df.selectExpr(TOUCH_ALL).collect():
        raise AssertionError("the olympia read differs from the rows written")

    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:  # new DataFrames: a query planned before the logs were on is not planned again
        spark.read.format("olympia").options(**options).load(written["partitioned"]).count()
        scans = sorted(
            (int(m.group(2)), int(m.group(3)))
            for m in (PLANNED.search(r["msg"] or "")
                      for r in spark.tvf.python_worker_logs().select("msg").collect())
            if m and m.group(1) == written["partitioned"])
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")
    size = sum(task.file.file_size_in_bytes for task in table.scan().plan_files())

    def versus(kind: str) -> dict[str, float]:
        ours, theirs = seconds[f"olympia_{kind}"], seconds[f"parquet_{kind}"]
        return {"olympia_rows_per_s": per_second(rows, ours),
                "parquet_rows_per_s": per_second(rows, theirs),
                "ratio": round(theirs / ours, 2)}

    return {
        "rows": rows, "data_files": len(files), "bytes": size,
        "loadavg_before_writes_reads_after": load,
        "write_partitioned": versus("partitioned"),
        "write_unpartitioned": versus("unpartitioned"),
        "read": versus("read"),
        "files_planned": ({"planned": scans[0][0], "in_snapshot": scans[0][1]}
                          if len(scans) == 1 else {"error": f"scans logged: {scans}"}),
    }


def run(quick: bool) -> dict[str, Any]:
    rows, repeat = (200_000, 3) if quick else (2_000_000, 3)
    spark = local_session("local[2]", app_name="bench-spark-source")
    spark.sparkContext.setLogLevel("ERROR")
    olympia.spark.register(spark)
    try:
        with workdir() as tmp:
            out = measure(spark, tmp, rows, repeat)
    finally:
        spark.stop()
    out["goal"] = ("every ratio >= 0.7 (olympia vs Spark's own Parquet: the same partition "
                   "folders, the same files)")
    return out
