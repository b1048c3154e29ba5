"""Writing: executors write Parquet data files under the table's location, split by the
table's partition spec (pyiceberg's transforms, one file per partition value per task); the
driver commits them as ONE Iceberg snapshot (one Olympia catalog version) or, when the job
fails, deletes them and commits nothing."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException, NotInstalledError, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.io.pyarrow import (
    ParquetFormatModel,
    ParquetFormatWriter,
    _check_pyarrow_schema_compatible,
    _to_requested_schema,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table import Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from olympia.exceptions import CommitConflict, InvalidArgumentError
from olympia.iceberg.options import storage_options
from olympia.spark.options import SourceOptions
from olympia.spark.schema import check_write_schema
from olympia.storage import Storage

log = logging.getLogger("olympia.spark")
WRITE_ID = "olympia.spark.write-id"  # snapshot summary property naming the job
FLUSH_ROWS = 256 * 1024  # rows buffered per partition value before a row group is written
FLUSH_BYTES = 64 * 1024 * 1024
FLUSH_ALL_BYTES = 256 * 1024 * 1024  # buffered over all partition values of a task
DICTIONARY_SAMPLE = 10_000  # first rows of a file that decide its dictionary-encoded columns


@dataclass
class DataFilesMessage(WriterCommitMessage):
    """What one task wrote: its data files, with partition values and statistics."""

    data_files: list[DataFile] = field(default_factory=list)


class _ParquetFile(ParquetFormatWriter):
    """pyiceberg's Parquet writer (the table's writer properties; the files' statistics from
    the Parquet footer), dictionary-encoding only the columns a dictionary can shrink."""

    def __init__(self, output: Any, file_schema: Schema, properties: dict[str, str],
                 column_paths: list[str]) -> None:
        super().__init__(output, file_schema, properties)
        self._column_paths = column_paths

    def write(self, table: pa.Table) -> None:
        if self._writer is None:  # the first rows choose, before the Parquet writer exists
            self._parquet_writer_kwargs["use_dictionary"] = dictionary_columns(
                table, self._column_paths)
        super().write(table)


def dictionary_columns(table: pa.Table, column_paths: list[str]) -> list[str]:
    """The Parquet column paths to dictionary-encode: all but the top-level primitive columns
    whose first :data:`DICTIONARY_SAMPLE` rows are mostly distinct. A dictionary of such a
    column (ids, amounts, names) is as large as the values, and hashing every value into it
    costs Arrow's writer more than the rest of the encoding together."""
    sample = table.slice(0, DICTIONARY_SAMPLE)
    plain = set()
    for name, column in zip(sample.column_names, sample.columns, strict=True):
        if pa.types.is_nested(column.type):
            continue
        values = len(column) - column.null_count
        if values and 2 * pc.count_distinct(column).as_py() > values:
            plain.add(name)
    return [path for path in column_paths if path not in plain]


@dataclass
class _OpenFile:
    path: str
    key: PartitionKey | None
    writer: _ParquetFile
    buffered: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0

    def add(self, table: pa.Table) -> None:
        self.buffered.append(table)
        self.rows += table.num_rows
        self.nbytes += table.nbytes
        if self.rows >= FLUSH_ROWS or self.nbytes >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.buffered:
            # one row group of the buffered batches as they are (the writer takes chunks)
            self.writer.write(pa.concat_tables(self.buffered))
            self.buffered, self.rows, self.nbytes = [], 0, 0


class OlympiaWriter(DataSourceArrowWriter):
    """Made on the driver by :meth:`create` (which checks the schema before any task runs);
    ``write`` runs in each task, ``commit``/``abort`` on the driver."""

    def __init__(self, options: SourceOptions, table: Table, overwrite: bool) -> None:
        self._options = options
        self._overwrite = overwrite
        self._write_id = uuid.uuid4().hex
        self._metadata: TableMetadata = table.metadata
        self._io_properties = dict(table.io.properties)
        self._base_snapshot_id = table.metadata.current_snapshot_id

    @classmethod
    def create(cls, options: SourceOptions, spark_schema: Any, overwrite: bool) -> OlympiaWriter:
        """Check the DataFrame's schema against the table's and return the job's writer.

        Raises:
            InvalidArgumentError: time travel options on a write, or a schema mismatch
                (naming the columns); nothing is written.
            NoSuchTableError: the table does not exist.
        """
        from pyspark.sql.pandas.types import to_arrow_schema

        travel = [k for k in ("version", "as_of", "export", "snapshot_id")
                  if getattr(options, k) is not None]
        if travel:
            raise InvalidArgumentError(
                f"option {travel[0]} chooses a past version: writes always go to the latest")
        catalog = options.open_catalog()
        try:
            table = catalog.load_table(options.table)
        finally:
            catalog.close()
        schema = table.schema()
        check_write_schema(schema, [(f.name, f.dataType.simpleString(), f.nullable)
                                    for f in spark_schema.fields], options.table)
        try:
            _check_pyarrow_schema_compatible(schema, to_arrow_schema(spark_schema,
                                                                     timezone="UTC"),
                                             format_version=table.metadata.format_version)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"cannot write to table {options.table}: the DataFrame's column types do not "
                f"match the table's; nothing was written\n{exc}") from None
        return cls(options, table, overwrite)

    # --- executors ----------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DataFilesMessage:
        """Write this task's rows, one Parquet file per partition value; on any failure the
        task's files are deleted before the error propagates."""
        from pyspark import TaskContext

        context = TaskContext.get()
        task = f"{context.partitionId():05d}-{context.attemptNumber()}" if context else "00000-0"
        metadata = self._metadata
        io = load_file_io(self._io_properties, metadata.location)
        table_schema = metadata.schema()
        file_schema = sanitize_column_names(table_schema)
        spec = metadata.spec()
        locations = load_location_provider(metadata.location, metadata.properties)
        column_paths = list(parquet_path_to_id_mapping(file_schema))
        files: dict[tuple[Any, ...], _OpenFile] = {}
        batch_schema: Schema | None = None
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                if batch_schema is None:
                    batch_schema = pyarrow_to_schema(
                        batch.schema, name_mapping=table_schema.name_mapping,
                        format_version=metadata.format_version)
                converted = pa.Table.from_batches([_to_requested_schema(
                    file_schema, batch_schema, batch, include_field_ids=True,
                    format_model=ParquetFormatModel())])
                for values, rows in split_by_partition(spec, file_schema, converted):
                    if values not in files:
                        key = PartitionKey(
                            [PartitionFieldValue(f, v) for f, v in zip(spec.fields, values,
                                                                       strict=True)],
                            spec, file_schema) if values else None
                        name = f"{task}-{self._write_id}-{len(files):05d}.parquet"
                        path = locations.new_data_location(name, key)
                        files[values] = _OpenFile(path, key, _ParquetFile(
                            io.new_output(path), file_schema, metadata.properties, column_paths))
                    files[values].add(rows)
                if sum(f.nbytes for f in files.values()) >= FLUSH_ALL_BYTES:
                    for open_file in files.values():
                        open_file.flush()
            return DataFilesMessage([self._close(io, f) for f in files.values()])
        except BaseException:
            for open_file in files.values():
                with contextlib.suppress(Exception):
                    open_file.writer.close()
                with contextlib.suppress(Exception):
                    io.delete(open_file.path)
            raise

    def _close(self, io: FileIO, open_file: _OpenFile) -> DataFile:
        open_file.flush()
        statistics = open_file.writer.close()
        return DataFile.from_args(
            content=DataFileContent.DATA, file_path=open_file.path,
            file_format=FileFormat.PARQUET,
            partition=open_file.key.partition if open_file.key else Record(),
            file_size_in_bytes=len(io.new_input(open_file.path)),
            sort_order_id=None, spec_id=self._metadata.default_spec_id, equality_ids=None,
            key_metadata=None, **statistics.to_serialized_dict())

    # --- driver ---------------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit every task's files as one snapshot (one catalog version).

        Appends are retried by pyiceberg on the refreshed table when another commit wins the
        race; an overwrite fails if anything was committed to the table since the job started.

        Raises:
            CommitConflict: the commit cannot be made safely (concurrent overwrite, or the
                table's schema, partitioning or identity changed); the job's files are deleted.
        """
        files = _data_files(messages)
        catalog = self._options.open_catalog()
        try:
            table = catalog.load_table(self._options.table)
            try:
                self._check_unchanged(table)
                if not files and (not self._overwrite or table.current_snapshot() is None):
                    return
                self._commit(table, files)
            except (CommitFailedException, ValidationException) as exc:
                self._delete(files)
                raise CommitConflict(
                    f"table {self._options.table}: the {self._mode} of {len(files)} data files "
                    f"was not committed ({exc}); its files were deleted, re-run the job",
                    self._options.table) from exc
        finally:
            catalog.close()
        log.info("olympia %s to %s: %d data files committed as snapshot %s", self._mode,
                 self._options.table, len(files), table.metadata.current_snapshot_id)

    @property
    def _mode(self) -> str:
        return "overwrite" if self._overwrite else "append"

    def _check_unchanged(self, table: Table) -> None:
        written = self._metadata
        now = table.metadata
        problems = []
        if now.table_uuid != written.table_uuid:
            problems.append("the table was dropped and created again")
        elif now.current_schema_id != written.current_schema_id:
            problems.append("its schema changed")
        elif now.default_spec_id != written.default_spec_id:
            problems.append("its partitioning changed")
        elif self._overwrite and now.current_snapshot_id != self._base_snapshot_id:
            problems.append(f"snapshot {now.current_snapshot_id} was committed since the "
                            f"overwrite started from {self._base_snapshot_id}")
        if problems:
            raise CommitFailedException(f"table {self._options.table} changed while the job ran: "
                                        f"{problems[0]}")

    def _commit(self, table: Table, files: list[DataFile]) -> None:
        properties = {WRITE_ID: self._write_id}
        with table.transaction() as tx:
            if not self._overwrite:
                with tx.update_snapshot(snapshot_properties=properties).fast_append() as append:
                    for data_file in files:
                        append.append_data_file(data_file)
                return
            live = _live_data_files(table)
            with tx.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
                overwrite.delete_by_predicate(AlwaysTrue())
                for data_file in live:
                    overwrite.delete_data_file(data_file)
                for data_file in files:
                    overwrite.append_data_file(data_file)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete every file this job wrote (also those of tasks that died without
        reporting) unless its snapshot was committed after all."""
        try:
            catalog = self._options.open_catalog()
            try:
                table = catalog.load_table(self._options.table)
            finally:
                catalog.close()
        except Exception as exc:  # cannot tell whether the commit landed: keep the files
            log.warning("olympia %s to %s aborted; its files were kept because the table "
                        "could not be loaded (%s)", self._mode, self._options.table,
                        type(exc).__name__)
            return
        if any(s.summary is not None and s.summary.get(WRITE_ID) == self._write_id
               for s in table.metadata.snapshots):
            return
        self._delete(_data_files(messages))
        self._delete_unreported()

    def _delete(self, files: list[DataFile]) -> None:
        io = load_file_io(self._io_properties, self._metadata.location)
        for data_file in files:
            with contextlib.suppress(Exception):
                io.delete(data_file.file_path)

    def _delete_unreported(self) -> None:
        """Files of tasks killed before they could clean up carry the write id in their
        names: list the table's data folder for them."""
        root = load_location_provider(self._metadata.location, self._metadata.properties)
        data_path = root.data_path
        try:
            storage = Storage(data_path, storage_options(data_path, self._io_properties))
            try:
                stray = [f.path for f in storage.list("") if self._write_id in f.path]
                storage.delete_many(stray)
            finally:
                storage.close()
        except Exception as exc:
            log.warning("olympia %s to %s aborted; listing %s for files of killed tasks "
                        "failed (%s)", self._mode, self._options.table, data_path,
                        type(exc).__name__)


def split_by_partition(spec: PartitionSpec, schema: Schema,
                       table: pa.Table) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """The rows of ``table`` for each partition value of ``spec`` (one pass: the rows of
    each value are taken by index), the value as a tuple of transformed values."""
    if spec.is_unpartitioned():
        yield (), table
        return
    names = [f"p{i}" for i in range(len(spec.fields))]
    keys = pa.table({name: _transformed(field.transform, schema, field.source_id, table)
                     for name, field in zip(names, spec.fields, strict=True)})
    keys = keys.append_column("row", pa.array(range(table.num_rows), pa.int64()))
    grouped = keys.group_by(names, use_threads=False).aggregate([("row", "list")])
    rows = grouped.column("row_list")
    for i in range(grouped.num_rows):
        yield (tuple(grouped.column(name)[i].as_py() for name in names),
               table.take(rows[i].values))


def _transformed(transform: Any, schema: Schema, source_id: int, table: pa.Table) -> Any:
    """A partition transform applied to a column: pyiceberg's Arrow transform, or its
    per-value transform on the Iceberg representation (micros, days) where the Arrow one
    needs the optional pyiceberg-core package."""
    source = schema.find_field(source_id)
    column = table.column(schema.find_column_name(source_id))
    try:
        return transform.pyarrow_transform(source.field_type)(column)
    except NotInstalledError:
        one = transform.transform(source.field_type)
        if pa.types.is_timestamp(column.type) or pa.types.is_time(column.type):
            column = column.cast(pa.int64())
        elif pa.types.is_date(column.type):
            column = column.cast(pa.int32())
        return pa.array([None if v is None else one(v) for v in column.to_pylist()])


def _data_files(messages: list[WriterCommitMessage | None]) -> list[DataFile]:
    return [f for m in messages if isinstance(m, DataFilesMessage) for f in m.data_files]


def _live_data_files(table: Table) -> list[DataFile]:
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [entry.data_file for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            if entry.data_file.content == DataFileContent.DATA]
