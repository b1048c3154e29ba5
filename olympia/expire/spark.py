"""Expiry as a PySpark job: listing, reading the trees, the anti-join and the deletes run
on executors; the driver decides the versions, moves ``vn/oldest``, reads a handful of roots
and catalog definitions, and keeps the walk's node paths for de-duplication.

A Spark job has a fixed cost (scheduling, Python workers, planning) that the single-process
engine does not pay, so a run uses few: one per step below, none for reads that fit in one
task (``SparkEngine.jobs`` counts them per step).

- listing: one job without a shuffle, one task per core, each listing its share of the key
  prefixes (``vn/``, ``node/0``..``f``, ``def/<kind>/0``..``f``) with the storage's bounded
  concurrency, as the single-process engine lists them all, into the cache; the tasks count
  the files, which sizes the run's shuffle partitions; the driver lists the few ``dtxn/``
  records itself (it reads them next, also itself unless there are many);
- walk: one tree level across every kept root at once: a level of at most one read batch
  (``driver_reads``) is read on the driver, a larger one by executors in one job (in
  batches of 256, with the storage's concurrency), keeping their definitions; the driver
  de-duplicates the next level's node paths against every node already reached
  (copy-on-write versions share most nodes); driver and executors read with the same
  functions as the single-process engine;
- classification: one job: a left join of the listing with the reachable set and the shared
  candidate rule as a column expression (no Python round trip per file);
- deletes: each partition of candidates deleted by an executor in batches of up to 1000,
  roots first; verification lists again in one job.

Adaptive query execution is off during a run (it would make every shuffle stage a job of its
own and re-plan after each); it and the shuffle partitions are put back afterwards.
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
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from pyspark import Accumulator

FILES_SCHEMA = "path string, size long, modified double"
EDGES_SCHEMA = "kind string, path string"
FILES_PER_PARTITION = 50_000  # listed files per partition of the joins and the deletes
ROOTS_PER_TASK = 500
DTXN = "dtxn/"
_GROUP_KEYS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
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
               counter: Accumulator[int] | None, ids: Iterator[int],
               ) -> Iterator[tuple[str, int, float]]:
    """Task ``i`` lists every ``tasks``-th prefix from the ``i``-th, with the storage's
    bounded concurrency (as the single-process engine lists them all), and adds the number
    of files to ``counter``."""
    storage = _storage(uri, options)
    mine = [p for i in ids for p in prefixes[i::tasks]]
    listed = 0
    for files in storage.map(storage.list, mine):
        listed += len(files)
        for f in files:
            yield f.path, f.size, f.modified
    if counter is not None:
        counter.add(listed)


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

    def __init__(self, spark: Any, uri: str, options: Mapping[str, Any], *,
                 driver_reads: int = READ_BATCH) -> None:
        """``driver_reads``: a walk level or a set of transaction records of at most this
        many files is read on the driver (one read batch: on executors it would be one task
        plus a job's fixed cost)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions

        self.spark = spark
        self.sc = spark.sparkContext
        self.uri = uri
        self.options = dict(options)
        self.F = functions
        self.level = StorageLevel.MEMORY_AND_DISK
        self.parallelism = max(2, int(self.sc.defaultParallelism))
        self.driver_reads = driver_reads
        self._cached: list[Any] = []
        self._counts: dict[str, int] = {}  # candidates per folder, from classify()
        self._dtxn: list[str] = []  # transaction records seen by the last listing
        self._saved: dict[str, str | None] = {}  # session settings to put back
        self._id = uuid.uuid4().hex[:12]
        self._groups: list[str] = []
        self.jobs: dict[str, tuple[int, float]] = {}  # Spark jobs and seconds per action

    # helpers

    def _persist(self, df: Any) -> Any:
        df = df.persist(self.level)
        self._cached.append(df)
        return df

    def _do(self, what: str, action: Any) -> Any:
        """Run a Spark action as a job group of its own, counting its jobs into
        :attr:`jobs` (``what`` -> jobs, seconds); the caller's job group is put back."""
        sc = self.sc
        group = f"olympia-expire-{self._id}-{len(self._groups)}"
        self._groups.append(group)
        caller = {key: sc.getLocalProperty(key) for key in _GROUP_KEYS}
        sc.setJobGroup(group, f"olympia expire: {what}")
        started = time.monotonic()
        try:
            return action()
        except OlympiaError:
            raise
        except Exception as exc:
            raise ExpiryAbortedError(f"{what} failed: {_message(exc)}") from exc
        finally:
            jobs, seconds = self.jobs.get(what, (0, 0.0))
            self.jobs[what] = (jobs + len(sc.statusTracker().getJobIdsForGroup(group)),
                               seconds + time.monotonic() - started)
            for key, value in caller.items():
                sc.setLocalProperty(key, value)  # None unsets

    def _folder(self) -> Any:
        return self.F.substring_index(self.F.col("path"), "/", 1)

    def _df(self, rdd: Any, schema: str) -> Any:
        """Rows an executor function made, as a DataFrame (they are built to ``schema``)."""
        return self.spark.createDataFrame(rdd, schema, verifySchema=False)

    def _paths(self, paths: list[str]) -> Any:
        """A few driver-side paths as a DataFrame."""
        return self.spark.createDataFrame([(p,) for p in paths], "path string")

    def _setting(self, key: str, value: str) -> None:
        """Set a session setting for this run; :meth:`release` puts the old value back."""
        conf = self.spark.conf
        if key not in self._saved:
            self._saved[key] = conf.get(key, None)
        conf.set(key, value)

    def _tune(self, files: int) -> None:
        """Session settings for this run: shuffle partitions sized to the listing (the
        session default, 200, is pure overhead for 100k paths on two cores) and no adaptive
        execution, which runs every shuffle stage as a job of its own and re-plans after
        it (each query's joins and shuffles are few and sized here)."""
        self._setting("spark.sql.adaptive.enabled", "false")
        partitions = max(self.parallelism, math.ceil(files / FILES_PER_PARTITION))
        self._setting("spark.sql.shuffle.partitions", str(partitions))

    # steps

    def _listing(self, prefixes: list[str], counter: Accumulator[int] | None = None) -> Any:
        tasks = max(1, min(len(prefixes), self.parallelism))
        return self._df(self.sc.range(0, tasks, numSlices=tasks).mapPartitions(
            functools.partial(_list_task, self.uri, self.options, prefixes, tasks, counter)),
            FILES_SCHEMA)

    def list_files(self, prefixes: list[str]) -> Any:
        counter = self.sc.accumulator(0)
        self._tune(0)
        # one job without a shuffle lists every other prefix into the cache; the driver
        # lists the few transaction records itself (it reads them next)
        listing = self._persist(self._listing([p for p in prefixes if p != DTXN],
                                              counter))
        self._do("listing", listing.write.format("noop").mode("overwrite").save)
        storage = _storage(self.uri, self.options)
        txns = storage.list(DTXN) if DTXN in prefixes else []
        self._dtxn = sorted(f.path for f in txns)
        self._tune(counter.value + len(txns))
        if not txns:
            return listing
        return listing.union(self._df([(f.path, f.size, f.modified) for f in txns],
                                      FILES_SCHEMA))

    def transactions(self, listing: Any) -> list[TxnRoots]:
        if len(self._dtxn) <= self.driver_reads:
            return list(read_transactions(_storage(self.uri, self.options), self._dtxn))
        rdd = self.sc.parallelize(self._dtxn, min(len(self._dtxn), self.parallelism))
        found = rdd.mapPartitions(functools.partial(_txn_task, self.uri, self.options))
        return list(self._do("reading distributed transactions", found.collect))

    def _expand(self, what: str, roots: bool, order: int, level: list[str] | Any,
                files: list[str], frames: list[Any]) -> set[tuple[str, str]]:
        """Read one level of the walk with the shared :func:`expand_roots` (``roots``) or
        :func:`expand_nodes`: ``level`` is a list of paths, read here (a few: see
        ``driver_reads``), or an RDD of them, read by executors in one job. Reached files go
        to ``files`` (read here) or to ``frames`` (a persisted DataFrame on the executors);
        returns the other edges (children, catalog definitions, missing roots),
        de-duplicated."""
        if isinstance(level, list):
            expand = expand_roots if roots else expand_nodes
            edges = set()
            for kind, path in expand(_storage(self.uri, self.options), order, level):
                if kind in (FILE, CDEF):
                    files.append(path)
                if kind != FILE:
                    edges.add((kind, path))
            return edges
        F = self.F
        task = _roots_task if roots else _nodes_task
        found = self._persist(self._df(level.mapPartitions(functools.partial(
            task, self.uri, self.options, order)), EDGES_SCHEMA))
        frames.append(found.filter(F.col("kind").isin(FILE, CDEF)).select("path"))
        rows = self._do(what, found.filter(F.col("kind") != FILE).distinct().collect)
        return {(r[0], r[1]) for r in rows}

    def walk(self, versions: range, roots: list[str], order: int, prior: Walk | None) -> Walk:
        sc = self.sc
        before = prior.handle if prior else Reached(self._paths([]), set())
        if not len(versions) and not roots:
            return Walk(before, set(prior.cdefs) if prior else set(), [],
                        prior.nodes if prior else 0, prior.levels if prior else 0)
        level: list[str] | Any  # root paths: the versions' and the given ones
        if len(versions) + len(roots) <= self.driver_reads:
            level = [*map(version_path, versions), *roots]
        else:
            parts = [sc.parallelize(roots, max(1, min(self.parallelism, len(roots))))]
            if len(versions):  # made on executors
                slices = max(1, min(self.parallelism * 2, len(versions) // ROOTS_PER_TASK + 1))
                parts.append(sc.range(versions.start, versions.stop, numSlices=slices)
                             .map(version_path))
            level = sc.union(parts)
        known = set(before.nodes)
        files: list[str] = []  # reached files read on the driver
        frames = [before.files]  # and those executors read
        # the driver passes new roots only; a root reached before is read again at worst,
        # and its children are de-duplicated below
        edges = self._expand("reading roots", True, order, level, files, frames)
        missing = [path for kind, path in edges if kind == MISSING]
        cdefs = {path for kind, path in edges if kind == CDEF}
        frontier = sorted({path for kind, path in edges if kind == NODE} - known)
        nodes, levels = (prior.nodes, prior.levels) if prior else (0, 0)
        depth = 1
        while frontier:  # one tree level of every kept root per iteration: at most one job
            known.update(frontier)
            nodes += len(frontier)
            depth += 1
            if len(frontier) <= self.driver_reads:
                level = frontier
            else:
                tasks = min(self.parallelism, math.ceil(len(frontier) / READ_BATCH))
                level = sc.parallelize(frontier, tasks)
            edges = self._expand("walking the trees", False, order, level, files, frames)
            frontier = sorted({path for _, path in edges} - known)  # children only
        frames.append(self._paths(sorted(known - before.nodes) + files))
        reached = self._persist(functools.reduce(lambda a, b: a.union(b), frames).distinct())
        cdefs |= prior.cdefs if prior else set()
        return Walk(Reached(reached, known), cdefs, missing, nodes, max(levels, depth))

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
        for key, value in self._saved.items():
            if value is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, value)
        self._saved.clear()


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
