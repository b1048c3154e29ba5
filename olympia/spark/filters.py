"""Spark's pushed-down filters as pyiceberg expressions, for file pruning on the driver.

Only filters whose Iceberg meaning is the same as Spark's for every row are translated, so
pruning never drops a file holding a row Spark would keep: comparisons, ``IN``, ``IS [NOT]
NULL``, ``startsWith`` and ``NOT`` of those, on top-level columns of boolean, integer,
decimal, string, binary, date and timestamp types. Floating-point columns are never pruned
on (Spark orders NaN above every number, Iceberg's min/max statistics leave NaN out), and
``endsWith``/``contains`` have no Iceberg counterpart. Whatever is not translated stays with
Spark, and Spark re-checks every row of the files that are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotNull,
    Reference,
    StartsWith,
)
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, FloatType, PrimitiveType

# pyiceberg builds these from (column name, Python value); its type hints say otherwise
_COMPARISONS: dict[str, Any] = {
    "EqualTo": EqualTo, "EqualNullSafe": EqualTo, "GreaterThan": GreaterThan,
    "GreaterThanOrEqual": GreaterThanOrEqual, "LessThan": LessThan,
    "LessThanOrEqual": LessThanOrEqual, "StringStartsWith": StartsWith,
}


def translate(spark_filter: Any, schema: Schema,
              scan_schema: Schema | None = None) -> BooleanExpression | None:
    """The pyiceberg expression for one ``pyspark.sql.datasource`` filter, or None when it
    cannot be translated exactly (see the module docstring).

    Args:
        spark_filter: the filter, naming columns of ``schema``.
        schema: the schema the read returns.
        scan_schema: the schema pyiceberg's planning binds names to (the table's current
            one; default ``schema``): a column is named as it is there, found by field id
            (a read of an old snapshot may know it by an earlier name).

    Returns:
        The expression, or None.
    """
    kind = type(spark_filter).__name__
    if kind == "Not":
        child = translate(spark_filter.child, schema, scan_schema)
        return None if child is None else Not(child)
    column = _column(spark_filter, schema, scan_schema or schema)
    if column is None:
        return None
    if kind == "IsNull":
        return IsNull(term=Reference(column))
    if kind == "IsNotNull":
        return NotNull(term=Reference(column))
    value = getattr(spark_filter, "value", None)
    if kind == "In":
        values = list(value or ())
        if any(v is None or isinstance(v, (list, dict)) for v in values) or not values:
            return None
        return In(Reference(column), values)  # type: ignore[call-arg,arg-type]
    if kind not in _COMPARISONS or isinstance(value, (list, dict, tuple)):
        return None
    if value is None:
        return IsNull(term=Reference(column)) if kind == "EqualNullSafe" else None
    expression: BooleanExpression = _COMPARISONS[kind](
        column, bytes(value) if isinstance(value, bytearray) else value)
    return expression


def _column(spark_filter: Any, schema: Schema, scan_schema: Schema) -> str | None:
    """The filtered top-level column's name in ``scan_schema``, when pruning on it is
    exact."""
    path = getattr(spark_filter, "attribute", None)
    if not path or len(path) != 1:
        return None
    field = next((f for f in schema.fields if f.name == path[0]), None)
    if field is None or not isinstance(field.field_type, PrimitiveType):
        return None
    if isinstance(field.field_type, (FloatType, DoubleType)):
        return None
    return scan_schema.find_column_name(field.field_id)  # None: dropped since


def pushdown(filters: Sequence[Any], schema: Schema,
             scan_schema: Schema | None = None) -> tuple[BooleanExpression, list[Any]]:
    """Split Spark's filters into one pyiceberg expression (their AND) and the filters that
    could not be translated. A filter whose literal does not bind to the column's type
    (pyiceberg's own check) is left untranslated.

    Args:
        filters: Spark's filters, naming columns of ``schema``.
        schema: the schema the read returns.
        scan_schema: the schema pyiceberg's planning binds to (see :func:`translate`).

    Returns:
        The expression over ``scan_schema``'s names, and the untranslated filters.
    """
    target = scan_schema or schema
    pushed: BooleanExpression = AlwaysTrue()
    rest = []
    for spark_filter in filters:
        expression = translate(spark_filter, schema, target)
        if expression is not None:
            try:
                bind(target, expression, case_sensitive=True)
            except (ValueError, TypeError, KeyError):
                expression = None
        if expression is None:
            rest.append(spark_filter)
        else:
            pushed = And(pushed, expression)
    return pushed, rest
