"""Well-shaped files: distribute a DataFrame by the table's partition spec and sort it by the
table's sort order before the ``olympia`` source writes it (what Iceberg's Spark writes call
the write distribution and ordering)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.transforms import IdentityTransform, TruncateTransform

from olympia.exceptions import InvalidArgumentError
from olympia.spark.options import PATH, SourceOptions
from olympia.spark.write_options import (
    OVERWRITE_MODE,
    OVERWRITE_MODE_CONF,
    REPLACE_WHERE,
    SORT_ORDER_ID,
)
from olympia.spark.writer import transformed

MODES = ("append", "overwrite")
KEY_PREFIX = "_olympia_key_"  # columns of transformed values, dropped before the write


def write(df: Any, table: str, *, catalog: str | None = None, mode: str = "append",
          options: Mapping[str, str] | None = None) -> None:
    """Write ``df`` to ``table`` through the ``olympia`` source with well-shaped files.

    The rows are distributed by the table's partition spec (the Iceberg partition value of
    each row is computed with pyiceberg's transforms; all rows of one value go to one task)
    and sorted within each task by partition value, then by the table's sort order, so each
    task writes one file per partition value (more only past ``target-file-size-bytes``),
    each sorted as the table declares; the data files record the sort order's id. The source
    is registered with the DataFrame's session (:func:`olympia.spark.register`).

    Args:
        df: the rows; columns named as the table's (optional ones may be left out).
        table: ``namespace.table``.
        catalog: the catalog URI (else the ``catalog`` option or ``spark.olympia.catalog``).
        mode: ``append`` or ``overwrite`` (see docs/SPARK.md, Overwriting safely).
        options: further write options and catalog properties (``partitionOverwriteMode``,
            ``replaceWhere``, ``target-file-size-bytes``, ``s3.endpoint``, ...).

    Raises:
        InvalidArgumentError: another mode, an option the source refuses, or a partition or
            sort field on a nested column; nothing is written.
        NoSuchTableError: the table does not exist.
        CommitConflict: the commit conflicted with another (see the source's writer).
    """
    from olympia.spark import register

    if mode not in MODES:
        raise InvalidArgumentError(
            f"table {table}: olympia.spark.write takes mode append or overwrite, not {mode!r}")
    spark = df.sparkSession
    source = register(spark)
    given = {k: str(v) for k, v in (options or {}).items()}
    if catalog is not None:
        given["catalog"] = catalog
    parsed = SourceOptions.parse({**given, PATH: table}, source.defaults, write=True)
    opened = parsed.open_catalog()
    try:
        metadata = opened.load_table(table).metadata
    finally:
        opened.close()
    schema, spec, order = metadata.schema(), metadata.spec(), metadata.sort_order()
    columns: list[tuple[str, Any, int]] = []  # (key column, transform, source id)
    partition_keys: list[Any] = []
    for field in spec.fields:
        partition_keys.append(_key(df, schema, field.transform, field.source_id, columns,
                                   table))
    sort_keys = []
    for sort_field in order.fields:
        key = _key(df, schema, sort_field.transform, sort_field.source_id, columns, table)
        ascending = sort_field.direction == SortDirection.ASC
        nulls_first = sort_field.null_order == NullOrder.NULLS_FIRST
        sort_keys.append((key.asc_nulls_first() if nulls_first else key.asc_nulls_last())
                         if ascending else
                         (key.desc_nulls_first() if nulls_first else key.desc_nulls_last()))
    shaped = df
    if columns:
        shaped = shaped.mapInArrow(_with_keys(schema, columns), _key_schema(df, columns, schema))
    if partition_keys:
        shaped = shaped.repartition(*partition_keys)
    if partition_keys or sort_keys:
        shaped = shaped.sortWithinPartitions(*partition_keys, *sort_keys)
    shaped = shaped.drop(*(name for name, _, _ in columns))
    if order.fields:
        given[SORT_ORDER_ID] = str(order.order_id)
    lowered = {k.lower() for k in given}
    if mode == "overwrite" and not lowered & {OVERWRITE_MODE, REPLACE_WHERE}:
        session_mode = spark.conf.get(OVERWRITE_MODE_CONF, None)
        if session_mode:
            given["partitionOverwriteMode"] = session_mode
    shaped.write.format("olympia").options(**given).mode(mode).save(table)


def _key(df: Any, schema: Schema, transform: Any, source_id: int,
         columns: list[tuple[str, Any, int]], table: str) -> Any:
    """The column to distribute or sort by: the source column for an identity transform, else
    a column of transformed values (added to ``columns``)."""
    from pyspark.sql import functions

    if source_id not in {f.field_id for f in schema.fields}:
        raise InvalidArgumentError(
            f"table {table}: olympia.spark.write cannot distribute or sort by nested column "
            f"{schema.find_column_name(source_id)}; write with df.write.format('olympia')")
    name = schema.find_column_name(source_id) or ""
    if name not in df.columns:
        raise InvalidArgumentError(
            f"table {table}: olympia.spark.write needs column {name}, which the table is "
            "partitioned or sorted by")
    if isinstance(transform, IdentityTransform):
        return functions.col(name)
    key = f"{KEY_PREFIX}{len(columns)}"
    columns.append((key, transform, source_id))
    return functions.col(key)


def _key_schema(df: Any, columns: list[tuple[str, Any, int]], schema: Schema) -> Any:
    """The DataFrame's schema with the key columns: ``int`` for bucket and the time
    transforms, the source column's type for truncate."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    fields = list(df.schema.fields)
    for name, transform, source_id in columns:
        source = df.schema[schema.find_column_name(source_id)]
        kind = source.dataType if isinstance(transform, TruncateTransform) else IntegerType()
        fields.append(StructField(name, kind, True))
    return StructType(fields)


def _with_keys(schema: Schema, columns: list[tuple[str, Any, int]]) -> Any:
    """The ``mapInArrow`` function adding the key columns to each batch."""

    def add(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = pa.Table.from_batches([batch])
            arrays, names = list(batch.columns), list(batch.schema.names)
            for name, transform, source_id in columns:
                values = transformed(transform, schema, source_id, rows)
                if isinstance(values, pa.ChunkedArray):
                    values = values.combine_chunks()
                if not isinstance(transform, TruncateTransform):
                    values = values.cast(pa.int32())
                arrays.append(values)
                names.append(name)
            yield pa.RecordBatch.from_arrays(arrays, names=names)

    return add
