"""The data files a write task produces: Parquet files under the table's location, split by
the table's partition spec (pyiceberg's transforms, one open file per partition value), rolled
at the target file size, and described as Iceberg ``DataFile`` entries with the statistics of
their footers. This runs on Spark's executors (and on the driver when an overwrite rewrites
files); deciding what a write replaces and committing it is ``olympia.spark.writer``'s job."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import NotInstalledError
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import (
    ParquetFormatModel,
    ParquetFormatWriter,
    _to_requested_schema,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.typedef import Record

from olympia.exceptions import InvalidArgumentError

FLUSH_ROWS = 256 * 1024  # rows buffered per partition value before a row group is written
FLUSH_BYTES = 64 * 1024 * 1024
FLUSH_ALL_BYTES = 256 * 1024 * 1024  # buffered over all partition values of a task
DICTIONARY_SAMPLE = 10_000  # first rows of a file that decide its dictionary-encoded columns


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


class DataFiles:
    """The data files one task (or one rewrite on the driver) writes: one open file per
    partition value of the table's spec, closed and replaced by a new one when it reaches the
    target size. Rows keep their order within a partition value; ``sort_order_id`` (the sort
    order the rows are said to come in) is checked on every row and recorded on the files."""

    def __init__(self, metadata: TableMetadata, io_properties: dict[str, str],
                 target_file_size: int, table: str, prefix: str,
                 sort_order_id: int | None) -> None:
        """Args:
            metadata: the table's metadata (schema, spec, location, writer properties).
            io_properties: the FileIO properties the files are written with.
            target_file_size: the size at which a file is closed and a new one begun.
            table: the table's name, for errors.
            prefix: the start of every file name (unique per task and job).
            sort_order_id: the sort order the rows are said to follow, checked.
        """
        self._metadata = metadata
        self._table = table
        self._target_file_size = target_file_size
        self._prefix = prefix
        self._sort_order_id = sort_order_id
        self._order = (metadata.sort_order_by_id(sort_order_id)
                       if sort_order_id is not None else None)
        self.io = load_file_io(io_properties, metadata.location)
        self._table_schema = metadata.schema()
        self._file_schema = sanitize_column_names(self._table_schema)
        self._spec = metadata.spec()
        self._locations = load_location_provider(metadata.location, metadata.properties)
        self._column_paths = list(parquet_path_to_id_mapping(self._file_schema))
        self._flush_bytes = min(FLUSH_BYTES, target_file_size)
        self._batch_schema: Schema | None = None
        self._open: dict[tuple[Any, ...], _OpenFile] = {}
        self._closed: list[DataFile] = []
        self._count = 0

    def write(self, batch: pa.RecordBatch) -> None:
        """Write ``batch`` (columns named as the table's, any order, optional ones may be
        missing) to the files of its partition values."""
        metadata = self._metadata
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
                f"table {self._table}: option sort-order-id says the rows "
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
            self.io.new_output(path), self._file_schema, self._metadata.properties,
            self._column_paths), self._flush_bytes)
        return self._open[values]

    def _roll(self, values: tuple[Any, ...]) -> None:
        if self._open[values].writer.written >= self._target_file_size:
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
            spec_id=self._metadata.default_spec_id, equality_ids=None,
            key_metadata=None, **statistics.to_serialized_dict())


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
