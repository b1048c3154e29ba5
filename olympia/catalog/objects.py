"""Catalog objects as Python values, and their protobuf definitions (objects.proto).

Over 400 lines because the column type system (spellings, parameters, nested types and their
protobuf form) is most of it, and splitting it from the objects that carry it would leave
each half converting the other's values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from olympia._proto import objects_pb2 as pb
from olympia.exceptions import InvalidArgumentError

# canonical type name -> DataType; parameterised types carry their parameters in the spelling
_SIMPLE = {
    "boolean": pb.BOOLEAN, "int1": pb.INT1, "int2": pb.INT2, "int4": pb.INT4, "int8": pb.INT8,
    "float4": pb.FLOAT4, "float8": pb.FLOAT8, "date": pb.DATE, "binary": pb.BINARY,
    "uuid": pb.UUID, "json": pb.JSON, "struct": pb.STRUCT, "list": pb.LIST, "map": pb.MAP,
    **{f"{base}{p}": getattr(pb, f"{base.upper()}{p}")
       for base in ("time", "timetz", "timestamp", "timestamptz") for p in (3, 6, 9)},
}
_ALIASES = {
    "bool": "boolean", "tinyint": "int1", "byte": "int1", "smallint": "int2", "short": "int2",
    "int": "int4", "integer": "int4", "bigint": "int8", "long": "int8", "float": "float4",
    "real": "float4", "double": "float8", "string": "varchar", "text": "varchar",
    "bytes": "binary", "varbinary": "binary", "time": "time6", "timetz": "timetz6",
    "timestamp": "timestamp6", "timestamptz": "timestamptz6", "array": "list",
}
_PARAM = re.compile(
    r"^(decimal|numeric|char|varchar|fixed)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$"
)
TYPE_NAMES = sorted({*_SIMPLE, "decimal(P,S)", "char(N)", "varchar", "varchar(N)", "fixed(N)"})


# The largest char/varchar/fixed length: what Java engines can hold (and the uint32 proto
# fields can store).
MAX_TYPE_PARAMETER = 2**31 - 1


def canonical_type(spelling: str) -> str:
    """Normalise a type spelling: ``BIGINT`` -> ``int8``, ``Decimal(10, 2)`` -> ``decimal(10,2)``.

    Raises InvalidArgumentError for an unknown type.
    """
    text = str(spelling)
    # every column built or read normalises its type: short spellings are remembered
    return _canonical_cached(text) if len(text) <= _CACHED_SPELLING else _canonical(text)


_CACHED_SPELLING = 40  # the longest spelling remembered (longer ones are rare or invalid)


@lru_cache(maxsize=1024)
def _canonical_cached(spelling: str) -> str:
    return _canonical(spelling)


def _canonical(spelling: str) -> str:
    text = " ".join(spelling.strip().lower().split())
    text = _ALIASES.get(text, text)
    if text in _SIMPLE:
        return text
    m = _PARAM.match(text)
    if m:
        base, a, b = m.group(1), m.group(2), m.group(3)
        base = "decimal" if base == "numeric" else base
        if base == "decimal":
            precision = int(a) if a and len(a) <= 12 else (0 if a else 38)
            scale = int(b) if b and len(b) <= 12 else (precision + 1 if b else 0)
            if not 1 <= precision <= 38 or scale > precision:
                raise InvalidArgumentError(
                    f"invalid decimal precision/scale in {_quoted(spelling)}")
            return f"decimal({precision},{scale})"
        if b is not None:
            raise InvalidArgumentError(f"{base} takes one parameter: {spelling!r}")
        if base == "varchar" and not a:
            return "varchar"
        length = int(a) if a and len(a) <= 12 else (MAX_TYPE_PARAMETER + 1 if a else 0)
        if base == "varchar" and length == 0:
            return "varchar"  # what the format stores for unbounded text (specs refuse it)
        if length < 1:
            raise InvalidArgumentError(f"{base} needs a positive length: {spelling!r}")
        if length > MAX_TYPE_PARAMETER:
            raise InvalidArgumentError(
                f"{base} length must be at most {MAX_TYPE_PARAMETER}: {_quoted(spelling)}")
        return f"{base}({length})"
    raise InvalidArgumentError(
        f"unknown type {_quoted(spelling)}; known types: {', '.join(TYPE_NAMES)}"
    )


def _quoted(text: str, limit: int = 60) -> str:
    """``repr(text)``, cut in the middle beyond ``limit`` characters (messages stay short)."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit // 2]}...{shown[-limit // 2:]}"


@dataclass(frozen=True)
class Column:
    """A typed column; struct, list and map columns nest further columns."""

    name: str
    type: str
    nullable: bool = True
    comment: str = ""
    fields: tuple[Column, ...] = ()  # struct
    element: Column | None = None  # list
    key: Column | None = None  # map
    value: Column | None = None  # map
    properties: Mapping[str, str] = field(default_factory=dict)
    id: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", canonical_type(self.type))
        object.__setattr__(self, "properties", dict(self.properties))
        kind = self.type
        if kind == "struct" and not self.fields:
            raise InvalidArgumentError(f"struct column {self.name!r} needs fields")
        if kind == "list" and self.element is None:
            raise InvalidArgumentError(f"list column {self.name!r} needs an element")
        if kind == "map" and (self.key is None or self.value is None):
            raise InvalidArgumentError(f"map column {self.name!r} needs a key and a value")
        if kind != "struct" and self.fields:
            raise InvalidArgumentError(f"column {self.name!r} of type {kind} cannot have fields")
        if kind != "list" and self.element is not None:
            raise InvalidArgumentError(f"column {self.name!r} of type {kind} has no element")
        if kind != "map" and (self.key is not None or self.value is not None):
            raise InvalidArgumentError(f"column {self.name!r} of type {kind} has no key/value")
        names = [f.name for f in self.fields]
        if len(names) != len(set(names)):
            raise InvalidArgumentError(f"struct column {self.name!r} has duplicate field names")

    @classmethod
    def coerce(cls, obj: Column | Mapping[str, Any], default_name: str = "") -> Column:
        """Accept a Column or a plain dict such as ``{"name": "id", "type": "int8"}``."""
        if isinstance(obj, Column):
            return obj
        if not isinstance(obj, Mapping):
            raise InvalidArgumentError(f"a column must be a Column or a dict, got {obj!r}")
        known = {"name", "type", "nullable", "comment", "fields", "element", "key", "value",
                 "properties", "id"}
        unknown = set(obj) - known
        if unknown:
            raise InvalidArgumentError(f"unknown column attributes: {', '.join(sorted(unknown))}")
        if "type" not in obj:
            raise InvalidArgumentError(f"column {obj.get('name', default_name)!r} needs a type")

        def sub(name: str) -> Column | None:
            value = obj.get(name)
            return None if value is None else cls.coerce(value, name)

        return cls(
            name=str(obj.get("name", default_name)),
            type=str(obj["type"]),
            nullable=bool(obj.get("nullable", True)),
            comment=str(obj.get("comment") or ""),
            fields=tuple(cls.coerce(f) for f in obj.get("fields") or ()),
            element=sub("element"),
            key=sub("key"),
            value=sub("value"),
            properties={str(k): str(v) for k, v in (obj.get("properties") or {}).items()},
            id=int(obj.get("id", 0)),
        )

    def to_dict(self, with_ids: bool = False) -> dict[str, Any]:
        """A plain dict (defaults omitted), the inverse of :meth:`coerce`."""
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if not self.nullable:
            out["nullable"] = False
        if self.comment:
            out["comment"] = self.comment
        if self.fields:
            out["fields"] = [f.to_dict(with_ids) for f in self.fields]
        for part in ("element", "key", "value"):
            sub = getattr(self, part)
            if sub is not None:
                d = sub.to_dict(with_ids)
                d.pop("name", None)
                out[part] = d
        if self.properties:
            out["properties"] = dict(sorted(self.properties.items()))
        if with_ids:
            out["id"] = self.id
        return out

    def children(self) -> Iterator[Column]:
        yield from self.fields
        for sub in (self.element, self.key, self.value):
            if sub is not None:
                yield sub

    def walk(self) -> Iterator[Column]:
        yield self
        for child in self.children():
            yield from child.walk()

    def without_ids(self) -> Column:
        if all(c.id == 0 for c in self.walk()):
            return self  # a declared column: nothing to clear
        return _assign(self, iter(lambda: 0, 1))

    def to_proto(self) -> pb.Column:
        msg = pb.Column()
        self._fill(msg)
        return msg

    def _fill(self, msg: pb.Column) -> None:
        """Set this column on ``msg``, nested columns in place (not built and copied)."""
        msg.SetInParent()
        msg.id, msg.name, msg.nullable, msg.comment = (self.id, self.name, self.nullable,
                                                       self.comment)
        if self.properties:
            msg.properties.update(self.properties)
        msg.type, params = _proto_type(self.type)
        if msg.type == pb.DECIMAL:
            msg.precision, msg.scale = params
        elif params:
            msg.length = params[0]
        for f in self.fields:
            f._fill(msg.struct_fields.add())
        if self.element is not None:
            self.element._fill(msg.list_element)
        if self.key is not None and self.value is not None:
            self.key._fill(msg.map_key)
            self.value._fill(msg.map_value)

    @classmethod
    def from_proto(cls, msg: pb.Column) -> Column:
        name = _TYPE_NAMES.get(msg.type) or pb.DataType.Name(msg.type).lower()
        if name == "decimal":
            spelling = f"decimal({msg.precision},{msg.scale})"
        elif name in ("char", "fixed") or (name == "varchar" and msg.length):
            spelling = f"{name}({msg.length})"
        else:
            spelling = name
        return cls(
            name=msg.name, type=spelling, nullable=msg.nullable, comment=msg.comment,
            fields=tuple(cls.from_proto(f) for f in msg.struct_fields),
            element=cls.from_proto(msg.list_element) if msg.HasField("list_element") else None,
            key=cls.from_proto(msg.map_key) if msg.HasField("map_key") else None,
            value=cls.from_proto(msg.map_value) if msg.HasField("map_value") else None,
            properties=dict(msg.properties), id=msg.id,
        )


_TYPE_NAMES = {number: name.lower() for name, number in pb.DataType.items()}


@lru_cache(maxsize=1024)
def _proto_type(canonical: str) -> tuple[pb.DataType, tuple[int, ...]]:
    """The DataType of a canonical type spelling, and its parameters."""
    base, _, rest = canonical.partition("(")
    code = pb.DECIMAL if base == "decimal" else _SIMPLE.get(base, getattr(pb, base.upper(), 0))
    return code, tuple(int(p) for p in re.findall(r"\d+", rest))


def _assign(column: Column, ids: Iterator[int]) -> Column:
    new_id = next(ids)
    return replace(
        column,
        id=new_id,
        fields=tuple(_assign(f, ids) for f in column.fields),
        element=None if column.element is None else _assign(column.element, ids),
        key=None if column.key is None else _assign(column.key, ids),
        value=None if column.value is None else _assign(column.value, ids),
    )


def coerce_columns(columns: Iterable[Column | Mapping[str, Any]]) -> tuple[Column, ...]:
    cols = tuple(Column.coerce(c) for c in columns)
    names = [c.name for c in cols]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidArgumentError(f"duplicate column names: {', '.join(dupes)}")
    if any(not n for n in names):
        raise InvalidArgumentError("every column needs a name")
    return cols


def assign_column_ids(columns: Iterable[Column], start: int) -> tuple[Column, ...]:
    """Give every column (nested ones included) a fresh id counting up from ``start``."""
    counter = iter(range(start, 2**31))
    return tuple(_assign(c, counter) for c in columns)


def max_column_id(columns: Iterable[Column]) -> int:
    return max((c.id for col in columns for c in col.walk()), default=0)


def _schema(columns: Iterable[Column]) -> pb.Schema:
    schema = pb.Schema()
    for column in columns:
        column._fill(schema.columns.add())
    return schema


@dataclass(frozen=True)
class Namespace:
    name: str
    properties: Mapping[str, str] = field(default_factory=dict)
    comment: str = ""
    protected: bool = False

    def to_proto(self) -> pb.NamespaceDef:
        return pb.NamespaceDef(id=self.name, properties=dict(self.properties),
                               comment=self.comment, protected=self.protected)

    @classmethod
    def from_proto(cls, msg: pb.NamespaceDef) -> Namespace:
        return cls(msg.id, dict(msg.properties), msg.comment, msg.protected)


@dataclass(frozen=True)
class Table:
    namespace: str
    name: str
    columns: tuple[Column, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    format: str = "iceberg"
    table_type: str = "external"
    location: str = ""
    format_properties: Mapping[str, str] = field(default_factory=dict)
    comment: str = ""
    protected: bool = False

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def to_proto(self) -> pb.TableDef:
        return pb.TableDef(
            id=f"{self.namespace}.{self.name}", table_type=self.table_type.upper(),
            table_format=self.format.upper(), format_properties=dict(self.format_properties),
            properties=dict(self.properties), schema=_schema(self.columns), comment=self.comment,
            location=self.location, protected=self.protected,
        )

    @classmethod
    def from_proto(cls, msg: pb.TableDef, namespace: str, name: str) -> Table:
        return cls(
            namespace=namespace, name=name,
            columns=tuple(Column.from_proto(c) for c in msg.schema.columns),
            properties=dict(msg.properties), format=msg.table_format.lower(),
            table_type=msg.table_type.lower(), location=msg.location,
            format_properties=dict(msg.format_properties), comment=msg.comment,
            protected=msg.protected,
        )


@dataclass(frozen=True)
class View:
    namespace: str
    name: str
    sql: str
    dialect: str = "ansi"
    columns: tuple[Column, ...] = ()
    referenced_objects: tuple[tuple[str, str], ...] = ()
    default_namespace: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)
    comment: str = ""
    protected: bool = False

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def to_proto(self) -> pb.ViewDef:
        return pb.ViewDef(
            id=f"{self.namespace}.{self.name}", schema=_schema(self.columns), sql=self.sql,
            dialect=self.dialect, default_namespace_name=self.default_namespace,
            referenced_object_full_names=[
                pb.NamespaceObjectFullName(namespace_name=ns, name=n)
                for ns, n in self.referenced_objects
            ],
            properties=dict(self.properties), comment=self.comment, protected=self.protected,
        )

    @classmethod
    def from_proto(cls, msg: pb.ViewDef, namespace: str, name: str) -> View:
        return cls(
            namespace=namespace, name=name, sql=msg.sql, dialect=msg.dialect,
            columns=tuple(Column.from_proto(c) for c in msg.schema.columns),
            referenced_objects=tuple(
                (r.namespace_name, r.name) for r in msg.referenced_object_full_names
            ),
            default_namespace=msg.default_namespace_name, properties=dict(msg.properties),
            comment=msg.comment, protected=msg.protected,
        )


def as_identifier(identifier: str | tuple[str, str] | Iterable[str], name: str | None = None,
                  ) -> tuple[str, str]:
    """``("ns", "t")``, ``"ns.t"`` or ``("ns", name="t")`` -> ``("ns", "t")``."""
    if name is not None:
        if not isinstance(identifier, str):
            raise InvalidArgumentError("give a namespace string together with a name")
        return identifier, name
    if isinstance(identifier, str):
        ns, sep, obj = identifier.rpartition(".")
        if not sep or not ns or not obj:
            raise InvalidArgumentError(
                f"identifier {identifier!r} must be 'namespace.name' or a (namespace, name) pair"
            )
        return ns, obj
    parts = tuple(identifier)
    if len(parts) != 2:
        raise InvalidArgumentError(f"identifier {parts!r} must have two parts")
    return str(parts[0]), str(parts[1])
