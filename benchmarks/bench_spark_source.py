"""The olympia PySpark data source against Spark's own Parquet reader and writer, same rows,
same files, one run on local[2]: write and read throughput (goal: at least 0.7x of
``df.write.parquet`` / ``spark.read.parquet`` each), and the data files a scan plans with and
without a selective filter (from the planner's log line in Spark's Python worker logs)."""

from __future__ import annotations

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
PLANNED = re.compile(r"olympia scan of table bench\.orders at .*?: (\d+) of (\d+) data files")


def _best(fn: Callable[[], Any], repeat: int) -> float:
    """Fastest of ``repeat`` runs, in seconds (the first run also warms the JVM up)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(spark: Any, tmp: Path, rows: int, repeat: int) -> dict[str, Any]:
    catalog = OlympiaCatalog("bench", uri=str(tmp / "catalog"),
                             warehouse=f"file://{tmp}/tables", **{"olympia.create": "true"})
    catalog.create_namespace("bench")
    options = {"catalog": str(tmp / "catalog")}
    df = spark.range(rows, numPartitions=2).selectExpr(
        "id", "concat('name-', id) AS name", f"CAST(id % {PARTS} AS INT) AS part",
        "CAST(id AS DOUBLE) / 7 AS amount").cache()
    df.count()

    def write_olympia() -> None:  # into a new, empty table each time
        if catalog.table_exists("bench.orders"):
            catalog.drop_table("bench.orders")
        catalog.create_table("bench.orders", SCHEMA, partition_spec=SPEC)
        df.write.format("olympia").options(**options).mode("append").save("bench.orders")

    write_olympia_s = _best(write_olympia, repeat)
    plain = str(tmp / "plain")
    # the same layout (a folder per part); unpartitioned Parquet for reference
    write_plain_s = _best(lambda: df.write.mode("overwrite").partitionBy("part").parquet(plain),
                          repeat)
    write_flat_s = _best(lambda: df.write.mode("overwrite").parquet(str(tmp / "flat")), repeat)
    table = catalog.load_table("bench.orders")
    files = [task.file.file_path for task in table.scan().plan_files()]
    olympia_df = spark.read.format("olympia").options(**options).load("bench.orders")
    plain_df = spark.read.parquet(*files)
    read_olympia_s = _best(lambda: olympia_df.selectExpr(TOUCH_ALL).collect(), repeat)
    read_plain_s = _best(lambda: plain_df.selectExpr(TOUCH_ALL).collect(), repeat)
    if olympia_df.selectExpr(TOUCH_ALL).collect() != df.selectExpr(TOUCH_ALL).collect():
        raise AssertionError("the olympia read differs from the rows written")

    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:  # new DataFrames: a query planned before the logs were on is not planned again
        spark.read.format("olympia").options(**options).load("bench.orders").count()
        spark.read.format("olympia").options(**options).load("bench.orders") \
            .where("part = 3").count()
        scans = sorted(
            (int(m.group(1)), int(m.group(2)))
            for m in (PLANNED.search(r["msg"] or "")
                      for r in spark.tvf.python_worker_logs().select("msg").collect()) if m)
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")
    size = sum(task.file.file_size_in_bytes for task in table.scan().plan_files())
    return {
        "rows": rows, "data_files": len(files), "bytes": size,
        "write": {"olympia_rows_per_s": per_second(rows, write_olympia_s),
                  "parquet_rows_per_s": per_second(rows, write_plain_s),
                  "parquet_unpartitioned_rows_per_s": per_second(rows, write_flat_s),
                  "ratio": round(write_plain_s / write_olympia_s, 2)},
        "read": {"olympia_rows_per_s": per_second(rows, read_olympia_s),
                 "parquet_rows_per_s": per_second(rows, read_plain_s),
                 "ratio": round(read_plain_s / read_olympia_s, 2)},
        "files_planned": ({"without_filter": scans[1][0], "with_filter_part_eq_3": scans[0][0]}
                          if len(scans) == 2 else {"error": f"scans logged: {scans}"}),
    }


def run(quick: bool) -> dict[str, Any]:
    rows, repeat = (200_000, 2) if quick else (2_000_000, 3)
    spark = local_session("local[2]", app_name="bench-spark-source")
    spark.sparkContext.setLogLevel("ERROR")
    olympia.spark.register(spark)
    try:
        with workdir() as tmp:
            out = measure(spark, tmp, rows, repeat)
    finally:
        spark.stop()
    out["goal"] = ("write.ratio >= 0.7 and read.ratio >= 0.7 (olympia vs Spark's own Parquet "
                   "with the same partition folders)")
    return out
