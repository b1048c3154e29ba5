"""Writing: executors write Parquet data files under the table's location, split by the
table's partition spec (pyiceberg's transforms, one file per partition value per task, rolled
at the target file size); the driver commits them as ONE Iceberg snapshot (one Olympia catalog
version) or, when the job fails, deletes them and commits nothing.

What an overwrite replaces is decided here and nowhere else: the whole table (static), the
partitions the written rows fall in (dynamic: the ``partitionOverwriteMode`` option, else
Spark's session configuration as the tasks see it), or the rows a ``replaceWhere`` predicate
matches. When the source cannot tell which was asked it refuses rather than replace more."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException, NotInstalledError, ValidationException
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.parser import parse
from pyiceberg.expressions.visitors import (
    _InclusiveMetricsEvaluator,
    _StrictMetricsEvaluator,
    bind,
    extract_field_ids,
)
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import (
    ArrowScan,
    ParquetFormatModel,
    ParquetFormatWriter,
    _check_pyarrow_schema_compatible,
    _expression_to_complementary_pyarrow,
    _to_requested_schema,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntryStatus
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import Record
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from olympia.exceptions import CommitConflict, InvalidArgumentError
from olympia.iceberg.locations import place
from olympia.iceberg.options import storage_options
from olympia.spark.options import SourceOptions
from olympia.spark.schema import arrow_schema, check_write_schema
from olympia.spark.write_options import OVERWRITE_MODE_CONF
from olympia.storage import Storage

log = logging.getLogger("olympia.spark")
WRITE_ID = "olympia.spark.write-id"  # snapshot summary property naming the job
FLUSH_ROWS = 256 * 1024  # rows buffered per partition value before a row group is written
FLUSH_BYTES = 64 * 1024 * 1024
FLUSH_ALL_BYTES = 256 * 1024 * 1024  # buffered over all partition values of a task
DICTIONARY_SAMPLE = 10_000  # first rows of a file that decide its dictionary-encoded columns
# what an overwrite replaces
STATIC, DYNAMIC, WHERE = "static", "dynamic", "replaceWhere"


@dataclass
class DataFilesMessage(WriterCommitMessage):
    """What one task wrote: its data files, with partition values and statistics, and the
    session's ``spark.sql.sources.partitionOverwriteMode`` as the task saw it (Spark hands
    the session's SQL configuration to tasks, not to the Python writer's planner)."""

    data_files: list[DataFile] = field(default_factory=list)
    session_overwrite_mode: str | None = None


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

    @property
    def written(self) -> int:
        """Bytes written to the file so far (whole row groups)."""
        return self._fos.tell() if self._fos is not None else 0


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
    flush_bytes: int
    buffered: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    last_key: pa.Table | None = None  # the sort key of the last row written, when checked

    def add(self, table: pa.Table) -> bool:
        """Buffer ``table``; True when that wrote the buffer as a row group."""
        self.buffered.append(table)
        self.rows += table.num_rows
        self.nbytes += table.nbytes
        if self.rows >= FLUSH_ROWS or self.nbytes >= self.flush_bytes:
            self.flush()
            return True
        return False

    def flush(self) -> None:
        if self.buffered:
            # one row group of the buffered batches as they are (the writer takes chunks)
            self.writer.write(pa.concat_tables(self.buffered))
            self.buffered, self.rows, self.nbytes = [], 0, 0


class _Files:
    """The data files one task (or one rewrite on the driver) writes: one open file per
    partition value of the table's spec, closed and replaced by a new one when it reaches the
    target size. Rows keep their order within a partition value; ``sort_order_id`` (the sort
    order the rows are said to come in) is checked on every row and recorded on the files."""

    def __init__(self, writer: OlympiaWriter, prefix: str, sort_order_id: int | None) -> None:
        metadata = writer._metadata
        self._writer = writer
        self._prefix = prefix
        self._sort_order_id = sort_order_id
        self._order = (metadata.sort_order_by_id(sort_order_id)
                       if sort_order_id is not None else None)
        self.io = load_file_io(writer._io_properties, metadata.location)
        self._table_schema = metadata.schema()
        self._file_schema = sanitize_column_names(self._table_schema)
        self._spec = metadata.spec()
        self._locations = load_location_provider(metadata.location, metadata.properties)
        self._column_paths = list(parquet_path_to_id_mapping(self._file_schema))
        self._flush_bytes = min(FLUSH_BYTES, writer._target_file_size)
        self._batch_schema: Schema | None = None
        self._open: dict[tuple[Any, ...], _OpenFile] = {}
        self._closed: list[DataFile] = []
        self._count = 0

    def write(self, batch: pa.RecordBatch) -> None:
        """Write ``batch`` (columns named as the table's, any order, optional ones may be
        missing) to the files of its partition values."""
        metadata = self._writer._metadata
        if self._batch_schema is None:
            self._batch_schema = pyarrow_to_schema(
                batch.schema, name_mapping=self._table_schema.name_mapping,
                format_version=metadata.format_version)
        converted = pa.Table.from_batches([_to_requested_schema(
            self._file_schema, self._batch_schema, batch, include_field_ids=True,
            format_model=ParquetFormatModel())])
        for values, rows in split_by_partition(self._spec, self._file_schema, converted):
            open_file = self._open.get(values) or self._new(values)
            if self._order is not None:
                self._check_order(open_file, rows)
            if open_file.add(rows):
                self._roll(values)
        if sum(f.nbytes for f in self._open.values()) >= FLUSH_ALL_BYTES:
            for values in list(self._open):
                self._open[values].flush()
                self._roll(values)

    def _check_order(self, open_file: _OpenFile, rows: pa.Table) -> None:
        """Refuse ``rows`` unless they, after the file's rows so far, follow the sort order.

        Raises:
            InvalidArgumentError: a row out of that order, naming the option.
        """
        assert self._order is not None
        keys = pa.table({f"k{i}": transformed(f.transform, self._file_schema, f.source_id, rows)
                         for i, f in enumerate(self._order.fields)})
        checked = keys if open_file.last_key is None else pa.concat_tables(
            [open_file.last_key, keys])
        sort_keys = [(f"k{i}", "ascending" if f.direction == SortDirection.ASC else
                      "descending", "at_start" if f.null_order == NullOrder.NULLS_FIRST else
                      "at_end") for i, f in enumerate(self._order.fields)]
        # a stable sort of rows in order leaves them where they are
        order = pc.sort_indices(checked, sort_keys=sort_keys)
        if not order.equals(pa.array(range(checked.num_rows), order.type)):
            raise InvalidArgumentError(
                f"table {self._writer._options.table}: option sort-order-id says the rows "
                f"follow sort order {self._sort_order_id}, but a task's rows do not; nothing "
                "is committed (sort them, or leave the option out)")
        open_file.last_key = keys.slice(keys.num_rows - 1)

    def _new(self, values: tuple[Any, ...]) -> _OpenFile:
        key = PartitionKey([PartitionFieldValue(f, v) for f, v in zip(
            self._spec.fields, values, strict=True)], self._spec, self._file_schema) \
            if values else None
        name = f"{self._prefix}-{self._count:05d}.parquet"
        self._count += 1
        path = self._locations.new_data_location(name, key)
        self._open[values] = _OpenFile(path, key, _ParquetFile(
            self.io.new_output(path), self._file_schema, self._writer._metadata.properties,
            self._column_paths), self._flush_bytes)
        return self._open[values]

    def _roll(self, values: tuple[Any, ...]) -> None:
        if self._open[values].writer.written >= self._writer._target_file_size:
            self._closed.append(self._close(self._open.pop(values)))

    def close(self) -> list[DataFile]:
        """Close every open file; the data files written."""
        for values in list(self._open):
            self._closed.append(self._close(self._open.pop(values)))
        return self._closed

    def discard(self) -> None:
        """Close and delete every file written (on failure)."""
        paths = [f.file_path for f in self._closed] + [f.path for f in self._open.values()]
        for open_file in self._open.values():
            with contextlib.suppress(Exception):
                open_file.writer.close()
        for path in paths:
            with contextlib.suppress(Exception):
                self.io.delete(path)

    def _close(self, open_file: _OpenFile) -> DataFile:
        open_file.flush()
        statistics = open_file.writer.close()
        return DataFile.from_args(
            content=DataFileContent.DATA, file_path=open_file.path,
            file_format=FileFormat.PARQUET,
            partition=open_file.key.partition if open_file.key else Record(),
            file_size_in_bytes=len(self.io.new_input(open_file.path)),
            sort_order_id=self._sort_order_id,
            spec_id=self._writer._metadata.default_spec_id, equality_ids=None,
            key_metadata=None, **statistics.to_serialized_dict())


@dataclass(frozen=True)
class _Replacement:
    """What an overwrite replaces: every data file (static), the data files of these
    partitions of the current spec (dynamic), or the rows matching a predicate."""

    kind: str
    partitions: frozenset[tuple[int, Record]] = frozenset()
    predicate: BooleanExpression = field(default_factory=AlwaysTrue)


class _CheckedOverwrite(_OverwriteFiles):
    """pyiceberg's overwrite producer; when pyiceberg retries it on a refreshed table, the
    commits that landed meanwhile are checked by the writer's conflict rule instead of
    pyiceberg's (which, without a row filter, refuses any data file added meanwhile). The
    rule also covers pyiceberg's checks of the files this commit deletes: a commit that
    removed one of them, or added deletes for it, touched a replaced partition or rows the
    predicate may match."""

    def __init__(self, table: Table, transaction: Any, properties: dict[str, str],
                 conflict: Callable[[Table, int | None, int], str | None]) -> None:
        super().__init__(
            operation=Operation.OVERWRITE if table.current_snapshot() else Operation.APPEND,
            transaction=transaction, io=table.io, snapshot_properties=properties)
        self._conflict = conflict

    def _validate_concurrency(self) -> None:
        window = self._commit_window
        if window is None or window.head is None or window.is_empty():
            return
        problem = self._conflict(self._transaction._table,
                                 window.base.snapshot_id if window.base else None,
                                 window.head.snapshot_id)
        if problem:
            raise ValidationException(problem)


class OlympiaWriter(DataSourceArrowWriter):
    """Made on the driver by :meth:`create` (which checks the schema and the write options
    before any task runs); ``write`` runs in each task, ``commit``/``abort`` on the driver."""

    def __init__(self, options: SourceOptions, table: Table, overwrite: bool,
                 filled_required: list[str]) -> None:
        self._options = options
        self._overwrite = overwrite
        self._write_id = uuid.uuid4().hex
        self._metadata: TableMetadata = table.metadata
        place(load_location_provider(table.metadata.location, table.metadata.properties)
              .data_path, f"the data folder of table {options.table}")
        self._io_properties = dict(table.io.properties)
        self._base_snapshot_id = table.metadata.current_snapshot_id
        self._filled_required = filled_required
        self._target_file_size = options.write.target_file_size or int(
            table.metadata.properties.get(TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                                          TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT))

    @classmethod
    def create(cls, options: SourceOptions, spark_schema: Any, overwrite: bool) -> OlympiaWriter:
        """Check the write options and the DataFrame's schema against the table's current
        schema, and return the job's writer.

        Args:
            options: the write's parsed options.
            spark_schema: the DataFrame's ``StructType``.
            overwrite: Spark's overwrite flag (``mode("overwrite")``, ``INSERT OVERWRITE``).

        Returns:
            The writer Spark pickles to the tasks.

        Raises:
            InvalidArgumentError: ``replaceWhere`` on an append, with
                ``partitionOverwriteMode``, or a predicate that cannot be parsed or bound; a
                ``sort-order-id`` the table does not have; a schema mismatch (naming the
                columns). Nothing is written.
            NoSuchTableError: the table does not exist.
            TableLocationError: the table's data folder is a form a FileIO could read
                differently (a query, a ``..`` step, a relative path...).
        """
        write, name = options.write, options.table
        if write.replace_where is not None:
            if not overwrite:
                raise InvalidArgumentError(
                    f"table {name}: option replaceWhere chooses the rows an overwrite replaces; "
                    "an append does not take it (use mode('overwrite'))")
            if write.overwrite_mode is not None:
                raise InvalidArgumentError(
                    f"table {name}: options replaceWhere and partitionOverwriteMode both choose "
                    "what an overwrite replaces: give one")
        catalog = options.open_catalog()
        try:
            table = catalog.load_table(name)
        finally:
            catalog.close()
        schema = table.schema()
        if write.replace_where is not None:
            named = extract_field_ids(bind(schema, replace_predicate(
                write.replace_where, schema, name), case_sensitive=True))
            if absent := sorted(str(schema.find_column_name(i)) for i in named
                                if schema.find_column_name(i) not in spark_schema.names):
                raise InvalidArgumentError(
                    f"table {name}: option replaceWhere names columns the DataFrame does not "
                    f"have ({', '.join(absent)}): its rows could not be checked against it")
        if write.sort_order_id is not None and table.metadata.sort_order_by_id(
                write.sort_order_id) is None:
            raise InvalidArgumentError(
                f"table {name}: option sort-order-id names sort order {write.sort_order_id}, "
                "which the table does not have")
        check_write_schema(schema, [(f.name, f.dataType.simpleString(), f.nullable)
                                    for f in spark_schema.fields], name,
                           check_nullability=write.check_nullability)
        required = {f.name for f in schema.fields if f.required}
        filled = [f.name for f in spark_schema.fields if f.nullable and f.name in required]
        converted = arrow_schema(spark_schema)
        converted = pa.schema([f.with_nullable(False) if f.name in filled else f
                               for f in converted])
        try:
            _check_pyarrow_schema_compatible(schema, converted,
                                             format_version=table.metadata.format_version)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"cannot write to table {name}: the DataFrame's column types do not "
                f"match the table's; nothing was written\n{exc}") from None
        return cls(options, table, overwrite, filled)

    # --- executors ----------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DataFilesMessage:
        """Write this task's rows, one Parquet file per partition value (rolled at the target
        file size); on any failure the task's files are deleted before the error propagates.

        Raises:
            InvalidArgumentError: a null in a required column (check-nullability=false), or
                a row outside the ``replaceWhere`` predicate; the job commits nothing.
        """
        from pyspark import TaskContext

        context = TaskContext.get()
        task = f"{context.partitionId():05d}-{context.attemptNumber()}" if context else "00000-0"
        session_mode = context.getLocalProperty(OVERWRITE_MODE_CONF) if context else None
        outside = self._outside_filter()
        files = _Files(self, f"{task}-{self._write_id}", self._options.write.sort_order_id)
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                batch = self._checked(batch, outside)
                files.write(batch)
            return DataFilesMessage(files.close(), session_mode)
        except BaseException:
            files.discard()
            raise

    def _outside_filter(self) -> Any:
        """The Arrow filter of the rows a ``replaceWhere`` predicate does not match."""
        if self._options.write.replace_where is None:
            return None
        schema = self._metadata.schema()
        predicate = replace_predicate(self._options.write.replace_where, schema,
                                      self._options.table)
        return _expression_to_complementary_pyarrow(bind(schema, predicate, True), schema)

    def _checked(self, batch: pa.RecordBatch, outside: Any) -> pa.RecordBatch:
        table = self._options.table
        for name in self._filled_required:
            if name in batch.schema.names and batch.column(name).null_count:
                raise InvalidArgumentError(
                    f"table {table}: column {name} is required but a written row holds a null "
                    "in it (check-nullability=false lets a nullable column fill it, not a "
                    "null); nothing was committed")
        if self._filled_required:
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=pa.schema(
                [f.with_nullable(False) if f.name in self._filled_required else f
                 for f in batch.schema]))
        if outside is not None:
            stray = pa.Table.from_batches([batch]).filter(outside).num_rows
            if stray:
                raise InvalidArgumentError(
                    f"table {table}: {stray} written rows do not match option replaceWhere "
                    f"({self._options.write.replace_where}); the overwrite replaces only rows "
                    "it matches and refuses to write others; nothing was committed")
        return batch

    # --- driver ---------------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit every task's files as one snapshot (one catalog version).

        Appends are retried by pyiceberg on the refreshed table when another commit wins the
        race. A static overwrite fails if anything was committed to the table since the job
        started; a dynamic or replaceWhere overwrite fails if a commit since then added or
        removed data in what it replaces.

        Raises:
            CommitConflict: the commit cannot be made safely (a conflicting commit, or the
                table's schema, partitioning or identity changed); the job's files are deleted.
            InvalidArgumentError: the overwrite cannot tell what it should replace; the job's
                files are deleted.
        """
        files = _data_files(messages)
        catalog = self._options.open_catalog()
        try:
            table = catalog.load_table(self._options.table)
            try:
                replacement = self._replacement(messages, files)
                self._check_unchanged(table, replacement)
                if replacement is None:
                    if files:
                        self._append(table, files)
                elif replacement.kind == STATIC:
                    if files or table.current_snapshot() is not None:
                        self._replace_table(table, files)
                elif files or (replacement.kind == WHERE and table.current_snapshot()):
                    self._replace(table, files, replacement)
            except (CommitFailedException, ValidationException) as exc:
                self._delete(files)
                raise CommitConflict(
                    f"table {self._options.table}: the {self._mode} of {len(files)} data files "
                    f"was not committed ({exc}); its files were deleted, re-run the job",
                    self._options.table) from exc
            except InvalidArgumentError:
                self._delete(files)
                raise
        finally:
            catalog.close()
        log.info("olympia %s to %s: %d data files committed as snapshot %s", self._mode,
                 self._options.table, len(files), table.metadata.current_snapshot_id)

    @property
    def _mode(self) -> str:
        return "overwrite" if self._overwrite else "append"

    def _replacement(self, messages: list[WriterCommitMessage | None],
                     files: list[DataFile]) -> _Replacement | None:
        """What this job replaces (None: an append): ``replaceWhere``, else the
        ``partitionOverwriteMode`` option, else the session configuration the tasks saw."""
        write = self._options.write
        if not self._overwrite:
            return None
        if write.replace_where is not None:
            return _Replacement(WHERE, predicate=replace_predicate(
                write.replace_where, self._metadata.schema(), self._options.table))
        kind = write.overwrite_mode
        if kind is None:
            seen = {(m.session_overwrite_mode or STATIC).strip().lower()
                    for m in messages if isinstance(m, DataFilesMessage)}
            if len(seen) != 1 or not seen <= {STATIC, DYNAMIC}:
                raise InvalidArgumentError(
                    f"table {self._options.table}: cannot tell whether this overwrite is "
                    "static (replace the table) or dynamic (replace the written partitions): "
                    "no task reported the session's spark.sql.sources.partitionOverwriteMode; "
                    "give option partitionOverwriteMode; nothing was committed")
            (kind,) = seen
        if kind == STATIC:
            return _Replacement(STATIC)
        # tasks write with the default spec (a DataFile's spec id does not survive pickling)
        spec_id = self._metadata.default_spec_id
        return _Replacement(DYNAMIC, partitions=frozenset((spec_id, f.partition) for f in files))

    def _check_unchanged(self, table: Table, replacement: _Replacement | None) -> None:
        written = self._metadata
        now = table.metadata
        problem = None
        if now.table_uuid != written.table_uuid:
            problem = "the table was dropped and created again"
        elif now.current_schema_id != written.current_schema_id:
            problem = "its schema changed"
        elif now.default_spec_id != written.default_spec_id:
            problem = "its partitioning changed"
        elif replacement is not None and replacement.kind == STATIC:
            if now.current_snapshot_id != self._base_snapshot_id:
                problem = (f"snapshot {now.current_snapshot_id} was committed since the "
                           f"overwrite started from {self._base_snapshot_id}")
        elif replacement is not None and now.current_snapshot_id is not None:
            problem = self._conflict(replacement)(table, self._base_snapshot_id,
                                                  now.current_snapshot_id)
        if problem:
            raise CommitFailedException(f"table {self._options.table} changed while the job ran: "
                                        f"{problem}")

    def _conflict(self, replacement: _Replacement) -> Callable[[Table, int | None, int],
                                                               str | None]:
        """The conflict rule of a dynamic or replaceWhere overwrite: a commit after ``base``
        up to ``head`` that added or removed data files or delete files in the replaced
        partitions, or that may hold rows the predicate matches (by the files' statistics)."""
        touches: Callable[[DataFile], bool]
        if replacement.kind == DYNAMIC:
            def touches(data_file: DataFile) -> bool:
                return (data_file.spec_id, data_file.partition) in replacement.partitions
        else:
            touches = _InclusiveMetricsEvaluator(self._metadata.schema(), replacement.predicate,
                                                 include_empty_files=True).eval
        what = ("the partitions it replaces" if replacement.kind == DYNAMIC
                else "rows option replaceWhere matches")

        def conflict(table: Table, base: int | None, head: int) -> str | None:
            metadata = table.metadata
            snapshot = metadata.snapshot_by_id(head)
            while snapshot is not None and snapshot.snapshot_id != base:
                for manifest in snapshot.manifests(table.io):
                    if manifest.added_snapshot_id != snapshot.snapshot_id:
                        continue
                    for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                        if (entry.snapshot_id == snapshot.snapshot_id
                                and entry.status != ManifestEntryStatus.EXISTING
                                and touches(entry.data_file)):
                            return (f"snapshot {snapshot.snapshot_id}, committed since the "
                                    f"overwrite started, changed files in {what}")
                parent = snapshot.parent_snapshot_id
                snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
            if base is not None and snapshot is None:
                return (f"snapshot {base}, which the overwrite started from, is no longer in "
                        "the table's history")
            return None

        return conflict

    def _append(self, table: Table, files: list[DataFile]) -> None:
        with table.transaction() as tx, tx.update_snapshot(
                snapshot_properties={WRITE_ID: self._write_id}).fast_append() as append:
            for data_file in files:
                append.append_data_file(data_file)

    def _replace_table(self, table: Table, files: list[DataFile]) -> None:
        live = _live_data_files(table)
        with table.transaction() as tx, tx.update_snapshot(
                snapshot_properties={WRITE_ID: self._write_id}).overwrite() as overwrite:
            overwrite.delete_by_predicate(AlwaysTrue())
            for data_file in live:
                overwrite.delete_data_file(data_file)
            for data_file in files:
                overwrite.append_data_file(data_file)

    def _replace(self, table: Table, files: list[DataFile], replacement: _Replacement) -> None:
        """Replace the written partitions, or the rows matching the predicate (files that
        hold some of them are rewritten without them; their new files join ``files``), in one
        snapshot."""
        with table.transaction() as tx, _CheckedOverwrite(
                table, tx, {WRITE_ID: self._write_id}, self._conflict(replacement)) as overwrite:
            if replacement.kind == DYNAMIC:
                spec_id = table.metadata.default_spec_id
                for data_file in _live_data_files(table):
                    if (data_file.spec_id == spec_id
                            and (spec_id, data_file.partition) in replacement.partitions):
                        overwrite.delete_data_file(data_file)
            else:
                files.extend(self._delete_rows(table, replacement.predicate, overwrite))
            for data_file in files:
                overwrite.append_data_file(data_file)

    def _delete_rows(self, table: Table, predicate: BooleanExpression,
                     overwrite: _OverwriteFiles) -> list[DataFile]:
        """Delete the live rows ``predicate`` matches: files whose statistics show all rows
        match are dropped, files that may hold some are rewritten without them. Returns
        the rewritten files."""
        schema = table.schema()
        might = _InclusiveMetricsEvaluator(schema, predicate)
        every = _StrictMetricsEvaluator(schema, predicate)
        keep = _expression_to_complementary_pyarrow(bind(schema, predicate, True), schema)
        rewrite = _Files(self, f"rewrite-{self._write_id}", None)  # rows of several files
        try:
            for task in table.scan().plan_files():
                if not might.eval(task.file):
                    continue
                overwrite.delete_data_file(task.file)
                if every.eval(task.file):
                    continue
                rows = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(
                    [task]).filter(keep)
                for batch in rows.to_batches():
                    rewrite.write(batch)
            return rewrite.close()
        except BaseException:
            rewrite.discard()
            raise

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
    keys = pa.table({name: transformed(field.transform, schema, field.source_id, table)
                     for name, field in zip(names, spec.fields, strict=True)})
    keys = keys.append_column("row", pa.array(range(table.num_rows), pa.int64()))
    grouped = keys.group_by(names, use_threads=False).aggregate([("row", "list")])
    rows = grouped.column("row_list")
    for i in range(grouped.num_rows):
        yield (tuple(grouped.column(name)[i].as_py() for name in names),
               table.take(rows[i].values))


def transformed(transform: Any, schema: Schema, source_id: int, table: pa.Table) -> Any:
    """A partition (or sort) transform applied to a top-level column of ``table``:
    pyiceberg's Arrow transform, or its per-value transform on the Iceberg representation
    (micros, days) where the Arrow one needs the optional pyiceberg-core package.

    Args:
        transform: a pyiceberg ``Transform``.
        schema: the schema ``source_id`` belongs to.
        source_id: the field id of the transformed column.
        table: rows holding the column under its schema name.

    Returns:
        The transformed values as an Arrow array.
    """
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


def replace_predicate(text: str, schema: Schema, table: str) -> BooleanExpression:
    """Parse a ``replaceWhere`` predicate with pyiceberg's expression parser and check that
    it binds to ``schema`` (column names are case-sensitive).

    Raises:
        InvalidArgumentError: the text is not a predicate pyiceberg parses, or names a column
            the table does not have or a literal its type cannot hold.
    """
    try:
        predicate = parse(text)
    except Exception as exc:
        raise InvalidArgumentError(
            f"table {table}: option replaceWhere is not a predicate pyiceberg's expression "
            f"parser understands ({type(exc).__name__}: {exc})") from None
    try:
        bind(schema, predicate, case_sensitive=True)
    except Exception as exc:
        raise InvalidArgumentError(
            f"table {table}: option replaceWhere does not fit the table's columns ({exc})"
        ) from None
    return predicate


def _data_files(messages: list[WriterCommitMessage | None]) -> list[DataFile]:
    return [f for m in messages if isinstance(m, DataFilesMessage) for f in m.data_files]


def _live_data_files(table: Table) -> list[DataFile]:
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [entry.data_file for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            if entry.data_file.content == DataFileContent.DATA]
