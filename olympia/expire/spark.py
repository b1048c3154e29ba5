"""Expiry as a PySpark job: listing, reading the trees, the anti-join and the deletes run
on executors; the driver decides the versions, moves ``vn/oldest``, reads a handful of roots
and catalog definitions, and keeps the walk's node paths for de-duplication.

- listing: one task per core, each listing its share of the key prefixes (``vn/``,
  ``dtxn/``, ``node/0``..``f``, ``def/<kind>/0``..``f``) with the storage's bounded
  concurrency, as the single-process engine lists them all; the same job counts the files
  and sizes the run's shuffle partitions to them;
- walk: one job per tree level across every kept root at once, without a shuffle: executors
  read the level's nodes (in batches of 256, with the storage's concurrency) and keep their
  definitions; the driver de-duplicates the next level's node paths against every node
  already reached (copy-on-write versions share most nodes);
- classification: a left join of the listing with the reachable set and the shared
  candidate rule as a column expression (no Python round trip per file);
- deletes: each partition of candidates deleted by an executor in batches of up to 1000,
  roots first.

Executors open their own :class:`~olympia.storage.Storage` from the catalog URI and storage
options (one per Python worker). Every intermediate result the later steps depend on is
persisted and materialised before the next step.

Over 400 lines: the driver's plan and the executor functions it ships must be read together to
check that both engines apply the same rules.
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
from dataclasses import dataclass
from typing import Any

from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import version_path
from olympia.catalog.transaction import now_millis
from olympia.exceptions import ExpiryAbortedError, InvalidArgumentError, OlympiaError
from olympia.expire.job import DEFAULT_SETTLE_MS, ExpireResult, FolderStats, StepHook, Walk, run
from olympia.expire.policy import ExpirePolicy
from olympia.expire.reachability import (
    CDEF,
    DEF_RE,
    DTXN_RE,
    FILE,
    MISSING,
    NODE,
    NODE_RE,
    READ_BATCH,
    ROOT_RE,
    Clock,
    Decision,
    DeleteReport,
    TxnRoots,
    delete_paths,
    expand_nodes,
    expand_roots,
    read_transactions,
)
from olympia.storage import Storage

FILES_SCHEMA = "path string, size long, modified double"
EDGES_SCHEMA = "kind string, path string"
FILES_PER_PARTITION = 50_000  # listed files per partition of the joins and the deletes
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


def _list_task(uri: str, options: Mapping[str, Any], prefixes: list[str], tasks: int,
               ids: Iterator[int]) -> Iterator[tuple[str, int, float]]:
    """Task ``i`` lists every ``tasks``-th prefix from the ``i``-th, with the storage's
    bounded concurrency (as the single-process engine lists them all)."""
    storage = _storage(uri, options)
    mine = [p for i in ids for p in prefixes[i::tasks]]
    for files in storage.map(storage.list, mine):
        for f in files:
            yield f.path, f.size, f.modified


def _txn_task(uri: str, options: Mapping[str, Any], paths: Iterator[str],
              ) -> Iterator[TxnRoots]:
    yield from read_transactions(_storage(uri, options), list(paths))


def _roots_task(uri: str, options: Mapping[str, Any], order: int, paths: Iterator[str],
                ) -> Iterator[tuple[str, str]]:
    yield from expand_roots(_storage(uri, options), order, list(paths))


def _nodes_task(uri: str, options: Mapping[str, Any], order: int, paths: Iterator[str],
                ) -> Iterator[tuple[str, str]]:
    yield from expand_nodes(_storage(uri, options), order, list(paths))


def _delete_task(uri: str, options: Mapping[str, Any], rows: Iterator[Any],
                 ) -> Iterator[DeleteReport]:
    yield delete_paths(_storage(uri, options), [r[0] for r in rows])


def _fullmatch(pattern: re.Pattern[str]) -> Any:
    """Whether ``path`` matches ``pattern`` as a whole, like ``pattern.fullmatch`` (the
    patterns use only syntax Python and Java regular expressions read alike)."""
    from pyspark.sql import functions as F

    return F.col("path").rlike(rf"\A(?:{pattern.pattern})\z")


def candidate_column(new_oldest: int, cutoff_ms: int) -> Any:
    """:func:`~olympia.expire.reachability.is_candidate` of the columns ``path`` and
    ``modified`` as a Spark expression, from the same name patterns, so classification
    needs no Python round trip per listed file (tests check the two agree).

    Args:
        new_oldest: versions below this expire.
        cutoff_ms: the grace cutoff, epoch milliseconds.

    Returns:
        A boolean Column.
    """
    from pyspark.sql import functions as F

    path = F.col("path")
    version = F.conv(F.reverse(F.substring(path, 4, 32)), 2, 10).cast("long")
    other = _fullmatch(NODE_RE) | _fullmatch(DEF_RE) | _fullmatch(DTXN_RE)
    return (F.when(_fullmatch(ROOT_RE), version < F.lit(new_oldest))
            .otherwise(other & (F.col("modified") * 1000 < F.lit(cutoff_ms))))


_OLYMPIA_ERROR = re.compile(r"olympia\.exceptions\.\w+: (.+)")


def _message(exc: BaseException) -> str:
    """The Olympia error an executor raised, out of Spark's wrapping; else the first line."""
    text = str(exc)
    found = _OLYMPIA_ERROR.findall(text)
    if found:
        return str(found[-1]).strip()
    return text.strip().splitlines()[0][:500] if text.strip() else type(exc).__name__


@dataclass(frozen=True)
class Reached:
    """A Spark walk's reachable set: every reached path, on the executors, and the reached
    node paths on the driver (they de-duplicate the walk, one per ``order / 2`` objects or
    fewer, as the single-process engine holds them)."""

    files: Any
    nodes: set[str]


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
        self._partitions: str | None = None  # the session's shuffle partitions, to restore

    # helpers

    def _persist(self, df: Any) -> Any:
        df = df.persist(self.level)
        self._cached.append(df)
        return df

    def _do(self, what: str, action: Any) -> Any:
        try:
            return action()
        except OlympiaError:
            raise
        except Exception as exc:
            raise ExpiryAbortedError(f"{what} failed: {_message(exc)}") from exc

    def _folder(self) -> Any:
        return self.F.substring_index(self.F.col("path"), "/", 1)

    def _df(self, rdd: Any, schema: str) -> Any:
        """Rows an executor function made, as a DataFrame (they are built to ``schema``)."""
        return self.spark.createDataFrame(rdd, schema, verifySchema=False)

    def _paths(self, paths: list[str]) -> Any:
        """A few driver-side paths as a DataFrame."""
        return self.spark.createDataFrame([(p,) for p in paths], "path string")

    def _size_shuffles(self, files: int) -> None:
        """Shuffle partitions for this run sized to the listing (the session default, 200,
        is pure overhead for 100k paths on two cores); put back by :meth:`release`."""
        conf = self.spark.conf
        if self._partitions is None:
            self._partitions = conf.get("spark.sql.shuffle.partitions")
        partitions = max(self.parallelism, math.ceil(files / FILES_PER_PARTITION))
        conf.set("spark.sql.shuffle.partitions", str(partitions))

    # steps

    def _listing(self, prefixes: list[str]) -> Any:
        tasks = max(1, min(len(prefixes), self.parallelism))
        return self._df(self.sc.range(0, tasks, numSlices=tasks).mapPartitions(
            functools.partial(_list_task, self.uri, self.options, prefixes, tasks)),
            FILES_SCHEMA)

    def list_files(self, prefixes: list[str]) -> Any:
        F = self.F
        listing = self._persist(self._listing(prefixes))
        # one job lists everything (every partition lands in the cache) and brings back
        # the count and the few transaction records' paths
        row = self._do("listing", listing.agg(F.count("*"), F.collect_list(F.when(
            F.col("path").startswith("dtxn/"), F.col("path")))).collect)[0]
        self._dtxn = sorted(row[1])
        self._size_shuffles(row[0])
        return listing

    def transactions(self, listing: Any) -> list[TxnRoots]:
        if not self._dtxn:
            return []
        rdd = self.sc.parallelize(self._dtxn, min(len(self._dtxn), self.parallelism))
        found = rdd.mapPartitions(functools.partial(_txn_task, self.uri, self.options))
        return list(self._do("reading distributed transactions", found.collect))

    def walk(self, versions: range, roots: list[str], order: int, prior: Walk | None) -> Walk:
        F, sc = self.F, self.sc
        parts = []  # root paths: the versions' (made on executors) and the given ones
        if len(versions):
            slices = max(1, min(self.parallelism * 2, len(versions) // ROOTS_PER_TASK + 1))
            parts.append(sc.range(versions.start, versions.stop, numSlices=slices)
                         .map(version_path))
        if roots:
            parts.append(sc.parallelize(roots, max(1, min(self.parallelism, len(roots)))))
        before = prior.handle if prior else Reached(self._paths([]), set())
        if not parts:
            return Walk(before, set(prior.cdefs) if prior else set(), [],
                        prior.nodes if prior else 0, prior.levels if prior else 0)
        known = set(before.nodes)
        # the driver passes new roots only; a root reached before is read again at worst,
        # and its children are de-duplicated below
        edges = self._persist(self._df(sc.union(parts).mapPartitions(functools.partial(
            _roots_task, self.uri, self.options, order)), EDGES_SCHEMA))
        rows = self._do("reading roots", edges.filter(F.col("kind") != FILE).distinct().collect)
        missing = [r[1] for r in rows if r[0] == MISSING]
        cdefs = {r[1] for r in rows if r[0] == CDEF}
        reached = [before.files, edges.filter(F.col("kind").isin(FILE, CDEF)).select("path")]
        frontier = sorted({r[1] for r in rows if r[0] == NODE} - known)
        nodes, levels = (prior.nodes, prior.levels) if prior else (0, 0)
        depth = 1
        while frontier:  # one tree level of every kept root per iteration: one job, no shuffle
            known.update(frontier)
            nodes += len(frontier)
            depth += 1
            tasks = max(1, min(self.parallelism, math.ceil(len(frontier) / READ_BATCH)))
            edges = self._persist(self._df(sc.parallelize(frontier, tasks).mapPartitions(
                functools.partial(_nodes_task, self.uri, self.options, order)), EDGES_SCHEMA))
            reached.append(edges.filter(F.col("kind") == FILE).select("path"))
            below = edges.filter(F.col("kind") == NODE).select("path").distinct()
            frontier = sorted({r[0] for r in self._do("walking the trees", below.collect)}
                              - known)
        reached.append(self._paths(sorted(known - before.nodes)))
        files = self._persist(functools.reduce(lambda a, b: a.union(b), reached).distinct())
        cdefs |= prior.cdefs if prior else set()
        return Walk(Reached(files, known), cdefs, missing, nodes, max(levels, depth))

    def classify(self, listing: Any, walk: Walk, keep: set[str], decision: Decision,
                 probe: list[str]) -> tuple[dict[str, FolderStats], Any, set[str]]:
        F = self.F
        # the reachable set is distinct already; the few kept paths (hints, live
        # transaction records) are matched by name instead of a second distinct
        reach = walk.handle.files.withColumn("reached", F.lit(True))
        reached = F.coalesce("reached", F.lit(False)) | F.col("path").isin(sorted(keep))
        flagged = self._persist(listing.join(reach, "path", "left").select(
            "path", "size", self._folder().alias("folder"), reached.alias("reached"),
            (~reached & candidate_column(decision.new_oldest, decision.cutoff_ms))
            .alias("candidate"), F.col("path").isin(probe).alias("probe")))
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
        total = DeleteReport()
        if not sum(n for folder, n in self._counts.items() if (folder == "vn") == roots):
            return total
        reports = phase.rdd.mapPartitions(functools.partial(_delete_task, self.uri,
                                                            self.options))
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
        rows = candidates.join(walk.handle.files, "path", "left_semi").select("path")
        return [r[0] for r in self._do("checking new versions",
                                       rows.orderBy("path").limit(size).collect)]

    def release(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()
        if self._partitions is not None:
            self.spark.conf.set("spark.sql.shuffle.partitions", self._partitions)
            self._partitions = None


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
