"""Expiry as a PySpark job: listing, the reachability walk, the anti-join and the deletes run
on executors; the driver decides the versions, moves ``vn/oldest`` and reads a handful of
roots and catalog definitions.

- listing: one task per group of key prefixes (``vn/``, ``dtxn/``, ``node/0``..``f``,
  ``def/<kind>/0``..``f``);
- walk: one Spark stage per tree level across every kept root at once; a level's nodes are
  de-duplicated against everything already reached (copy-on-write versions share most
  nodes), and executors read them with the storage's bounded concurrency;
- classification: a left join of the listing with the reachable set, the shared candidate
  rule applied per partition;
- deletes: candidate partitions deleted by executors in batches of up to 1000, roots first.

Executors open their own :class:`~olympia.storage.Storage` from the catalog URI and storage
options (one per Python worker). Every intermediate result the later steps depend on is
persisted and materialised before the next step.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import version_path
from olympia.catalog.transaction import now_millis
from olympia.exceptions import ExpiryAbortedError, InvalidArgumentError, OlympiaError
from olympia.expire.job import DEFAULT_SETTLE_MS, ExpireResult, FolderStats, StepHook, Walk, run
from olympia.expire.policy import ExpirePolicy
from olympia.expire.reachability import (
    CDEF,
    FILE,
    MISSING,
    NODE,
    Clock,
    Decision,
    DeleteReport,
    TxnRoots,
    delete_paths,
    expand_nodes,
    expand_roots,
    folder_of,
    is_candidate,
    read_transactions,
)
from olympia.storage import Storage

FILES_SCHEMA = "path string, size long, modified double"
EDGES_SCHEMA = "kind string, path string"
FLAGGED_SCHEMA = ("path string, size long, folder string, reached boolean, "
                  "candidate boolean, probe boolean")
DELETE_PARTITION_FILES = 20_000  # files per delete task (each deletes in batches of 1000)
ROOTS_PER_TASK = 500


_STORAGES: OrderedDict[tuple[str, str], Storage] = OrderedDict()
_STORAGES_LOCK = threading.Lock()


def _storage(uri: str, options: Mapping[str, Any]) -> Storage:
    """One Storage (one S3 client, one thread pool) per catalog and executor process, not
    one per task; the least recently used ones are closed beyond a handful."""
    key = (uri, json.dumps(dict(options), sort_keys=True, default=str))
    with _STORAGES_LOCK:
        storage = _STORAGES.get(key)
        if storage is None:
            storage = _STORAGES[key] = Storage(uri, options)
            while len(_STORAGES) > 4:
                _STORAGES.popitem(last=False)[1].close()
        _STORAGES.move_to_end(key)
        return storage


# --- executor-side functions (module level: pickled by reference) -------------------------


def _list_partition(uri: str, options: Mapping[str, Any], prefixes: Iterator[str],
                    ) -> Iterator[tuple[str, int, float]]:
    storage = _storage(uri, options)
    for prefix in prefixes:
        for f in storage.list(prefix):
            yield f.path, f.size, f.modified


def _txn_partition(uri: str, options: Mapping[str, Any], rows: Iterator[Any],
                   ) -> Iterator[TxnRoots]:
    yield from read_transactions(_storage(uri, options), [r[0] for r in rows])


def _roots_partition(uri: str, options: Mapping[str, Any], order: int, paths: Iterator[str],
                     ) -> Iterator[tuple[str, str]]:
    yield from expand_roots(_storage(uri, options), order, list(paths))


def _nodes_partition(uri: str, options: Mapping[str, Any], order: int, rows: Iterator[Any],
                     ) -> Iterator[tuple[str, str]]:
    yield from expand_nodes(_storage(uri, options), order, [r[0] for r in rows])


def _classify_partition(new_oldest: int, cutoff_ms: int, probe: tuple[str, ...],
                        rows: Iterator[Any]) -> Iterator[tuple[str, int, str, bool, bool, bool]]:
    """Listed rows joined with reachability -> (path, size, folder, reached, candidate,
    probe): the shared rule decides, exactly as in the single-process engine."""
    for path, size, modified, reached in rows:
        candidate = not reached and is_candidate(path, modified, new_oldest, cutoff_ms)
        yield path, size, folder_of(path), reached, candidate, path in probe


def _delete_partition(uri: str, options: Mapping[str, Any], rows: Iterator[Any],
                      ) -> Iterator[DeleteReport]:
    yield delete_paths(_storage(uri, options), [r[0] for r in rows])


_OLYMPIA_ERROR = re.compile(r"olympia\.exceptions\.\w+: (.+)")


def _message(exc: BaseException) -> str:
    """The Olympia error an executor raised, out of Spark's wrapping; else the first line."""
    text = str(exc)
    found = _OLYMPIA_ERROR.findall(text)
    if found:
        return str(found[-1]).strip()
    return text.strip().splitlines()[0][:500] if text.strip() else type(exc).__name__


class SparkEngine:
    """The run's data movement on a SparkSession (any master)."""

    name = "spark"

    def __init__(self, spark: Any, uri: str, options: Mapping[str, Any]) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions

        self.spark = spark
        self.sc = spark.sparkContext
        self.uri = uri
        self.options = dict(options)
        self.F = functions
        self.level = StorageLevel.MEMORY_AND_DISK
        self.parallelism = max(2, int(self.sc.defaultParallelism))
        self._cached: list[Any] = []
        self._counts: dict[str, int] = {}  # candidates per folder, from classify()
        self._dtxn: list[str] = []  # transaction records seen by the last listing

    # helpers

    def _persist(self, df: Any) -> Any:
        df = df.persist(self.level)
        self._cached.append(df)
        return df

    def _checkpoint(self, df: Any, what: str) -> tuple[Any, int]:
        """Compute ``df`` now (a failure surfaces in this step) and keep it with a flat plan:
        each walk level builds on the previous ones, and their plans would otherwise nest."""
        # lazy, so the count below computes and keeps it in one job (with adaptive query
        # execution, building the checkpoint may already run the shuffle stages)
        df = self._do(what, lambda: df.localCheckpoint(eager=False))
        return df, self._do(what, df.count)

    def _do(self, what: str, action: Any) -> Any:
        try:
            return action()
        except OlympiaError:
            raise
        except Exception as exc:
            raise ExpiryAbortedError(f"{what} failed: {_message(exc)}") from exc

    def _df(self, rdd: Any, schema: str) -> Any:
        return self.spark.createDataFrame(rdd, schema)

    def _folder(self) -> Any:
        return self.F.substring_index(self.F.col("path"), "/", 1)

    # steps

    def _listing(self, prefixes: list[str]) -> Any:
        rdd = self.sc.parallelize(prefixes, min(len(prefixes), self.parallelism * 4))
        return self._df(rdd.mapPartitions(
            functools.partial(_list_partition, self.uri, self.options)), FILES_SCHEMA)

    def list_files(self, prefixes: list[str]) -> Any:
        listing = self._persist(self._listing(prefixes))
        # one job lists everything (every partition lands in the cache) and brings back
        # the few transaction records' paths
        dtxn = listing.filter(self.F.col("path").startswith("dtxn/")).select("path")
        self._dtxn = [r[0] for r in self._do("listing", dtxn.collect)]
        return listing

    def transactions(self, listing: Any) -> list[TxnRoots]:
        if not self._dtxn:
            return []
        rdd = self.sc.parallelize([(p,) for p in self._dtxn], min(len(self._dtxn),
                                                                  self.parallelism))
        found = rdd.mapPartitions(functools.partial(_txn_partition, self.uri, self.options))
        return list(self._do("reading distributed transactions", found.collect))

    def walk(self, versions: range, roots: list[str], order: int, prior: Walk | None) -> Walk:
        F, sc = self.F, self.sc
        parts = []
        if len(versions):
            slices = max(1, min(self.parallelism * 2, len(versions) // ROOTS_PER_TASK + 1))
            parts.append(sc.range(versions.start, versions.stop, numSlices=slices)
                         .map(version_path))
        if roots:
            parts.append(sc.parallelize(roots, max(1, min(self.parallelism, len(roots)))))
        known = prior.handle if prior else self.spark.createDataFrame([], "path string")
        level0 = (self._df(sc.union(parts).map(lambda p: (p,)), "path string").distinct()
                  .join(known, "path", "left_anti") if parts
                  else self.spark.createDataFrame([], "path string"))
        edges = self._persist(self._df(level0.rdd.map(lambda r: r[0]).mapPartitions(
            functools.partial(_roots_partition, self.uri, self.options, order)), EDGES_SCHEMA))
        found = edges.filter(F.col("kind").isin(MISSING, CDEF)).distinct()
        found_rows = self._do("reading roots", found.collect)
        missing = [r[1] for r in found_rows if r[0] == MISSING]
        cdefs = {r[1] for r in found_rows if r[0] == CDEF}
        reached = [known, edges.filter(F.col("kind").isin(FILE, CDEF)).select("path")]
        frontier = (edges.filter(F.col("kind") == NODE).select("path").distinct()
                    .join(known, "path", "left_anti"))
        nodes, levels = (prior.nodes, prior.levels) if prior else (0, 0)
        depth = 1
        while True:  # one tree level of every kept root per iteration
            frontier, count = self._checkpoint(frontier, "walking the trees")
            if not count:
                break
            nodes += count
            depth += 1
            reached.append(frontier)
            known = known.union(frontier)
            edges = self._persist(self._df(frontier.rdd.mapPartitions(functools.partial(
                _nodes_partition, self.uri, self.options, order)), EDGES_SCHEMA))
            reached.append(edges.filter(F.col("kind") == FILE).select("path"))
            frontier = (edges.filter(F.col("kind") == NODE).select("path").distinct()
                        .join(known, "path", "left_anti"))
        handle = self._persist(functools.reduce(lambda a, b: a.union(b), reached).distinct())
        cdefs |= prior.cdefs if prior else set()
        return Walk(handle, cdefs, missing, nodes, max(levels, depth))

    def classify(self, listing: Any, walk: Walk, keep: set[str], decision: Decision,
                 probe: list[str]) -> tuple[dict[str, FolderStats], Any, set[str]]:
        F = self.F
        extra = self.spark.createDataFrame([(p,) for p in sorted(keep)], "path string")
        reach = walk.handle.union(extra).distinct().withColumn("reached", F.lit(True))
        joined = listing.join(reach, "path", "left").select(
            "path", "size", "modified", F.coalesce("reached", F.lit(False)))
        flagged = self._persist(self._df(joined.rdd.mapPartitions(functools.partial(
            _classify_partition, decision.new_oldest, decision.cutoff_ms, tuple(probe))),
            FLAGGED_SCHEMA))
        rows = flagged.groupBy("folder").agg(
            F.count("*").alias("listed"), F.sum("size").alias("bytes"),
            F.sum(F.col("reached").cast("long")).alias("reachable"),
            F.sum(F.col("candidate").cast("long")).alias("candidates"),
            F.sum(F.when(F.col("candidate"), F.col("size")).otherwise(0)).alias("cbytes"),
            F.collect_set(F.when(F.col("probe"), F.col("path"))).alias("found"))
        stats: dict[str, FolderStats] = {}
        found: set[str] = set()
        for row in self._do("finding unreferenced files", rows.collect):
            stats[row["folder"]] = FolderStats(
                row["listed"], row["bytes"] or 0, row["reachable"] or 0,
                row["candidates"] or 0, row["cbytes"] or 0)
            found.update(row["found"])
        self._counts = {folder: entry.candidates for folder, entry in stats.items()}
        return stats, flagged.filter(F.col("candidate")).select("path", "size"), found

    def sample(self, candidates: Any, size: int) -> list[str]:
        rows = candidates.select("path").orderBy("path").limit(size)
        return [r[0] for r in self._do("sampling candidates", rows.collect)]

    def delete(self, candidates: Any, roots: bool) -> DeleteReport:
        is_root = self._folder() == "vn"
        phase = candidates.filter(is_root if roots else ~is_root).select("path")
        count = sum(n for folder, n in self._counts.items() if (folder == "vn") == roots)
        total = DeleteReport()
        if not count:
            return total
        tasks = max(1, min(self.parallelism * 4, math.ceil(count / DELETE_PARTITION_FILES)))
        reports = phase.rdd.repartition(tasks).mapPartitions(
            functools.partial(_delete_partition, self.uri, self.options))
        for report in self._do("deleting", reports.collect):
            total.merge(report)
        return total

    def remaining(self, candidates: Any, prefixes: list[str]) -> dict[str, tuple[int, int]]:
        F = self.F
        now = self._listing(prefixes).select("path")
        left = candidates.join(now, "path", "left_semi").groupBy(
            self._folder().alias("folder")).agg(F.count("*").alias("n"),
                                                F.sum("size").alias("bytes"))
        return {r["folder"]: (r["n"], r["bytes"] or 0)
                for r in self._do("verifying deletes", left.collect)}

    def reached(self, candidates: Any, walk: Walk, size: int) -> list[str]:
        rows = candidates.join(walk.handle, "path", "left_semi").select("path")
        return [r[0] for r in self._do("checking new versions",
                                       rows.orderBy("path").limit(size).collect)]

    def release(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()


def expire_with_spark(spark: Any, catalog_uri: str, storage_options: Mapping[str, Any] | None,
                      policy: ExpirePolicy, dry_run: bool = False, *,
                      now_ms: int | None = None, settle_ms: int = DEFAULT_SETTLE_MS,
                      on_step: StepHook | None = None, prefix_split: int = 1,
                      clock: Clock = now_millis) -> ExpireResult:
    """Expire old versions of the catalog at ``catalog_uri`` and delete the files no kept
    version, export or live distributed transaction references, on ``spark`` (any master).

    ``dry_run`` reports what would be deleted and changes nothing. ``now_ms`` evaluates the
    policy at an earlier instant (never later than ``clock``, epoch milliseconds);
    ``on_step(name, info)`` is called after each step;
    ``prefix_split`` (1 or 2) splits the listing into 16 or 256 prefixes per folder.
    """
    if catalog_uri.startswith("memory://"):
        raise InvalidArgumentError(
            "memory:// catalogs live inside one process and Spark executors cannot see them; "
            "use olympia.expire.expire_local")
    options = dict(storage_options or {})
    catalog = Catalog.open(catalog_uri, options)
    engine = SparkEngine(spark, catalog.uri, options)
    return run(engine, catalog, policy, dry_run, now_ms=now_ms, settle_ms=settle_ms,
               on_step=on_step, prefix_split=prefix_split, clock=clock)


def result_dataframe(spark: Any, result: ExpireResult) -> Any:
    """One row per folder: listed, reachable, candidates, deleted, failed, bytes."""
    return result.to_dataframe(spark)


def local_session(master: str = "local[2]", app_name: str = "olympia-expire") -> Any:
    """A SparkSession for running the job in-process (CLI, tests, the Airflow operator).

    Executors run this interpreter, so they import the same olympia; a local master stays
    on the loopback interface and without the web UI.
    """
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
