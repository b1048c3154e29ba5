"""Writing: the tasks write their rows as data files (``olympia.spark.datafiles``); the
driver commits them as ONE Iceberg snapshot (one Olympia catalog version) or, when the job
fails, deletes them and commits nothing.

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
from pyiceberg.exceptions import CommitFailedException, ValidationException
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
    _check_pyarrow_schema_compatible,
    _expression_to_complementary_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import Record
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from olympia.exceptions import CommitConflict, InvalidArgumentError
from olympia.iceberg.locations import place
from olympia.iceberg.options import storage_options
from olympia.spark.datafiles import DataFiles
from olympia.spark.options import SourceOptions
from olympia.spark.schema import arrow_schema, check_write_schema
from olympia.spark.write_options import OVERWRITE_MODE_CONF
from olympia.storage import Storage

log = logging.getLogger("olympia.spark")
WRITE_ID = "olympia.spark.write-id"  # snapshot summary property naming the job
# what an overwrite replaces
STATIC, DYNAMIC, WHERE = "static", "dynamic", "replaceWhere"


@dataclass
class DataFilesMessage(WriterCommitMessage):
    """What one task wrote: its data files, with partition values and statistics, and the
    session's ``spark.sql.sources.partitionOverwriteMode`` as the task saw it (Spark hands
    the session's SQL configuration to tasks, not to the Python writer's planner)."""

    data_files: list[DataFile] = field(default_factory=list)
    session_overwrite_mode: str | None = None


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

    def _files(self, prefix: str, sort_order_id: int | None) -> DataFiles:
        return DataFiles(self._metadata, self._io_properties, self._target_file_size,
                         self._options.table, prefix, sort_order_id)

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
        files = self._files(f"{task}-{self._write_id}", self._options.write.sort_order_id)
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
        rewrite = self._files(f"rewrite-{self._write_id}", None)  # rows of several files
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
