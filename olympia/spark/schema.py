"""Iceberg schemas as Spark schemas, Spark schemas as Arrow schemas, and the check that a
DataFrame fits a table.

Spark types are written as DDL strings (``pyspark.sql.types`` parses them on the JVM side), so
this module imports pyspark only where Spark's own Arrow conversion is used.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from olympia.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType as SparkStructType

_PRIMITIVES: dict[type[IcebergType], str] = {
    BooleanType: "BOOLEAN", IntegerType: "INT", LongType: "BIGINT", FloatType: "FLOAT",
    DoubleType: "DOUBLE", DateType: "DATE", StringType: "STRING", BinaryType: "BINARY",
    FixedType: "BINARY", TimestampType: "TIMESTAMP_NTZ", TimestamptzType: "TIMESTAMP",
}


def arrow_schema(schema: SparkStructType) -> pa.Schema:
    """Spark's own Arrow form of ``schema``, timestamps with time zone in UTC as the JVM
    exchanges them (pyspark 4.1 does so by default; 4.3 takes the zone as ``timezone`` and
    defaults to none)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    convert: Any = to_arrow_schema  # typed by whichever pyspark is installed
    if "timezone" in inspect.signature(convert).parameters:
        return convert(schema, timezone="UTC")
    return convert(schema)


def spark_ddl(schema: Schema, table: str) -> str:
    """The Spark DDL of an Iceberg schema (``id BIGINT NOT NULL, name STRING, ...``).

    Iceberg ``timestamp`` is Spark ``TIMESTAMP_NTZ`` and ``timestamptz`` is ``TIMESTAMP``;
    ``fixed[N]`` reads as ``BINARY``.

    Raises:
        InvalidArgumentError: a column has a type Spark cannot hold (``uuid``, ``time``,
            nanosecond timestamps, ``unknown``, geospatial types), naming the column.
    """
    return ", ".join(_field(f, table, f.name) for f in schema.fields)


def _field(field: NestedField, table: str, path: str) -> str:
    null = " NOT NULL" if field.required else ""
    return f"{_quote(field.name)} {_type(field.field_type, table, path)}{null}"


def _type(kind: IcebergType, table: str, path: str) -> str:
    if isinstance(kind, DecimalType):
        return f"DECIMAL({kind.precision},{kind.scale})"
    if isinstance(kind, StructType):
        inner = ", ".join(f"{_quote(f.name)}: {_type(f.field_type, table, f'{path}.{f.name}')}"
                          f"{' NOT NULL' if f.required else ''}" for f in kind.fields)
        return f"STRUCT<{inner}>"
    if isinstance(kind, ListType):
        return f"ARRAY<{_type(kind.element_type, table, path + '.element')}>"
    if isinstance(kind, MapType):
        return (f"MAP<{_type(kind.key_type, table, path + '.key')}, "
                f"{_type(kind.value_type, table, path + '.value')}>")
    for iceberg, ddl in _PRIMITIVES.items():
        if isinstance(kind, iceberg):
            return ddl
    raise InvalidArgumentError(
        f"table {table}: column {path} has Iceberg type {kind}, which Spark cannot read or "
        "write through the olympia data source")


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def check_write_schema(table_schema: Schema, columns: list[tuple[str, str, bool]],
                       table: str, *, check_nullability: bool = True) -> None:
    """Refuse a DataFrame whose columns do not fit the table's top-level columns.

    Args:
        table_schema: the table's current schema.
        columns: the DataFrame's (name, Spark type, nullable).
        table: the table's name, for messages.
        check_nullability: False lets a nullable column fill a required one (a null value
            then fails the task that meets it).

    Names must match exactly (order may differ); optional columns of the table may be left
    out (they are written as nulls), required ones may not. Type compatibility is checked by
    pyiceberg when the Arrow schema is compared (see ``writer``).

    Raises:
        InvalidArgumentError: naming the missing, unknown or nullable columns.
    """
    wanted = {f.name: f for f in table_schema.fields}
    given = {name: nullable for name, _, nullable in columns}
    problems = []
    if missing := sorted(n for n, f in wanted.items() if f.required and n not in given):
        problems.append(f"missing required columns {', '.join(missing)}")
    if extra := sorted(set(given) - set(wanted)):
        problems.append(f"columns not in the table: {', '.join(extra)}")
    if check_nullability and (nullable := sorted(n for n, f in wanted.items()
                                                 if f.required and given.get(n))):
        problems.append(f"nullable DataFrame columns for required table columns: "
                        f"{', '.join(nullable)} (option check-nullability=false lets them "
                        "fill it; a null then fails the write)")
    if problems:
        raise InvalidArgumentError(
            f"cannot write to table {table}: the DataFrame does not match its schema "
            f"({'; '.join(problems)}); nothing was written")
