"""Iceberg <-> Olympia type mapping, and pyiceberg properties -> Olympia storage options."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UnknownType,
    UUIDType,
)

from olympia.catalog.objects import Column, assign_column_ids
from olympia.exceptions import InvalidArgumentError
from olympia.iceberg.options import storage_options
from olympia.iceberg.typemap import (
    ICEBERG_TYPE_PROPERTY,
    columns_from_schema,
    iceberg_type,
    schema_from_columns,
)

PRIMITIVES = [
    (BooleanType(), "boolean"), (IntegerType(), "int4"), (LongType(), "int8"),
    (FloatType(), "float4"), (DoubleType(), "float8"), (DecimalType(12, 3), "decimal(12,3)"),
    (DateType(), "date"), (TimeType(), "time6"), (TimestampType(), "timestamp6"),
    (TimestamptzType(), "timestamptz6"), (TimestampNanoType(), "timestamp9"),
    (TimestamptzNanoType(), "timestamptz9"), (StringType(), "varchar"), (UUIDType(), "uuid"),
    (FixedType(16), "fixed(16)"), (BinaryType(), "binary"),
]


@pytest.mark.parametrize(("iceberg", "olympia"), PRIMITIVES, ids=[o for _, o in PRIMITIVES])
def test_primitive_types_round_trip(iceberg: object, olympia: str) -> None:
    schema = Schema(NestedField(1, "c", iceberg, required=True, doc="d"))  # type: ignore[arg-type]
    (column,) = columns_from_schema(schema)
    assert (column.type, column.id, column.nullable, column.comment) == (olympia, 1, False, "d")
    assert schema_from_columns([column]) == schema


def test_nested_types_keep_every_field_id() -> None:
    schema = Schema(
        NestedField(1, "tags", ListType(2, StringType(), element_required=True)),
        NestedField(3, "m", MapType(4, StringType(), 5, StructType(
            NestedField(6, "x", LongType(), required=True)), value_required=False)),
        NestedField(7, "s", StructType(NestedField(8, "l", ListType(9, DateType()))),
                    required=True),
    )
    columns = columns_from_schema(schema)
    assert [c.id for col in columns for c in col.walk()] == list(range(1, 10))
    assert columns[0].element is not None and not columns[0].element.nullable
    assert schema_from_columns(columns) == schema
    # and the columns survive the Olympia definition format unchanged
    assert tuple(Column.from_proto(c.to_proto()) for c in columns) == columns


def test_types_olympia_has_no_name_for_are_kept_as_a_property() -> None:
    (column,) = columns_from_schema(Schema(NestedField(1, "u", UnknownType())))
    assert column.type == "binary" and column.properties == {ICEBERG_TYPE_PROPERTY: "unknown"}
    with pytest.raises(InvalidArgumentError, match="u holds the Iceberg type unknown"):
        iceberg_type(column)


def test_olympia_types_widen_or_are_refused() -> None:
    declared = assign_column_ids([Column(n, t) for n, t in [
        ("a", "int1"), ("b", "int2"), ("c", "char(3)"), ("d", "varchar(10)"), ("e", "time3"),
        ("f", "timestamp3"), ("g", "timestamptz3")]], 1)
    assert [f.field_type for f in schema_from_columns(declared).fields] == [
        IntegerType(), IntegerType(), StringType(), StringType(), TimeType(), TimestampType(),
        TimestamptzType()]
    for kind in ("json", "time9", "timetz6"):
        nested = assign_column_ids([Column("s", "struct", fields=(Column("x", kind),))], 1)
        with pytest.raises(InvalidArgumentError, match=f"column s.x has type {kind}"):
            schema_from_columns(nested)


def test_storage_options_from_pyiceberg_properties() -> None:
    props = {"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "eu-west-1",
             "s3.access-key-id": "AK", "s3.secret-access-key": "SK", "s3.session-token": "T",
             "s3.connect-timeout": "2.5", "s3.force-virtual-addressing": "true",
             "olympia.storage.max_concurrency": "8", "olympia.storage.fsync": "false",
             "warehouse": "s3://b/wh"}
    assert storage_options("s3://b/cat", props) == {
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
        "key": "AK", "secret": "SK", "token": "T",
        "config_kwargs": {"connect_timeout": 2.5, "s3": {"addressing_style": "virtual"}},
        "max_concurrency": 8, "fsync": False,
    }
    assert storage_options("/local/cat", props) == {"max_concurrency": 8, "fsync": False}
    with pytest.raises(InvalidArgumentError, match=r"s3\.anonymous must be true or false"):
        storage_options("s3://b/c", {"s3.anonymous": "yes"})
    with pytest.raises(InvalidArgumentError, match="request-timeout") as err:
        storage_options("s3://b/c", {"s3.request-timeout": "secret-ish"})
    assert "secret-ish" not in str(err.value)


def test_olympia_imports_without_pyiceberg() -> None:
    script = (
        "import sys\n"
        "sys.modules['pyiceberg'] = None  # as if not installed\n"
        "import olympia, olympia.iceberg\n"
        "try:\n"
        "    olympia.iceberg.OlympiaCatalog\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True)
    assert "pip install 'olympia-catalog[iceberg]'" in out.stdout
