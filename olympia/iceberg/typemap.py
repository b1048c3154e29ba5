"""Iceberg types <-> Olympia column types.

Iceberg -> Olympia is total: every Iceberg schema becomes Olympia columns whose ids are the
Iceberg field ids (list elements, map keys and values included). Types Olympia has no name for
(``unknown``, ``geometry``, ``geography``, empty structs) become ``binary`` columns that keep the
Iceberg type in the column property ``iceberg.type``.

Olympia -> Iceberg widens where Iceberg has no narrower type (``int1``/``int2`` -> ``int``,
``char(n)``/``varchar(n)`` -> ``string``, millisecond times and timestamps -> microseconds) and
refuses types Iceberg cannot hold (``json``, ``time9``, ``timetz*``) with an error naming the
column.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    PrimitiveType,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from olympia.catalog.objects import Column
from olympia.exceptions import InvalidArgumentError

ICEBERG_TYPE_PROPERTY = "iceberg.type"

_TO_OLYMPIA: dict[type[PrimitiveType], str] = {
    BooleanType: "boolean", IntegerType: "int4", LongType: "int8", FloatType: "float4",
    DoubleType: "float8", DateType: "date", TimeType: "time6", TimestampType: "timestamp6",
    TimestamptzType: "timestamptz6", TimestampNanoType: "timestamp9",
    TimestamptzNanoType: "timestamptz9", StringType: "varchar", UUIDType: "uuid",
    BinaryType: "binary",
}
_TO_ICEBERG: dict[str, PrimitiveType] = {
    "boolean": BooleanType(), "int1": IntegerType(), "int2": IntegerType(),
    "int4": IntegerType(), "int8": LongType(), "float4": FloatType(), "float8": DoubleType(),
    "date": DateType(), "time3": TimeType(), "time6": TimeType(),
    "timestamp3": TimestampType(), "timestamp6": TimestampType(),
    "timestamp9": TimestampNanoType(), "timestamptz3": TimestamptzType(),
    "timestamptz6": TimestamptzType(), "timestamptz9": TimestamptzNanoType(),
    "varchar": StringType(), "uuid": UUIDType(), "binary": BinaryType(),
}


# --- Iceberg -> Olympia --------------------------------------------------------------------


def columns_from_schema(schema: Schema) -> tuple[Column, ...]:
    """The Olympia columns of an Iceberg schema, ids = Iceberg field ids."""
    return tuple(column_from_field(f) for f in schema.fields)


def column_from_field(field: NestedField) -> Column:
    """One Iceberg field as an Olympia column."""
    return _column(field.name, field.field_type, not field.required, field.doc or "",
                   field.field_id)


def _column(name: str, kind: IcebergType, nullable: bool, comment: str, id_: int) -> Column:
    if isinstance(kind, StructType) and kind.fields:
        return Column(name, "struct", nullable, comment, id=id_,
                      fields=tuple(column_from_field(f) for f in kind.fields))
    if isinstance(kind, ListType):
        element = _column("element", kind.element_type, not kind.element_required, "",
                          kind.element_id)
        return Column(name, "list", nullable, comment, element=element, id=id_)
    if isinstance(kind, MapType):
        key = _column("key", kind.key_type, False, "", kind.key_id)
        value = _column("value", kind.value_type, not kind.value_required, "", kind.value_id)
        return Column(name, "map", nullable, comment, key=key, value=value, id=id_)
    if isinstance(kind, DecimalType):
        return Column(name, f"decimal({kind.precision},{kind.scale})", nullable, comment, id=id_)
    if isinstance(kind, FixedType):
        return Column(name, f"fixed({len(kind)})", nullable, comment, id=id_)
    simple = _TO_OLYMPIA.get(type(kind))  # type: ignore[arg-type]
    if simple is not None:
        return Column(name, simple, nullable, comment, id=id_)
    return Column(name, "binary", nullable, comment, id=id_,
                  properties={ICEBERG_TYPE_PROPERTY: str(kind)})


# --- Olympia -> Iceberg --------------------------------------------------------------------


def schema_from_columns(columns: Iterable[Column], schema_id: int = 0) -> Schema:
    """An Iceberg schema from Olympia columns, field ids = column ids.

    Raises:
        InvalidArgumentError: a column's type has no Iceberg equivalent (named by its path).
    """
    return Schema(*(field_from_column(c) for c in columns), schema_id=schema_id)


def field_from_column(column: Column, path: str = "") -> NestedField:
    """One Olympia column as an Iceberg field (see :func:`schema_from_columns`)."""
    where = f"{path}.{column.name}" if path else column.name
    return NestedField(field_id=column.id, name=column.name, required=not column.nullable,
                       field_type=iceberg_type(column, where), doc=column.comment or None)


def iceberg_type(column: Column, where: str = "") -> IcebergType:
    """The Iceberg type of an Olympia column.

    Raises:
        InvalidArgumentError: the type cannot be represented in Iceberg.
    """
    where = where or column.name
    kind = column.type
    if ICEBERG_TYPE_PROPERTY in column.properties:
        raise InvalidArgumentError(
            f"column {where} holds the Iceberg type {column.properties[ICEBERG_TYPE_PROPERTY]}, "
            "which Olympia can show but not declare")
    if kind == "struct":
        return StructType(*(field_from_column(f, where) for f in column.fields))
    if kind == "list" and column.element is not None:
        element = column.element
        return ListType(element.id, iceberg_type(element, f"{where}.element"),
                        element_required=not element.nullable)
    if kind == "map" and column.key is not None and column.value is not None:
        key, value = column.key, column.value
        return MapType(key.id, iceberg_type(key, f"{where}.key"), value.id,
                       iceberg_type(value, f"{where}.value"),
                       value_required=not value.nullable)
    base, _, params = kind.partition("(")
    numbers = [int(p) for p in params.rstrip(")").split(",") if p]
    if base == "decimal":
        return DecimalType(numbers[0], numbers[1])
    if base == "fixed":
        return FixedType(numbers[0])
    if base in ("char", "varchar"):
        return StringType()
    simple = _TO_ICEBERG.get(kind)
    if simple is None:
        raise InvalidArgumentError(
            f"column {where} has type {kind}, which Iceberg cannot represent "
            f"(Iceberg-compatible types: {', '.join(sorted(_TO_ICEBERG))}, decimal(P,S), "
            "fixed(N), char(N), varchar(N), struct, list, map)")
    return simple
