"""Expiry as a PySpark job: listing, the reachability walk and deletes run on executors.

The driver only decides the retention (a few root reads) and moves ``vn/oldest``; the file
listing is split by key prefix, the walk expands one tree level per Spark stage across all
kept roots at once (shared copy-on-write nodes de-duplicated by ``distinct``), the anti-join
is a DataFrame join, and deletes run in partitions with bounded concurrency per executor.
Executors open their own Storage from the catalog URI and storage options.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from olympia.catalog.catalog import Catalog
from olympia.expire.policy import ExpirePolicy
from olympia.expire.retention import (
    SAMPLE_SIZE,
    ExpireResult,
    advance_oldest,
    decide,
    delete_batch,
    expand,
    folder_of,
    is_candidate,
    late_arrivals,
    listing_prefixes,
    merge_delete_stats,
    new_result,
)
from olympia.storage import Storage

DELETE_BATCH = 1000


@functools.lru_cache(maxsize=8)
def _cached_storage(uri: str, options_json: str) -> Storage:
    return Storage(uri, json.loads(options_json))


def _storage(uri: str, options: Mapping[str, Any]) -> Storage:
    """One Storage (and S3 client) per executor process, not one per partition."""
    return _cached_storage(uri, json.dumps(options, sort_keys=True, default=str))


def _list(uri: str, options: Mapping[str, Any], prefixes: Iterator[str],
          ) -> Iterator[tuple[str, int, float]]:
    storage = _storage(uri, options)
    for prefix in prefixes:
        for f in storage.list(prefix):
            yield f.path, f.size, f.modified


def _expand(uri: str, options: Mapping[str, Any], order: int, paths: Iterator[str],
            ) -> Iterator[tuple[str, str]]:
    yield from expand(_storage(uri, options), order, list(paths))


def _delete(uri: str, options: Mapping[str, Any], rows: Iterator[tuple[str, int]],
            ) -> Iterator[tuple[str, list[int]]]:
    storage = _storage(uri, options)
    batch = list(rows)
    chunks = [batch[i:i + DELETE_BATCH] for i in range(0, len(batch), DELETE_BATCH)]
    for stats in storage.map(lambda chunk: delete_batch(storage, chunk), chunks):
        yield from stats.items()


def expire_with_spark(spark: Any, catalog_uri: str, storage_options: Mapping[str, Any] | None,
                      policy: ExpirePolicy, dry_run: bool = False, *,
                      now_ms: int | None = None, settle_seconds: float = 2.0) -> ExpireResult:
    """Run expiry of the catalog at ``catalog_uri`` on ``spark`` (any master)."""
    started = time.monotonic()
    options = dict(storage_options or {})
    catalog = Catalog.open(catalog_uri, options)
    policy = policy.resolved(catalog.properties)
    sc = spark.sparkContext
    uri = catalog.uri
    prefixes = listing_prefixes()
    listed = sc.parallelize(prefixes, min(len(prefixes), sc.defaultParallelism * 4)) \
        .mapPartitions(lambda part: _list(uri, options, part)).cache()
    listed.count()  # list before deciding: files that appear later are not candidates
    retention = decide(catalog, policy, now_ms)
    order = retention.order

    parts = max(2, sc.defaultParallelism * 2)

    def dedup(rdd: Any) -> Any:
        return rdd.reduceByKey(lambda a, _b: a, parts)

    # level by level across every kept root at once; shared nodes are expanded once
    reachable = sc.parallelize(sorted(retention.seed_files), parts).map(lambda p: (p, 1))
    frontier = dedup(sc.parallelize(sorted(retention.seed_nodes), parts).map(
        lambda p: (p, 1))).cache()
    seen = frontier
    while not frontier.isEmpty():
        found = frontier.keys().mapPartitions(
            lambda part: _expand(uri, options, order, part)).cache()
        reachable = dedup(reachable.union(found.filter(lambda kv: kv[0] == "def")
                                          .map(lambda kv: (kv[1], 1))))
        children = dedup(found.filter(lambda kv: kv[0] == "node").map(lambda kv: (kv[1], 1)))
        frontier = children.subtractByKey(seen, parts).cache()
        seen = dedup(seen.union(frontier)).cache()
    reachable = dedup(reachable.union(seen))

    result = new_result(catalog, "spark", dry_run, policy, retention)
    cutoff = (retention.now_ms - (policy.grace_ms or 0)) / 1000
    expired_roots = sc.broadcast(set(retention.expired_roots))
    expired_dtxns = sc.broadcast(set(retention.expired_dtxns))
    keyed = listed.map(lambda row: (row[0], (row[1], row[2])))
    joined = keyed.leftOuterJoin(reachable, parts).cache()
    for folder, (count, live) in joined.map(
            lambda kv: (folder_of(kv[0]), (1, int(kv[1][1] is not None)))) \
            .reduceByKey(lambda a, b: (a[0] + b[0], a[1] + b[1])).collect():
        result.folders[folder].listed = count
        result.folders[folder].reachable = live
    candidates = joined.filter(lambda kv: kv[1][1] is None).filter(
        lambda kv: is_candidate(kv[0], kv[1][0][1], cutoff, expired_roots.value,
                                expired_dtxns.value)) \
        .map(lambda kv: (kv[0], kv[1][0][0])).cache()
    for folder, count in candidates.map(lambda kv: (folder_of(kv[0]), 1)) \
            .reduceByKey(lambda a, b: a + b).collect():
        result.folders[folder].candidates = count
    result.sample = sorted(candidates.keys().takeOrdered(SAMPLE_SIZE))
    result.seconds_identifying = time.monotonic() - started
    if dry_run:
        return result

    started = time.monotonic()
    advance_oldest(catalog, retention)
    keep = sc.broadcast(late_arrivals(catalog, retention, settle_seconds))
    survivors = candidates.filter(lambda kv: kv[0] not in keep.value)
    for roots_phase in (True, False):  # roots first, then the files only they referenced
        phase = survivors.filter(lambda kv, r=roots_phase: (folder_of(kv[0]) == "vn") == r)
        stats = phase.mapPartitions(lambda part: _delete(uri, options, part)) \
            .reduceByKey(lambda a, b: [x + y for x, y in zip(a, b, strict=True)]).collect()
        merge_delete_stats(result, dict(stats))
    result.seconds_deleting = time.monotonic() - started
    return result


def result_dataframe(spark: Any, result: ExpireResult) -> Any:
    """One row per folder: listed, reachable, candidates, deleted, failed, bytes."""
    return spark.createDataFrame(result.rows())


def local_session(master: str = "local[2]", app_name: str = "olympia-expire") -> Any:
    """A SparkSession for running the job in-process (CLI, tests, Airflow operator).

    Executors run this interpreter, so they import the same olympia and dependencies; a
    local master stays on the loopback interface.
    """
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "8"))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1") \
            .config("spark.driver.bindAddress", "127.0.0.1")
    return builder.getOrCreate()
