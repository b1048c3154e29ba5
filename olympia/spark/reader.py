"""Reading: the table is resolved once on the driver (catalog version, metadata file,
snapshot), every data file of the snapshot is planned by pyiceberg, grouped into Spark
partitions by size, and executors read them with pyiceberg's Arrow scan (schema evolution and
positional deletes applied) as Arrow record batches."""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyspark.sql.datasource import DataSourceReader, InputPartition

from olympia.exceptions import CatalogError, InvalidArgumentError
from olympia.spark.options import SourceOptions
from olympia.spark.schema import arrow_schema

log = logging.getLogger("olympia.spark")
if log.level == logging.NOTSET:  # the plan summary is INFO; Spark's worker logs collect it
    log.setLevel(logging.INFO)


@dataclass(frozen=True)
class ResolvedTable:
    """A table as one read sees it: fixed when the DataFrame is created, so the schema Spark
    was given and the data read always belong to the same catalog version and snapshot.

    Attributes:
        name: ``namespace.table``.
        catalog_version: the Olympia version the table was loaded at.
        metadata_location: its Iceberg metadata file at that version.
        metadata: the parsed metadata.
        snapshot_id: the snapshot read (None: the table has no data yet).
        schema: what the read returns: the table's current schema, or the snapshot's when
            a read travels to a snapshot (snapshot-id, as-of-timestamp, tag).
        io_properties: FileIO properties (catalog settings over table properties; secrets).
    """

    name: str
    catalog_version: int
    metadata_location: str
    metadata: TableMetadata = field(repr=False)
    snapshot_id: int | None
    schema: Schema = field(repr=False)
    io_properties: dict[str, str] = field(repr=False)

    @classmethod
    def load(cls, options: SourceOptions) -> ResolvedTable:
        """Load the table at the catalog version and snapshot the options choose.

        Raises:
            NoSuchTableError, NoSuchVersionError, NoSuchExportError: nothing to read.
            CatalogError: the snapshot id, timestamp, branch or tag names no snapshot of the
                table.
        """
        root = options.open_catalog()
        try:
            catalog = options.at_chosen_version(root)
            table = catalog.load_table(options.table)
            version = catalog.version
        finally:
            root.close()
        where = f"table {options.table} ({options.time_travel}, catalog version {version})"
        snapshot_id, schema = choose_snapshot(table.metadata, options, where)
        return cls(options.table, version, table.metadata_location, table.metadata, snapshot_id,
                   schema, dict(table.io.properties))

    def table(self) -> Table:
        """A pyiceberg Table over the resolved metadata (no catalog needed to scan it)."""
        io = load_file_io(self.io_properties, self.metadata_location)
        return Table(tuple(self.name.split(".", 1)), self.metadata, self.metadata_location, io,
                     NoopCatalog("olympia-spark"))

    def project(self, names: Sequence[str]) -> Schema:
        """The schema of the top-level columns ``names``, in that order (all columns when
        ``names`` is empty): what a read returns, and the only Parquet columns it reads.

        Raises:
            InvalidArgumentError: a name is not a column of the table (names are exact), or
                is given twice.
        """
        if not names:
            return self.schema
        fields = {f.name: f for f in self.schema.fields}
        unknown = [n for n in names if n not in fields]
        if unknown or len(set(names)) != len(names):
            problem = (f"has no columns {', '.join(unknown)}" if unknown
                       else "was asked for a column twice")
            raise InvalidArgumentError(
                f"table {self.name} {problem}; its columns are {', '.join(fields)} (a read "
                "may name any of them, exactly, once each)")
        return Schema(*(fields[n] for n in names), schema_id=self.schema.schema_id)

    def describe(self) -> str:
        return (f"table {self.name} at catalog version {self.catalog_version}, snapshot "
                f"{self.snapshot_id}")


def choose_snapshot(metadata: TableMetadata, options: SourceOptions,
                    where: str) -> tuple[int | None, Schema]:
    """The snapshot a read chooses and the schema it reads with (Iceberg's rule): the current
    snapshot or a branch's head with the table's current schema, so columns added or renamed
    since show at once; a snapshot id, the snapshot current at ``as-of-timestamp`` or a tag
    with that snapshot's schema.

    Args:
        metadata: the table's metadata at the chosen catalog version.
        options: the read's options.
        where: the table and catalog version, for messages.

    Returns:
        The snapshot id (None: the table has no snapshot) and the schema.

    Raises:
        CatalogError: no such snapshot, no snapshot at or before the timestamp, or no such
            branch or tag (naming the table's refs).
    """
    if options.branch is not None or options.tag is not None:
        kind, name = ((SnapshotRefType.BRANCH, options.branch) if options.branch is not None
                      else (SnapshotRefType.TAG, options.tag))
        ref = metadata.refs.get(str(name))
        if ref is None:
            refs = ", ".join(f"{r} ({metadata.refs[r].snapshot_ref_type})"
                             for r in sorted(metadata.refs)) or "none"
            raise CatalogError(f"{where} has no {kind} {name}; its refs are {refs}")
        if ref.snapshot_ref_type != kind:
            raise CatalogError(f"{where}: {name} is a {ref.snapshot_ref_type}, not a {kind}: "
                               f"read it with the option {ref.snapshot_ref_type}")
        if kind == SnapshotRefType.BRANCH:
            return ref.snapshot_id, metadata.schema()
        return ref.snapshot_id, _snapshot_schema(metadata, ref.snapshot_id)
    if options.as_of_timestamp is not None:
        entries = [e for e in metadata.snapshot_log if e.timestamp_ms <= options.as_of_timestamp]
        if not entries:
            first = (f"its first snapshot is at {metadata.snapshot_log[0].timestamp_ms}"
                     if metadata.snapshot_log else "it has no snapshots")
            raise CatalogError(f"{where} has no snapshot at or before as-of-timestamp "
                               f"{options.as_of_timestamp} (epoch ms): {first}")
        snapshot_id = entries[-1].snapshot_id
        return snapshot_id, _snapshot_schema(metadata, snapshot_id)
    if options.snapshot_id is not None:
        if metadata.snapshot_by_id(options.snapshot_id) is None:
            raise CatalogError(f"{where} has no snapshot {options.snapshot_id}")
        return options.snapshot_id, _snapshot_schema(metadata, options.snapshot_id)
    return metadata.current_snapshot_id, metadata.schema()


def _snapshot_schema(metadata: TableMetadata, snapshot_id: int) -> Schema:
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None or snapshot.schema_id is None:
        return metadata.schema()
    return metadata.schema_by_id(snapshot.schema_id) or metadata.schema()


class FilesPartition(InputPartition):
    """One Spark partition: a group of data files (with their delete files)."""

    def __init__(self, index: int, tasks: list[FileScanTask]) -> None:
        super().__init__(index)
        self.tasks = tasks


@dataclass(frozen=True)
class ScanPlan:
    """What planning found: the partitions, and counts for the log and the tests.

    ``column_bytes`` is the size of the column chunks of the projected columns in the planned
    files and ``all_column_bytes`` that of all their columns (from the files' Iceberg
    statistics; files written without them count 0).
    """

    partitions: list[FilesPartition]
    files_total: int
    files_planned: int
    bytes_planned: int
    column_bytes: int = 0
    all_column_bytes: int = 0


def plan(resolved: ResolvedTable, split_size: int, parallelism: int,
         projected: Schema | None = None) -> ScanPlan:
    """Plan the snapshot's files with pyiceberg and group them into partitions of about
    ``split_size`` bytes, at least ``parallelism`` of them when there are that many files;
    ``projected`` (default: every column) is what the executors will read of them.

    Raises:
        CatalogError: the snapshot has equality delete files (not readable here), naming
            the table and snapshot.
    """
    snapshot = (resolved.metadata.snapshot_by_id(resolved.snapshot_id)
                if resolved.snapshot_id is not None else None)
    if snapshot is None:
        return ScanPlan([], 0, 0, 0)
    summary = snapshot.summary.additional_properties if snapshot.summary else {}
    if int(summary.get("total-equality-deletes", "0") or 0) > 0:
        raise CatalogError(
            f"{resolved.describe()} has equality delete files, which the olympia data source "
            "cannot apply: refusing to read rather than return deleted rows (compact the "
            "table with an engine that rewrites them)")
    scan = resolved.table().scan(snapshot_id=resolved.snapshot_id)
    try:
        tasks = list(scan.plan_files())
    except ValueError as exc:
        if "equality deletes" not in str(exc):
            raise
        raise CatalogError(f"{resolved.describe()} has equality delete files, which the "
                           "olympia data source cannot apply: refusing to read") from None
    total = int(summary.get("total-data-files", len(tasks)) or len(tasks))
    partitions = group(tasks, split_size, parallelism)
    planned_bytes = sum(_weight(t) for t in tasks)
    wanted = set((projected or resolved.schema).field_ids)
    sizes = [t.file.column_sizes or {} for t in tasks]
    return ScanPlan(partitions, total, len(tasks), planned_bytes,
                    column_bytes=sum(n for s in sizes for i, n in s.items() if i in wanted),
                    all_column_bytes=sum(sum(s.values()) for s in sizes))


def _weight(task: FileScanTask) -> int:
    return int(task.file.file_size_in_bytes) + sum(
        int(d.file_size_in_bytes) for d in task.delete_files)


def group(tasks: Sequence[FileScanTask], split_size: int,
          parallelism: int) -> list[FilesPartition]:
    """Bin-pack files (largest first, into the lightest group) into
    ``max(ceil(bytes / split_size), min(parallelism, files))`` groups."""
    if not tasks:
        return []
    total = sum(_weight(t) for t in tasks)
    count = min(len(tasks), max(math.ceil(total / split_size), parallelism, 1))
    heap: list[tuple[int, int]] = [(0, i) for i in range(count)]
    groups: list[list[FileScanTask]] = [[] for _ in range(count)]
    for task in sorted(tasks, key=_weight, reverse=True):
        load, index = heapq.heappop(heap)
        groups[index].append(task)
        heapq.heappush(heap, (load + _weight(task), index))
    return [FilesPartition(i, g) for i, g in enumerate(groups) if g]


class OlympiaReader(DataSourceReader):
    """Plans on the driver, reads on the executors (see the module docstring)."""

    def __init__(self, resolved: ResolvedTable, options: SourceOptions,
                 spark_schema: Any) -> None:
        """``spark_schema`` is the DataFrame's: the table's columns or some of them (a
        schema given to the read, or the ``columns`` option); only those are read.

        Raises:
            InvalidArgumentError: it names a column the table does not have.
        """
        self._resolved = resolved
        self._split_size = options.split_size
        self._parallelism = options.parallelism
        self._spark_schema = spark_schema
        self._projected = resolved.project(list(spark_schema.fieldNames()))

    # No pushFilters: Spark 4.3 keeps the partitions a filter pushdown planned on the
    # DataFrame's data source and reuses them for a later query of the same DataFrame that
    # pushes no filter, which would then miss every file the earlier filter skipped.
    def partitions(self) -> list[InputPartition]:
        result = plan(self._resolved, self._split_size, self._parallelism, self._projected)
        log.info("olympia scan of %s: %d of %d data files planned, %d bytes, "
                 "%d Spark partitions; %d of %d columns read, %d of %d bytes of "
                 "column chunks", self._resolved.describe(),
                 result.files_planned, result.files_total, result.bytes_planned,
                 len(result.partitions), len(self._projected.fields),
                 len(self._resolved.schema.fields), result.column_bytes,
                 result.all_column_bytes)
        return list(result.partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FilesPartition):
            return
        target = arrow_schema(self._spark_schema)
        resolved = self._resolved
        io = load_file_io(resolved.io_properties, resolved.metadata.location)
        # pyiceberg reads only the projected columns' chunks of each Parquet file
        scan = ArrowScan(resolved.metadata, io, self._projected, AlwaysTrue())
        for task in partition.tasks:  # one file at a time: memory stays one file's batches
            for batch in scan.to_record_batches([task]):
                yield batch.cast(target)
