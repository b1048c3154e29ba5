"""Expiry as a PySpark job: listing, reading the trees, classification and the deletes run
on executors; the driver decides the versions, moves ``vn/oldest``, reads a handful of roots
and catalog definitions, and keeps the walk's node paths for de-duplication.

Each executor task runs the single-process engine
(:class:`~olympia.expire.local.LocalEngine`) on its share of the catalog, so per-file work
is the same code in both engines. The share is fixed by the listing: task ``i`` of ``n``
lists every ``n``-th key prefix from the ``i``-th (``vn/``, ``dtxn/``, ``node/0``..``f``,
``def/<kind>/0``..``f``), and every later step works on the partition that task produced:

- listing: one job without a shuffle, one task per core; each task's listing (a dict, as
  the single-process engine holds it) stays cached on its executor as Python objects;
  the tasks report their count and transaction records, which the driver reads (itself
  unless there are many);
- walk: one tree level across every kept root at once: a level of at most
  ``driver_reads`` files is read on the driver, a larger one by executors in one job (in
  batches of 256, with the storage's concurrency), keeping their definitions; the driver
  de-duplicates the next level's node paths against every node already reached
  (copy-on-write versions share most nodes);
- classification and sample: one job: the reached paths go to the listing task that lists
  their prefix (split on the driver if it read them all, else a shuffle of the reachable
  set; the listing does not move), and each task classifies its listing as the
  single-process engine does and reports counts, its first candidates, the probes it holds
  and its expired roots if there are few;
- deletes: roots first, on the driver if there are at most ``driver_deletes``, else each
  task deletes its own (one job); then each task deletes its other candidates (one job);
  verification: each task lists its prefixes again and counts its candidates still there
  (one job).

Executors open their own :class:`~olympia.storage.Storage` from the catalog URI and storage
options (one per Python worker). Every intermediate result the later steps depend on is
persisted and materialised before the next step.

Over 400 lines: the driver's plan and the executor functions it ships must be read together
to check that both engines apply the same rules.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import version_path
from olympia.catalog.transaction import now_millis
from olympia.exceptions import ExpiryAbortedError, InvalidArgumentError, OlympiaError
from olympia.expire.job import (
    DEFAULT_SETTLE_MS,
    SAMPLE_SIZE,
    ExpireResult,
    FolderStats,
    StepHook,
    Walk,
    run,
)
from olympia.expire.local import LocalEngine
from olympia.expire.reachability import (
    CDEF,
    DELETE_BATCH,
    FILE,
    MISSING,
    NODE,
    READ_BATCH,
    Clock,
    DeleteReport,
    TxnRoots,
    expand_nodes,
    expand_roots,
    folder_of,
    read_transactions,
)
from olympia.lru import LruCache
from olympia.storage import FileInfo, Storage
from olympia.versions.policy import Decision, ExpirePolicy

DRIVER_READS = 4 * READ_BATCH  # walk levels up to this many files are read on the driver
DRIVER_DELETES = 10 * DELETE_BATCH  # at most this many expired roots are deleted there
ROOTS_PER_TASK = 500
DTXN = "dtxn/"
_GROUP_KEYS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
_STORAGES: LruCache[tuple[str, str], Storage] = LruCache(4, on_evict=Storage.close)
_STORAGES_LOCK = threading.Lock()

Listing = dict[str, FileInfo]  # one task's listing, path -> file
Classified = tuple[dict[str, FolderStats], list[FileInfo], set[str]]  # LocalEngine.classify


def _storage(uri: str, options: Mapping[str, Any]) -> Storage:
    """One Storage (one S3 client, one thread pool) per catalog and executor process, not
    one per task; the least recently used ones are closed beyond a handful."""
    key = (uri, json.dumps(dict(options), sort_keys=True, default=str))
    with _STORAGES_LOCK:  # one Storage per key, even when tasks ask at once
        storage = _STORAGES.get(key)
        if storage is None:
            storage = Storage(uri, options)
            _STORAGES.put(key, storage)
        return storage


def _local(uri: str, options: Mapping[str, Any]) -> LocalEngine:
    return LocalEngine(_storage(uri, options))


def _share(prefixes: list[str], tasks: int, index: int) -> list[str]:
    """The prefixes listing task ``index`` of ``tasks`` lists."""
    return prefixes[index::tasks]


@functools.lru_cache(maxsize=8)
def _owners(prefixes: tuple[str, ...], tasks: int) -> tuple[dict[str, int], list[int]]:
    return ({prefix: i % tasks for i, prefix in enumerate(prefixes)},
            sorted({len(prefix) for prefix in prefixes}, reverse=True))


def _owner(prefixes: list[str], tasks: int, path: str) -> int:
    """The listing task whose prefixes hold ``path`` (the longest prefix that does); -1 if
    none (such a path is never listed, so where it goes does not matter)."""
    owners, lengths = _owners(tuple(prefixes), tasks)
    for length in lengths:
        task = owners.get(path[:length])
        if task is not None:
            return task
    return -1


# --- executor-side functions (module level: pickled by reference) -------------------------


def _list_task(uri: str, options: Mapping[str, Any], prefixes: list[str], tasks: int,
               index: int, _: Iterator[int]) -> Iterator[Listing]:
    """Task ``index``'s listing, as the single-process engine lists, as one element."""
    yield _local(uri, options).list_files(_share(prefixes, tasks, index))


def _listing_summary(listing: Listing) -> tuple[int, list[str]]:
    return len(listing), [path for path in listing if path.startswith(DTXN)]


def _txn_task(uri: str, options: Mapping[str, Any], paths: Iterator[str],
              ) -> Iterator[TxnRoots]:
    yield from read_transactions(_storage(uri, options), list(paths))


def _roots_task(uri: str, options: Mapping[str, Any], order: int, paths: Iterator[str],
                ) -> Iterator[tuple[str, str]]:
    yield from expand_roots(_storage(uri, options), order, list(paths))


def _nodes_task(uri: str, options: Mapping[str, Any], order: int, paths: Iterator[str],
                ) -> Iterator[tuple[str, str]]:
    yield from expand_nodes(_storage(uri, options), order, list(paths))


def _reached_paths(edges: Iterable[tuple[str, str]]) -> Iterator[str]:
    """The reached files among a walk level's edges (definitions, roots, catalog defs)."""
    return (path for kind, path in edges if kind in (FILE, CDEF))


def _other_edges(edges: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """A level's edges the driver needs (children, catalog definitions, missing roots)."""
    return iter({edge for edge in edges if edge[0] != FILE})


def _keyed(prefixes: list[str], tasks: int, path: str) -> tuple[int, str]:
    return _owner(prefixes, tasks, path), path


def _task_key(key: int) -> int:
    return key


def _as_set(pairs: Iterable[tuple[int, str]]) -> Iterator[set[str]]:
    """A partition's reached paths as one set (one element per partition, for zip)."""
    yield {path for _, path in pairs}


def _reached_walk(reached: set[str]) -> Walk:
    """A task's share of the reachable set, as the single-process engine's walk holds it."""
    return Walk(reached, set(), [], 0, 0)


def _classify_task(uri: str, options: Mapping[str, Any], keep: set[str], decision: Decision,
                   probe: list[str], pair: tuple[Listing, set[str]]) -> Classified:
    listing, reached = pair
    return _local(uri, options).classify(listing, _reached_walk(reached), keep, decision,
                                         probe)


def _classified_summary(size: int, roots: int, classified: Classified,
                        ) -> tuple[dict[str, FolderStats], list[str], set[str],
                                   list[FileInfo] | None]:
    """A task's counts, first ``size`` candidates and probes found, and its expired roots
    if there are at most ``roots`` of them."""
    stats, candidates, found = classified
    expired = [f for f in candidates if folder_of(f.path) == "vn"]
    return (stats, [f.path for f in candidates[:size]], found,
            expired if len(expired) <= roots else None)


def _delete_task(uri: str, options: Mapping[str, Any], roots: bool,
                 classified: Classified) -> DeleteReport:
    return _local(uri, options).delete(classified[1], roots)


def _remaining_task(uri: str, options: Mapping[str, Any], prefixes: list[str], tasks: int,
                    index: int, classified: Iterator[Classified],
                    ) -> Iterator[dict[str, tuple[int, int]]]:
    for _, candidates, _ in classified:
        yield _local(uri, options).remaining(candidates, _share(prefixes, tasks, index))


def _reached_task(uri: str, options: Mapping[str, Any], size: int,
                  pair: tuple[Classified, set[str]]) -> list[str]:
    classified, reached = pair
    return _local(uri, options).reached(classified[1], _reached_walk(reached), size)


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
    """A Spark walk's reachable set: RDDs of the reached paths executors read, the reached
    paths the driver read (levels of at most ``driver_reads`` nodes), and every reached
    node path (they de-duplicate the walk, one per ``order / 2`` objects or fewer, as the
    single-process engine holds them)."""

    files: list[Any]
    paths: list[str]
    nodes: set[str]


class SparkEngine:
    """The run's data movement on a SparkContext (any master)."""

    name = "spark"

    def __init__(self, spark: Any, uri: str, options: Mapping[str, Any], *,
                 driver_reads: int = DRIVER_READS,
                 driver_deletes: int = DRIVER_DELETES) -> None:
        """``driver_reads``: a walk level or a set of transaction records of at most this
        many files is read on the driver; ``driver_deletes``: at most this many expired
        roots are deleted on the driver (either takes less than a job's fixed cost)."""
        from pyspark import StorageLevel

        self.spark = spark
        self.sc = spark.sparkContext
        self.uri = uri
        self.options = dict(options)
        self.level = StorageLevel.MEMORY_AND_DISK
        self.parallelism = max(2, int(self.sc.defaultParallelism))
        self.driver_reads = driver_reads
        self.driver_deletes = driver_deletes
        self._cached: list[Any] = []
        self._prefixes: list[str] = []  # the listing's prefixes and tasks: who lists what
        self._tasks = 1
        self._counts: dict[str, int] = {}  # candidates per folder, from classify()
        self._sample: list[str] = []  # the first SAMPLE_SIZE candidates, from classify()
        self._roots: list[FileInfo] | None = None  # the expired roots, if few
        self._dtxn: list[str] = []  # transaction records seen by the last listing
        self._id = uuid.uuid4().hex[:12]
        self._groups: list[str] = []
        self.jobs: dict[str, tuple[int, float]] = {}  # Spark jobs and seconds per action

    # helpers

    def _persist(self, rdd: Any) -> Any:
        rdd = rdd.persist(self.level)
        self._cached.append(rdd)
        return rdd

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

    def _reached_sets(self, reached: Reached) -> Any:
        """The reachable set as one set per listing task, each holding the paths that
        task lists (the listing stays where it is; only the reached paths move): split
        here if the driver read them all, else by a shuffle."""
        if not reached.files:
            sets: list[set[str]] = [set() for _ in range(self._tasks)]
            for path in reached.paths:
                sets[_owner(self._prefixes, self._tasks, path)].add(path)
            return self._one_each(self.sc.parallelize(sets, self._tasks))
        here = self.sc.parallelize(reached.paths, max(1, min(
            self.parallelism, len(reached.paths) // READ_BATCH + 1)))
        paths = self.sc.union([*reached.files, here]).map(
            functools.partial(_keyed, self._prefixes, self._tasks))
        return self._one_each(paths.partitionBy(self._tasks, _task_key).mapPartitions(_as_set))

    @staticmethod
    def _one_each(rdd: Any) -> Any:
        """``rdd`` (one element per partition) pickled one element a batch, as ``zip``
        needs: ``zip`` would otherwise pickle both sides again to match their batches."""
        from pyspark.serializers import BatchedSerializer, CPickleSerializer

        one = BatchedSerializer(CPickleSerializer(), 1)  # type: ignore[no-untyped-call]
        return rdd._reserialize(one)

    # steps

    def list_files(self, prefixes: list[str]) -> Any:
        tasks = max(1, min(len(prefixes), self.parallelism))
        self._prefixes, self._tasks = list(prefixes), tasks
        listing = self._persist(self._one_each(
            self.sc.parallelize(range(tasks), tasks).mapPartitionsWithIndex(functools.partial(
                _list_task, self.uri, self.options, self._prefixes, tasks))))
        summary = self._do("listing", listing.map(_listing_summary).collect)
        self._dtxn = sorted(path for _, paths in summary for path in paths)
        return listing

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
        to ``files`` (read here) or to ``frames`` (a persisted RDD on the executors);
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
        task = _roots_task if roots else _nodes_task
        found = self._persist(level.mapPartitions(functools.partial(
            task, self.uri, self.options, order)))
        frames.append(found.mapPartitions(_reached_paths))
        return set(self._do(what, found.mapPartitions(_other_edges).collect))

    def walk(self, versions: range, roots: list[str], order: int, prior: Walk | None) -> Walk:
        sc = self.sc
        before = prior.handle if prior else Reached([], [], set())
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
        frames = list(before.files)  # and those executors read
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
                tasks = min(self.parallelism, -(-len(frontier) // READ_BATCH))
                level = sc.parallelize(frontier, tasks)
            edges = self._expand("walking the trees", False, order, level, files, frames)
            frontier = sorted({path for _, path in edges} - known)  # children only
        paths = before.paths + sorted(known - before.nodes) + files
        cdefs |= prior.cdefs if prior else set()
        return Walk(Reached(frames, paths, known), cdefs, missing, nodes, max(levels, depth))

    def classify(self, listing: Any, walk: Walk, keep: set[str], decision: Decision,
                 probe: list[str]) -> tuple[dict[str, FolderStats], Any, set[str]]:
        classified = self._persist(self._one_each(
            listing.zip(self._reached_sets(walk.handle)).map(functools.partial(
                _classify_task, self.uri, self.options, keep, decision, probe))))
        stats: dict[str, FolderStats] = {}
        found: set[str] = set()
        first: list[str] = []
        summaries = classified.map(functools.partial(_classified_summary, SAMPLE_SIZE,
                                                     self.driver_deletes))
        roots: list[FileInfo] | None = []
        for part, paths, probes, expired in self._do("finding unreferenced files",
                                                     summaries.collect):
            for folder, entry in part.items():
                total = stats.setdefault(folder, FolderStats())
                for field in dataclasses.fields(FolderStats):
                    setattr(total, field.name,
                            getattr(total, field.name) + getattr(entry, field.name))
            first.extend(paths)
            found |= probes
            roots = None if roots is None or expired is None else roots + expired
        self._counts = {folder: entry.candidates for folder, entry in stats.items()}
        self._sample = sorted(first)[:SAMPLE_SIZE]
        self._roots = roots if roots is None or len(roots) <= self.driver_deletes else None
        return stats, classified, found

    def sample(self, candidates: Any, size: int) -> list[str]:
        if size > SAMPLE_SIZE:
            raise InvalidArgumentError(f"a sample holds at most {SAMPLE_SIZE} paths")
        return self._sample[:size]  # classify() kept the first ones

    def delete(self, candidates: Any, roots: bool) -> DeleteReport:
        total = DeleteReport()
        if not sum(n for folder, n in self._counts.items() if (folder == "vn") == roots):
            return total
        if roots and self._roots is not None:  # a few: here, as the single process does
            return _local(self.uri, self.options).delete(self._roots, True)
        reports = candidates.map(functools.partial(_delete_task, self.uri, self.options,
                                                   roots))
        for report in self._do("deleting", reports.collect):
            total.merge(report)
        return total

    def remaining(self, candidates: Any, prefixes: list[str]) -> dict[str, tuple[int, int]]:
        if prefixes != self._prefixes:
            raise ValueError("verification must list the prefixes the listing listed")
        left = candidates.mapPartitionsWithIndex(functools.partial(
            _remaining_task, self.uri, self.options, self._prefixes, self._tasks))
        out: dict[str, tuple[int, int]] = {}
        for part in self._do("verifying deletes", left.collect):
            for folder, (count, size) in part.items():
                have = out.get(folder, (0, 0))
                out[folder] = (have[0] + count, have[1] + size)
        return out

    def reached(self, candidates: Any, walk: Walk, size: int) -> list[str]:
        found = candidates.zip(self._reached_sets(walk.handle)).map(
            functools.partial(_reached_task, self.uri, self.options, size))
        parts = self._do("checking new versions", found.collect)
        return sorted(path for part in parts for path in part)[:size]

    def release(self) -> None:
        for rdd in self._cached:
            rdd.unpersist()
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


def local_session(master: str = "local[2]", app_name: str = "olympia-expire",
                  conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession for running the job in-process (CLI, tests, the Airflow operator).

    Executors run this interpreter, so they import the same olympia; a local master stays
    on the loopback interface and without the web UI. ``conf`` holds more Spark settings
    (``spark.jars``, ``spark.sql.extensions``, ...), applied last.
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
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
