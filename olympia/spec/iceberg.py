"""How a spec lays out an Iceberg table: partition and sort terms, and what Iceberg can hold.

Pure Python (no pyiceberg): ``validate`` and ``plan`` read these; ``olympia.iceberg`` turns
them into Iceberg partition specs and sort orders.

Terms are written like SQL: ``region`` (identity), ``identity(region)``, ``year(ts)``,
``month(ts)``, ``day(ts)``, ``hour(ts)``, ``bucket(16, id)``, ``truncate(4, name)``; a sort
term adds ``asc``/``desc`` and ``nulls first``/``nulls last`` (``placed_at desc nulls last``).
Iceberg writes the same transforms as ``bucket[16]``; :attr:`Term.transform` is that form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from olympia.catalog.objects import Column
from olympia.exceptions import InvalidArgumentError

TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
MAX_WIDTH = 2**31 - 1
_CALL = re.compile(r"^\s*([A-Za-z]+)\s*\((.*)\)\s*$", re.DOTALL)
_ICEBERG = re.compile(r"^([a-z]+)(?:\[(\d+)\])?$")
_SORT_SUFFIX = re.compile(r"^(.*?)(?:\s+(asc|desc))?(?:\s+nulls\s+(first|last))?\s*$",
                          re.IGNORECASE | re.DOTALL)
_INTS = ("int1", "int2", "int4", "int8")
_TIMESTAMPS = ("timestamp3", "timestamp6", "timestamp9", "timestamptz3", "timestamptz6",
               "timestamptz9")
# Olympia types Iceberg has no type for (olympia.iceberg.typemap refuses the same ones)
_NOT_ICEBERG = ("json", "time9", "timetz3", "timetz6", "timetz9")
# nanosecond timestamps: Iceberg format version 3 only
_NANOS = ("timestamp9", "timestamptz9")
# Olympia types Iceberg stores as a wider one: what reading the table back gives
_WIDENED = {"int1": "int4", "int2": "int4", "time3": "time6", "timestamp3": "timestamp6",
            "timestamptz3": "timestamptz6"}


def _base(kind: str) -> str:
    return kind.split("(")[0]


def _applies(transform: str, kind: str) -> bool:
    """Whether Iceberg's ``transform`` takes a source column of Olympia type ``kind``."""
    base = _base(kind)
    if base in ("struct", "list", "map"):
        return False
    if transform == "identity":
        return True
    if transform in ("year", "month", "day"):
        return kind == "date" or kind in _TIMESTAMPS
    if transform == "hour":
        return kind in _TIMESTAMPS
    if transform == "truncate":
        return kind in _INTS or base in ("decimal", "char", "varchar", "binary")
    return (kind in _INTS or kind in _TIMESTAMPS or kind.startswith("time")
            or base in ("decimal", "date", "char", "varchar", "uuid", "fixed", "binary"))


@dataclass(frozen=True)
class Term:
    """A transform of one top-level column: ``bucket(16, id)`` is ("bucket", "id", 16)."""

    function: str
    column: str
    width: int | None = None

    @property
    def transform(self) -> str:
        """Iceberg's spelling: ``identity``, ``day``, ``bucket[16]``."""
        return f"{self.function}[{self.width}]" if self.width is not None else self.function

    def __str__(self) -> str:
        if self.function == "identity":
            return self.column
        if self.width is not None:
            return f"{self.function}({self.width}, {self.column})"
        return f"{self.function}({self.column})"

    @classmethod
    def parse(cls, text: str) -> Term:
        """A term as written in a spec.

        Raises:
            InvalidArgumentError: an unknown transform, or a width that is not a positive
                whole number.
        """
        match = _CALL.match(text)
        if match is None:
            column = text.strip()
            if not column:
                raise InvalidArgumentError("a term names a column")
            return cls("identity", column)
        function, inside = match.group(1).lower(), match.group(2)
        if function not in TRANSFORMS:
            raise InvalidArgumentError(f"unknown transform {function!r} (known: "
                                       f"{', '.join(TRANSFORMS)})")
        if function in ("bucket", "truncate"):
            width, _, column = inside.partition(",")
            width = width.strip()
            if not column.strip() or not width.isdigit() or width.startswith("0") \
                    or int(width) > MAX_WIDTH:
                raise InvalidArgumentError(f"{function} takes a width from 1 to {MAX_WIDTH} "
                                           f"and a column: {function}(16, id)")
            return cls(function, column.strip(), int(width))
        if not inside.strip():
            raise InvalidArgumentError(f"{function} takes a column: {function}(placed_at)")
        return cls(function, inside.strip())

    def check(self, columns: Mapping[str, Column]) -> None:
        """Check the term against the table's top-level columns.

        Raises:
            InvalidArgumentError: no such column, or the transform does not apply to its type.
        """
        column = columns.get(self.column)
        if column is None:
            raise InvalidArgumentError(f"{self}: the table has no column {self.column!r}")
        if not _applies(self.function, column.type):
            raise InvalidArgumentError(f"{self}: {self.function} does not apply to column "
                                       f"{self.column} of type {column.type}")


@dataclass(frozen=True)
class SortTerm:
    """A sort field: a term, its direction and where nulls go."""

    term: Term
    descending: bool = False
    nulls_first: bool = True

    def __str__(self) -> str:
        text = str(self.term) + (" desc" if self.descending else "")
        if self.nulls_first == self.descending:  # not the default for the direction
            text += " nulls first" if self.nulls_first else " nulls last"
        return text

    @classmethod
    def parse(cls, text: str) -> SortTerm:
        """A sort term as written: ``<term> [asc|desc] [nulls first|nulls last]``; nulls go
        first ascending and last descending unless said otherwise.

        Raises:
            InvalidArgumentError: the term is malformed.
        """
        match = _SORT_SUFFIX.match(text)
        assert match is not None  # the pattern matches every text
        descending = (match.group(2) or "asc").lower() == "desc"
        nulls = match.group(3)
        first = not descending if nulls is None else nulls.lower() == "first"
        return cls(Term.parse(match.group(1)), descending, first)


@dataclass(frozen=True)
class Layout:
    """Partitioning and sorting of an Iceberg table, as declared or as it is."""

    partition_by: tuple[Term, ...] = ()
    sort_by: tuple[SortTerm, ...] = ()

    def partition_texts(self) -> tuple[str, ...]:
        return tuple(str(t) for t in self.partition_by)

    def sort_texts(self) -> tuple[str, ...]:
        return tuple(str(t) for t in self.sort_by)


def parse_terms(texts: Iterable[str], columns: Iterable[Column]) -> tuple[Term, ...]:
    """Partition terms, checked against ``columns``.

    Raises:
        InvalidArgumentError: a malformed term, an unknown column, or one partitioned twice
            by the same transform.
    """
    by_name = {c.name: c for c in columns}
    terms = tuple(Term.parse(t) for t in texts)
    for term in terms:
        term.check(by_name)
    if len(set(terms)) != len(terms):
        raise InvalidArgumentError("a partition term appears twice")
    return terms


def parse_sort(texts: Iterable[str], columns: Iterable[Column]) -> tuple[SortTerm, ...]:
    """Sort terms, checked against ``columns`` (see :func:`parse_terms`)."""
    by_name = {c.name: c for c in columns}
    terms = tuple(SortTerm.parse(t) for t in texts)
    for term in terms:
        term.term.check(by_name)
    return terms


def unrepresentable(column: Column) -> str | None:
    """Why Iceberg cannot hold ``column`` (its type or a nested one), or None."""
    if column.type in _NOT_ICEBERG:
        return f"type {column.type} has no Iceberg equivalent"
    if column.type in _NANOS:
        return (f"type {column.type} needs Iceberg format version 3, which Olympia cannot "
                "create tables in yet (pyiceberg writes versions 1 and 2)")
    if column.properties:
        return "Iceberg columns have no properties"
    for part in (*column.fields, column.element, column.key, column.value):
        if part is not None:
            why = unrepresentable(part)
            if why is not None:
                return why
    return None


def as_stored(column: Column) -> Column:
    """``column`` as an Iceberg table stores and returns it: ``int2`` -> ``int4``,
    ``char(n)``/``varchar(n)`` -> ``varchar``, millisecond times -> microseconds, no column
    properties (Iceberg has none), nested parts likewise."""
    kind = _WIDENED.get(column.type, column.type)
    if _base(kind) in ("char", "varchar"):
        kind = "varchar"
    return replace(column, type=kind, properties={},
                   fields=tuple(as_stored(f) for f in column.fields),
                   element=_part(column.element), key=_part(column.key, required=True),
                   value=_part(column.value))


def _part(column: Column | None, required: bool = False) -> Column | None:
    """A list element, map key or value as stored: no comment; keys are never null."""
    if column is None:
        return None
    stored = as_stored(column)
    return replace(stored, comment="", nullable=stored.nullable and not required)


def layout_of(format_properties: Mapping[str, str], columns: Iterable[Column]) -> Layout:
    """The partitioning and sorting recorded in an Iceberg table's Olympia definition
    (``partition-spec`` and ``sort-order`` as Iceberg JSON, field ids resolved to column
    names). Fields Iceberg voided (removed from a v1 spec) are left out.

    Raises:
        InvalidArgumentError: the recorded JSON is malformed or names an unknown column.
    """
    names = {c.id: c.name for c in columns}
    try:
        spec = json.loads(format_properties.get("partition-spec") or "{}")
        order = json.loads(format_properties.get("sort-order") or "{}")
        partition = tuple(_term(f["transform"], names[f["source-id"]])
                          for f in spec.get("fields", []) if f["transform"] != "void")
        sort = tuple(SortTerm(_term(f["transform"], names[f["source-id"]]),
                              f["direction"] == "desc", f["null-order"] == "nulls-first")
                     for f in order.get("fields", []))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidArgumentError(f"the table's recorded partition spec or sort order is "
                                   f"unreadable ({exc!r})") from None
    return Layout(partition, sort)


def _term(transform: str, column: str) -> Term:
    match = _ICEBERG.match(transform)
    if match is None or match.group(1) not in TRANSFORMS:
        raise ValueError(f"unknown transform {transform!r}")
    width = match.group(2)
    return Term(match.group(1), column, int(width) if width else None)
