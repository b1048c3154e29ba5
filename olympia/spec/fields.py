"""The fields of namespaces, tables and views, described once for every layer above the catalog.

The catalog's dataclasses (:mod:`olympia.catalog.objects`) say what a definition stores; this
module says, per field, what the layers above make of it: the key a spec declares it with and
that key's JSON Schema, the JSON Schema of its value in a plan operation, how two values
compare and show as plan details, whether a spec that leaves it out leaves the catalog's value
alone, and the label the UI shows it under. A spec's keys that no definition stores
(``renamed_from``, an Iceberg table's ``partition_by``...) are described here too, so the
spec's JSON Schema and its canonical key order come from one list.

The stored fields are checked against the dataclasses when this module loads: a field added
to a catalog object and not described here (or the other way round) is an import error, not
a field silently missing from plans, specs or pages. ``make schema``
(:func:`olympia.spec.schema.write_schema`) writes the described keys into
``specs/olympia-spec.schema.json``; a test checks that it agrees.

Just over 400 lines: most of it is the description itself (every key's schema text), and the
questions its readers ask of it are kept next to it, so a field and what follows from it are
read in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import Namespace, Table, View

Definition = Namespace | Table | View
D = TypeVar("D", Namespace, Table, View)
NAMESPACE, TABLE, VIEW = ObjectType.NAMESPACE, ObjectType.TABLE, ObjectType.VIEW
CLASSES: dict[ObjectType, type[Definition]] = {NAMESPACE: Namespace, TABLE: Table, VIEW: View}
KINDS: dict[type[Definition], ObjectType] = {cls: kind for kind, cls in CLASSES.items()}


class Compare(StrEnum):
    """How two values of a field compare, and how a difference shows in a plan."""

    NAME = "name"  # the object's name: identity, never compared
    VALUE = "value"  # equal or not; one detail ``field: before -> after``
    MAP = "map"  # a string map: key by key, one detail ``field.key`` per changed key
    COLUMNS = "columns"  # column by column (olympia.plan.diff, olympia.plan.versiondiff)
    SQL = "sql"  # text; surrounding whitespace is not a difference
    REFERENCES = "references"  # (namespace, name) pairs


# --- JSON Schema pieces of a plan operation's values -----------------------------------------

MAX_TEXT = 1 << 20  # no name, comment or SQL text of a plan is longer than 1 MiB
TEXT: dict[str, Any] = {"type": "string", "maxLength": MAX_TEXT}
NAME: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 4096}
IDENT: dict[str, Any] = {"type": "array", "items": NAME, "minItems": 2, "maxItems": 2}
PROPS: dict[str, Any] = {"type": "object", "additionalProperties": TEXT}
BOOL: dict[str, Any] = {"type": "boolean"}
COLUMNS: dict[str, Any] = {"type": "array", "items": {"$ref": "#/$defs/column"}}

# --- JSON Schema pieces of a spec's keys -------------------------------------------------------

_EXTENSION = {"^x-": {"description": "An extension key: ignored by Olympia (a place for YAML "
                                     "anchors and notes)."}}
_SPEC_NAME: dict[str, Any] = {"$ref": "#/$defs/name"}
_SPEC_PROPS: dict[str, Any] = {"$ref": "#/$defs/properties"}
_TERMS = {"type": "string", "minLength": 1, "maxLength": 1000}


def _protected(kind: str, deleted: str) -> dict[str, Any]:
    return {"type": "boolean", "default": False,
            "description": f"Once applied, the catalog refuses to drop this {kind}, even when "
                           f"its {deleted} is deleted."}


def _renamed_from(text: str) -> dict[str, Any]:
    return {**_SPEC_NAME, "description": text}


@dataclass(frozen=True)
class Field:
    """One field of a namespace, table or view, or one key a spec declares them with.

    Args:
        name: the catalog object's attribute and the keyword of its Transaction calls; for a
            key no definition stores (``stored`` false), the spec key.
        compare: how two values compare and show (:class:`Compare`).
        spec: the JSON Schema of the spec key; None: a spec cannot set it.
        spec_key: the spec's key when it is not ``name``.
        op: the JSON Schema of the value in a plan operation creating the object.
        op_required: a plan operation always writes it, default or not.
        common: every kind has it, and every alteration can change it (properties, comment,
            protection); plan details show common fields before a kind's own.
        replaces: a change of it replaces the object (a table's format and type) or names
            its kind (a view's dialect); a version diff shows it only when it changes.
        kept_when_omitted: a spec that omits it leaves the catalog's value alone.
        iceberg_writes: Iceberg writes it for Iceberg tables: their specs neither declare it
            nor have it written by inspect.
        spec_always: inspect writes it even at its default value.
        read: a spec's value as the object holds it (``str.lower``, ``bool``); None: as read.
        label: the UI's page of the object and ``olympia show`` list it among its facts
            under this label; empty: they lay it out themselves (the fields that came before
            this module) or never show it.
        stored: a field of the catalog's dataclass (else a spec key only).
    """

    name: str
    compare: Compare = Compare.VALUE
    spec: dict[str, Any] | None = None
    spec_key: str = ""
    op: dict[str, Any] | None = None
    op_required: bool = False
    common: bool = False
    replaces: bool = False
    kept_when_omitted: bool = False
    iceberg_writes: bool = False
    spec_always: bool = False
    read: Callable[[Any], Any] | None = None
    label: str = ""
    stored: bool = True

    @property
    def key(self) -> str:
        """The spec's key for it."""
        return self.spec_key or self.name

    def value(self, obj: Definition) -> Any:
        """Its value in ``obj``."""
        return getattr(obj, self.name)

    def normal(self, value: Any) -> Any:
        """``value`` as compared: maps as sorted dicts, columns without ids, SQL stripped."""
        if self.compare == Compare.MAP:
            return dict(sorted(value.items()))
        if self.compare == Compare.COLUMNS:
            return tuple(c.without_ids() for c in value)
        if self.compare == Compare.SQL:
            return value.strip()
        if self.compare == Compare.REFERENCES:
            return tuple(value)
        return value

    def jsonable(self, value: Any) -> Any:
        """``value`` in a plan operation's JSON form."""
        if self.compare == Compare.COLUMNS:
            return [c.to_dict() for c in value]
        if self.compare == Compare.REFERENCES:
            return [list(r) for r in value]
        if self.compare == Compare.MAP:
            return dict(value)
        return value


_COMMON = (
    Field("comment", spec={"type": "string"}, op=TEXT, common=True),
    Field("protected", op=BOOL, common=True, read=bool),
    Field("properties", Compare.MAP, spec=_SPEC_PROPS, op=PROPS, common=True),
)
_COMMENT, _PROTECTED, _PROPERTIES = _COMMON


def _common(kind: str, deleted: str) -> tuple[Field, Field]:
    """Comment and protection, with the spec's words for ``kind``."""
    return _COMMENT, dataclasses.replace(_PROTECTED, spec=_protected(kind, deleted))


# Every kind's fields and spec keys, in the order a spec writes them (``olympia fmt``).
FIELDS: dict[ObjectType, tuple[Field, ...]] = {
    NAMESPACE: (
        Field("name", Compare.NAME, spec={**_SPEC_NAME, "description": "Namespace name."},
              spec_key="namespace"),
        Field("renamed_from", stored=False, spec=_renamed_from(
            "The namespace's previous name: plan a rename (tables and views move with it) "
            "instead of a drop and a create.")),
        *_common("namespace", "file"),
        _PROPERTIES,
        Field("tables", stored=False, spec={
            "type": "object", "description": "Tables of the namespace, by name.",
            "propertyNames": _SPEC_NAME, "additionalProperties": {"$ref": "#/$defs/table"}}),
        Field("views", stored=False, spec={
            "type": "object", "description": "Views of the namespace, by name.",
            "propertyNames": _SPEC_NAME, "additionalProperties": {"$ref": "#/$defs/view"}}),
        Field("manage", stored=False, spec={
            "type": "array", "description": "Glob patterns (fnmatch: *, ?, [abc]) of namespaces "
            "this spec manages although it does not declare them: existing ones are planned as "
            "drops.", "items": {"type": "string", "minLength": 1}}),
    ),
    TABLE: (
        Field("namespace", Compare.NAME),
        Field("name", Compare.NAME),
        Field("renamed_from", stored=False, spec=_renamed_from(
            "The table's previous name in the same namespace: plan a rename instead of a drop "
            "and a create.")),
        *_common("table", "YAML"),
        Field("format", op=NAME, replaces=True, read=str.lower, spec={
            "type": "string", "minLength": 1, "default": "iceberg",
            "description": "Table format: iceberg (default), delta, hudi, parquet, ... "
                           "Changing it replaces the table."}),
        Field("table_type", op=NAME, replaces=True, read=str.lower, spec={
            "enum": ["external", "managed"], "default": "external",
            "description": "Changing it replaces the table."}),
        Field("location", op=TEXT, kept_when_omitted=True, iceberg_writes=True, spec={
                  "type": "string",
                  "description": "Iceberg tables (format iceberg): the table's location, where "
                  "its metadata and data go; when omitted, <namespace location property>/<table> "
                  "or <catalog warehouse property>/<namespace>/<table>. It cannot change once "
                  "the table exists. Other formats: the format-specific location; when "
                  "omitted, the spec leaves the catalog's value alone (engines update it)."}),
        Field("format_properties", Compare.MAP, op=PROPS, kept_when_omitted=True,
              iceberg_writes=True, spec={
                  **_SPEC_PROPS,
                  "description": "Other formats than iceberg: format-specific properties; when "
                  "omitted, the spec leaves the catalog's value alone (engines update them). "
                  "Not allowed for Iceberg tables, whose format properties Iceberg writes."}),
        Field("format_version", stored=False, spec={
            "enum": [1, 2], "description": "Iceberg tables: the Iceberg format version "
            "(default 2). Can be raised, never lowered; when omitted, an existing table keeps "
            "its version."}),
        Field("partition_by", stored=False, spec={
            "type": "array", "description": "Iceberg tables: partition terms on top-level "
            "columns: a column name (identity), identity(c), year(c), month(c), day(c), "
            "hour(c), bucket(N, c), truncate(W, c). Changing it evolves the partition spec "
            "(data written before keeps its layout).", "items": _TERMS}),
        Field("sort_by", stored=False, spec={
            "type": "array", "description": "Iceberg tables: the sort order: terms as in "
            "partition_by, each followed by asc (default) or desc and nulls first or nulls "
            "last (default: first ascending, last descending).", "items": _TERMS}),
        _PROPERTIES,
        Field("columns", Compare.COLUMNS, op=COLUMNS, op_required=True, spec_always=True,
              spec={"type": "array", "items": {"$ref": "#/$defs/column"}}),
    ),
    VIEW: (
        Field("namespace", Compare.NAME),
        Field("name", Compare.NAME),
        Field("renamed_from", stored=False, spec=_renamed_from(
            "The view's previous name in the same namespace: plan a rename instead of a drop "
            "and a create.")),
        *_common("view", "YAML"),
        Field("dialect", op=NAME, replaces=True, spec_always=True,
              spec={"type": "string", "minLength": 1, "default": "ansi"}),
        Field("default_namespace", op={"type": "string", "maxLength": 4096}, spec={
                  "type": "string",
                  "description": "Namespace that unqualified names in the SQL resolve to."}),
        Field("referenced_objects", Compare.REFERENCES, spec_key="references",
              op={"type": "array", "items": IDENT}, spec={
                  "type": "array", "description": "Objects the view reads: 'namespace.name' "
                  "(split at the first dot), or {namespace, name} for namespaces containing "
                  "dots. Each must be declared by the spec (when its namespace is) or exist in "
                  "the catalog.", "items": {"oneOf": [
                      {"type": "string",
                       "pattern": "^[^.\\u0000-\\u0020\\u007f]+\\.[^\\u0000-\\u0020\\u007f]+$"},
                      {"type": "object", "additionalProperties": False,
                       "patternProperties": _EXTENSION, "required": ["namespace", "name"],
                       "properties": {"namespace": _SPEC_NAME, "name": _SPEC_NAME}}]}}),
        _PROPERTIES,
        Field("columns", Compare.COLUMNS, op=COLUMNS, spec={
            "type": "array", "description": "The view's declared output columns.",
            "items": {"$ref": "#/$defs/field"}}),
        Field("sql", Compare.SQL, op=TEXT, op_required=True, spec_always=True,
              read=str.strip, spec={"type": "string", "minLength": 1,
                                    "description": "The view's query text."}),
    ),
}


def check_described(described: Mapping[ObjectType, tuple[Field, ...]]) -> None:
    """Every field of the catalog's dataclasses described once, nothing described as
    stored that they do not have.

    Raises:
        TypeError: naming the kind, the fields described and the fields it has.
    """
    for kind, cls in CLASSES.items():
        stored = [f.name for f in described[kind] if f.stored]
        declared = [f.name for f in dataclasses.fields(cls)]
        if sorted(stored) != sorted(declared):
            raise TypeError(f"olympia.spec.fields describes {kind.label} fields {stored}, but "
                            f"{cls.__name__} has {declared}: describe every field once")


check_described(FIELDS)


def stored(kind: ObjectType) -> tuple[Field, ...]:
    """The fields a definition of ``kind`` stores (its name too), in spec order."""
    return tuple(f for f in FIELDS[kind] if f.stored)


def definition(kind: ObjectType) -> tuple[Field, ...]:
    """The fields of a definition besides its name, in the order of its dataclass (the
    order a plan operation writes them in)."""
    by_name = {f.name: f for f in stored(kind)}
    return tuple(by_name[f.name] for f in dataclasses.fields(CLASSES[kind])
                 if by_name[f.name].compare != Compare.NAME)


def values(kind: ObjectType) -> tuple[Field, ...]:
    """The plain-valued fields, the common ones (comment, protection) first."""
    plain = [f for f in stored(kind) if f.compare == Compare.VALUE]
    return (*[f for f in plain if f.common], *[f for f in plain if not f.common])


def maps(kind: ObjectType) -> tuple[Field, ...]:
    """The string-map fields, the common one (properties) first."""
    found = [f for f in stored(kind) if f.compare == Compare.MAP]
    return (*[f for f in found if f.common], *[f for f in found if not f.common])


def kept_when_omitted(kind: ObjectType) -> tuple[Field, ...]:
    """The fields a spec that omits them leaves alone."""
    return tuple(f for f in stored(kind) if f.kept_when_omitted)


def alterable(kind: ObjectType) -> tuple[Field, ...]:
    """The plain and map fields of ``kind`` an alteration sets to a whole new value: its
    own ones (the common ones every alteration changes its own way), except those whose
    change replaces the object."""
    return tuple(f for f in stored(kind) if f.compare in (Compare.VALUE, Compare.MAP)
                 and not f.common and not f.replaces)


def olympia_only(kind: ObjectType) -> tuple[Field, ...]:
    """The alterable fields of an Iceberg table that Olympia keeps and Iceberg does not
    write (set on the definition after Iceberg's commit)."""
    return tuple(f for f in alterable(kind) if not f.iceberg_writes)


def facts(obj: Definition) -> list[tuple[str, str]]:
    """The ``(label, text)`` facts of ``obj``'s labelled fields, which the UI's pages and
    ``olympia show`` list without laying each out; maps as ``key=value, ...``."""
    out = []
    for f in stored(kind_of(obj)):
        if f.label:
            value = f.value(obj)
            out.append((f.label, ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
                        if f.compare == Compare.MAP else str(value)))
    return out


def spec_keys(kind: ObjectType) -> tuple[str, ...]:
    """The keys a spec declares ``kind`` with, in canonical order."""
    return tuple(f.key for f in FIELDS[kind] if f.spec is not None)


def spec_schema(kind: ObjectType) -> dict[str, Any]:
    """The JSON Schema ``properties`` of a spec's ``kind`` (for a namespace: the document's)."""
    return {f.key: f.spec for f in FIELDS[kind] if f.spec is not None}


def op_schema(kind: ObjectType) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each field of a plan operation giving ``kind`` its definition."""
    return {f.name: f.op for f in definition(kind) if f.op is not None}


def op_required(kind: ObjectType) -> tuple[str, ...]:
    return tuple(f.name for f in definition(kind) if f.op_required)


def arguments(obj: Definition) -> dict[str, Any]:
    """The keyword arguments of the Transaction call creating ``obj`` (its name aside)."""
    return {f.name: f.value(obj) for f in definition(kind_of(obj))}


def normalized(obj: D) -> D:
    """``obj`` as a plan declares it: column ids cleared, maps sorted."""
    return dataclasses.replace(obj, **{f.name: f.normal(f.value(obj)) for f in definition(
        kind_of(obj)) if f.compare in (Compare.MAP, Compare.COLUMNS)})


def comparable(obj: Definition) -> tuple[Any, ...]:
    """Everything ``obj`` defines besides its name, normalised: equal when nothing differs."""
    return tuple(f.normal(f.value(obj)) for f in definition(kind_of(obj)))


def to_json(obj: Definition) -> dict[str, Any]:
    """The definition's fields in a plan operation: required ones and those not at their
    default."""
    out = {}
    for f in definition(kind_of(obj)):
        value = f.value(obj)
        if f.op_required or value != default(obj, f):
            out[f.name] = f.jsonable(value)
    return out


def build(cls: type[D], key: tuple[str, ...], data: Mapping[str, Any]) -> D:
    """A ``cls`` (Namespace, Table or View) named ``key`` (``(namespace,)`` or
    ``(namespace, name)``) with the field values ``data`` (typed as the dataclass holds
    them; the others at their defaults)."""
    names = [f.name for f in stored(KINDS[cls]) if f.compare == Compare.NAME]
    named: dict[str, Any] = dict(zip(names, key, strict=True))
    return cls(**named, **data)


def default(obj: Definition, f: Field) -> Any:
    """The value ``f`` has in a new definition of ``obj``'s kind."""
    spec = next(d for d in dataclasses.fields(obj) if d.name == f.name)
    return spec.default_factory() if callable(spec.default_factory) else spec.default


def empty_like(obj: Definition, keep: bool = False) -> Definition:
    """A definition of ``obj``'s kind and name with default values (``keep``: the fields
    that replace or name its kind kept), what a created object is compared with."""
    kind = kind_of(obj)
    args = {f.name: f.value(obj) for f in stored(kind)
            if f.compare == Compare.NAME or (keep and f.replaces)}
    if kind == VIEW:
        args.setdefault("sql", "")
    return CLASSES[kind](**args)


def kind_of(obj: Definition) -> ObjectType:
    return KINDS[type(obj)]
