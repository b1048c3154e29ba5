"""Well-shaped files: distribute a DataFrame by the table's partition spec and sort it by the
table's sort order before the ``olympia`` source writes it (what Iceberg's Spark writes call
the write distribution and ordering)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.transforms import IdentityTransform, TruncateTransform

from olympia.exceptions import InvalidArgumentError
from olympia.spark.datafiles import transformed
from olympia.spark.options import PATH, SourceOptions
from olympia.spark.write_options import (
    OVERWRITE_MODE,
    OVERWRITE_MODE_CONF,
    REPLACE_WHERE,
    SORT_ORDER_ID,
)

MODES = ("append", "overwrite")
KEY_PREFIX = "_olympia_key_"  # columns of transformed values, dropped before the write


def write(df: Any, table: str, *, catalog: str | None = None, mode: str = "append",
          options: Mapping[str, str] | None = None) -> None:
    """:func:`olympia.spark.write`, which documents it (arguments, errors).

    Raises:
        InvalidArgumentError: another mode, a refused option, a nested partition or sort
            column; nothing is written.
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
    columns: list[tuple[str, Any]] = []  # (key column, its expression)
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
    shaped = df.withColumns(dict(columns)) if columns else df
    if partition_keys:
        shaped = shaped.repartition(*partition_keys)
    if partition_keys or sort_keys:
        shaped = shaped.sortWithinPartitions(*partition_keys, *sort_keys)
    shaped = shaped.drop(*(name for name, _ in columns))
    if order.fields:
        given[SORT_ORDER_ID] = str(order.order_id)
    lowered = {k.lower() for k in given}
    if mode == "overwrite" and not lowered & {OVERWRITE_MODE, REPLACE_WHERE}:
        session_mode = spark.conf.get(OVERWRITE_MODE_CONF, None)
        if session_mode:
            given["partitionOverwriteMode"] = session_mode
    shaped.write.format("olympia").options(**given).mode(mode).save(table)


def _key(df: Any, schema: Schema, transform: Any, source_id: int,
         columns: list[tuple[str, Any]], table: str) -> Any:
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
    kind = df.schema[name].dataType if isinstance(transform, TruncateTransform) else "int"
    columns.append((key, _transform_udf(schema, transform, source_id, kind)(
        functions.col(name))))
    return functions.col(key)


def _transform_udf(schema: Schema, transform: Any, source_id: int, kind: Any) -> Any:
    """An Arrow UDF (no pandas needed) applying ``transform`` with pyiceberg: ``int`` for
    bucket and the time transforms, the source column's type for truncate."""
    from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf

    name = schema.find_column_name(source_id) or ""

    def apply(values: pa.Array) -> pa.Array:
        out = transformed(transform, schema, source_id, pa.table({name: values}))
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        return out if isinstance(transform, TruncateTransform) else out.cast(pa.int32())

    return arrow_udf(apply, kind, ArrowUDFType.SCALAR)
