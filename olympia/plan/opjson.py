"""Operations read from JSON: validated against their JSON Schema, then against the format.

A malformed or forged operation (unknown operation or keyword, a value of the wrong type, a
column type the format cannot hold) is a clear :class:`InvalidArgumentError` naming it,
never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator

from olympia.catalog.objects import Column
from olympia.exceptions import InvalidArgumentError
from olympia.plan.ops import COLUMN_DEF, OP_CLASSES, Op
from olympia.spec.iceberg import SortTerm, Term


def op_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one operation's JSON form."""
    cls = OP_CLASSES[name]
    return {"type": "object", "required": ["op", *cls.required], "additionalProperties": False,
            "properties": {"op": {"const": name}, **cls.schema},
            "$defs": {"column": COLUMN_DEF}}


_VALIDATORS = {name: Draft202012Validator(op_schema(name)) for name in OP_CLASSES}
_MESSAGE_LIMIT = 160


def parse_op(data: Any) -> Op:
    """An operation from its JSON form.

    Raises:
        InvalidArgumentError: an unknown operation, an unknown or missing keyword, a value of
            the wrong type, or a column the format cannot hold; the message says which.
    """
    if not isinstance(data, Mapping):
        raise InvalidArgumentError(f"an operation must be an object, got {_short(data)}")
    name = data.get("op")
    if not isinstance(name, str) or name not in OP_CLASSES:
        raise InvalidArgumentError(f"unknown operation {_short(name)} (known: "
                                   f"{', '.join(sorted(OP_CLASSES))})")
    errors = sorted(_VALIDATORS[name].iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        raise InvalidArgumentError(f"{name}: " + "; ".join(_describe(e) for e in errors[:5]))
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "op":
            continue
        values[key] = _typed(key, value)
    return OP_CLASSES[name].from_json(values)


def _typed(key: str, value: Any) -> Any:
    """A JSON value as the field holds it: identifiers and lists as tuples, columns checked."""
    if key in ("columns", "add_columns"):
        return tuple(_column(c) for c in value)
    if key == "update_columns":
        return {name: _column(c, name) for name, c in value.items()}
    if key == "referenced_objects":
        return tuple((a, b) for a, b in value)
    if key in ("partition_by", "sort_by") and value is not None:
        parse = Term.parse if key == "partition_by" else SortTerm.parse
        for text in value:
            try:
                parse(text)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{key} {_short(text)}: {exc}") from None
    if isinstance(value, list):
        return tuple(value)
    return value


def _column(data: Mapping[str, Any], name: str = "") -> Column:
    label = data.get("name", name)
    try:
        column = Column.coerce(data, name)
        column.to_proto()  # sizes the format cannot hold fail here, not at apply time
    except (InvalidArgumentError, ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"column {_short(label)}: {_clip(str(exc))}") from None
    return column


def _describe(error: Any) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties":
        message = error.message.split(" were unexpected")[0].split(" was unexpected")[0]
        message = "unknown keyword " + message.replace("Additional properties are not "
                                                       "allowed ", "").strip("()")
    elif error.validator == "required":
        message = "missing keyword " + error.message.split(" is a required")[0]
    else:
        message = _clip(error.message)
    return f"{path}: {message}" if path else message


def _clip(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "..."


def _short(value: Any) -> str:
    return _clip(repr(value))


def parse_ops(items: Any) -> list[Op]:
    """Every operation of a list, or InvalidArgumentError naming each malformed one."""
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise InvalidArgumentError(f"ops must be a list, got {_short(items)}")
    ops, problems = [], []
    for i, item in enumerate(items):
        try:
            ops.append(parse_op(item))
        except InvalidArgumentError as exc:
            problems.append(f"operation {i + 1}: {exc}")
    if problems:
        raise InvalidArgumentError("; ".join(problems))
    return ops
