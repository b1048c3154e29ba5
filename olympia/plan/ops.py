"""Typed plan operations: one frozen class per Transaction call a plan may hold.

An operation serialises as a flat JSON object whose ``op`` field names its class (the
discriminator); each class carries the JSON Schema of its fields, which
:mod:`olympia.plan.opjson` validates saved operations against. Applying one calls its
Transaction method explicitly; nothing is looked up by name.

Over 400 lines: it is a catalog of small classes, one per operation, each with its schema next
to it; splitting it would separate an operation from its saved form.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.exceptions import CatalogError
from olympia.iceberg import lacks_pyiceberg
from olympia.spec import fields as described

if TYPE_CHECKING:
    from olympia.catalog.catalog import Catalog
    from olympia.catalog.transaction import Transaction

Ident = tuple[str, str]  # (namespace, name)


class Action(StrEnum):
    """What a change does to its object."""

    CREATE = "create"
    UPDATE = "update"
    RENAME = "rename"
    REPLACE = "replace"
    DROP = "drop"


class Kind(StrEnum):
    """The kind of object a change is about."""

    NAMESPACE = "namespace"
    TABLE = "table"
    VIEW = "view"


# --- JSON Schema pieces ------------------------------------------------------------------------

_TEXT, _NAME, _IDENT, _PROPS, _BOOL = (described.TEXT, described.NAME, described.IDENT,
                                       described.PROPS, described.BOOL)
_NAMES: dict[str, Any] = {"type": "array", "items": _NAME}
_COLUMN: dict[str, Any] = {"$ref": "#/$defs/column"}
_COLUMNS = described.COLUMNS
COLUMN_DEF: dict[str, Any] = {
    "type": "object", "required": ["type"], "additionalProperties": False,
    "properties": {"name": _NAME, "type": {"type": "string", "maxLength": 200},
                   "nullable": _BOOL, "comment": _TEXT, "fields": _COLUMNS,
                   "element": _COLUMN, "key": _COLUMN, "value": _COLUMN,
                   "properties": _PROPS, "id": {"type": "integer", "minimum": 0}},
}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [{"type": "null"}, schema]}


def _settable_schema(settable: tuple[described.Field, ...]) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each field an operation sets whole; null: unchanged."""
    return {f.name: _nullable(f.op or {}) for f in settable}


# --- operations ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Op:
    """Base of every operation: its JSON form and the action type the catalog records."""

    op: str
    action_type: ClassVar[str]
    schema: ClassVar[dict[str, dict[str, Any]]]  # field -> JSON Schema of its value
    required: ClassVar[tuple[str, ...]]

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Op:
        """The operation of its JSON form's values (validated and typed, ``op`` aside)."""
        return cls(**values)

    def apply(self, txn: Transaction) -> None:
        """Stage this operation in ``txn``."""
        raise NotImplementedError

    def namespaces(self) -> tuple[str, ...]:
        """The namespaces this operation changes (a rename: the old and the new one)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``op`` plus every field that differs from its default."""
        out: dict[str, Any] = {"op": self.op}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("op", "new_values"):
                continue
            if f.name == "definition":  # its fields, as described (olympia.spec.fields)
                out.update(described.to_json(value))
            elif f.name in self.required or value != _default(f):
                out[f.name] = _jsonable(value)
        if isinstance(self, SetsFields):  # last, in the description's order
            out.update({f.name: f.jsonable(self.new_values[f.name]) for f in self.settable
                        if f.name in self.new_values})
        return out


def _default(f: Any) -> Any:
    return f.default_factory() if callable(f.default_factory) else f.default


def _jsonable(value: Any) -> Any:
    if isinstance(value, Column):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


NAMESPACE, TABLE, VIEW = ObjectType.NAMESPACE, ObjectType.TABLE, ObjectType.VIEW


@dataclass(frozen=True, kw_only=True)
class SetsFields(Op):
    """An operation that sets whole new values of described fields (``new_values``: field
    name -> value, for the fields in ``settable``), written flat and last in the JSON form;
    a field in none of an operation's own keywords is one of these."""

    new_values: Mapping[str, Any] = field(default_factory=dict)
    settable: ClassVar[tuple[described.Field, ...]] = ()

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Op:
        names = {f.name for f in cls.settable}
        new = {k: values.pop(k) for k in list(values) if k in names}
        return cls(**values, new_values={k: v for k, v in new.items() if v is not None})


@dataclass(frozen=True, kw_only=True)
class NamespaceOp(Op):
    namespace: str

    def namespaces(self) -> tuple[str, ...]:
        return (self.namespace,)


@dataclass(frozen=True, kw_only=True)
class ObjectOp(Op):
    identifier: Ident

    def namespaces(self) -> tuple[str, ...]:
        return (self.identifier[0],)


@dataclass(frozen=True, kw_only=True)
class CreateNamespace(NamespaceOp):
    """Create a namespace with its whole ``definition`` (its fields are those
    :mod:`olympia.spec.fields` describes, written flat in the JSON form)."""

    op: Literal["create_namespace"] = "create_namespace"
    definition: Namespace
    action_type = "NAMESPACE_CREATE"
    schema = {"namespace": _NAME, **described.op_schema(NAMESPACE)}
    required = ("namespace", *described.op_required(NAMESPACE))

    @classmethod
    def of(cls, namespace: Namespace) -> CreateNamespace:
        """The operation creating ``namespace`` as it is."""
        return cls(namespace=namespace.name, definition=described.normalized(namespace))

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Op:
        name = values.pop("namespace")
        return cls(namespace=name, definition=described.build(Namespace, (name,), values))

    def apply(self, txn: Transaction) -> None:
        txn.create_namespace(self.namespace, **described.arguments(self.definition))


@dataclass(frozen=True, kw_only=True)
class AlterNamespace(NamespaceOp, SetsFields):
    op: Literal["alter_namespace"] = "alter_namespace"
    set_properties: Mapping[str, str] = field(default_factory=dict)
    unset_properties: tuple[str, ...] = ()
    comment: str | None = None
    protected: bool | None = None
    action_type = "NAMESPACE_ALTER"
    settable = described.alterable(NAMESPACE)
    schema = {"namespace": _NAME, "set_properties": _PROPS, "unset_properties": _NAMES,
              "comment": _nullable(_TEXT), "protected": _nullable(_BOOL),
              **_settable_schema(settable)}
    required = ("namespace",)

    def apply(self, txn: Transaction) -> None:
        txn.alter_namespace(self.namespace, self.set_properties, self.unset_properties,
                            self.comment, self.protected, **self.new_values)


@dataclass(frozen=True, kw_only=True)
class RenameNamespace(NamespaceOp):
    op: Literal["rename_namespace"] = "rename_namespace"
    new_name: str
    action_type = "NAMESPACE_RENAME"
    schema = {"namespace": _NAME, "new_name": _NAME}
    required = ("namespace", "new_name")

    def apply(self, txn: Transaction) -> None:
        txn.rename_namespace(self.namespace, self.new_name)

    def namespaces(self) -> tuple[str, ...]:
        return (self.namespace, self.new_name)


@dataclass(frozen=True, kw_only=True)
class DropNamespace(NamespaceOp):
    op: Literal["drop_namespace"] = "drop_namespace"
    action_type = "NAMESPACE_DROP"
    schema = {"namespace": _NAME}
    required = ("namespace",)

    def apply(self, txn: Transaction) -> None:
        txn.drop_namespace(self.namespace)  # never cascades: a plan drops the contents first


@dataclass(frozen=True, kw_only=True)
class CreateTable(ObjectOp):
    """Create a table with its whole ``definition`` (its fields are those
    :mod:`olympia.spec.fields` describes, written flat in the JSON form)."""

    op: Literal["create_table"] = "create_table"
    definition: Table
    action_type = "TABLE_CREATE"
    schema = {"identifier": _IDENT, **described.op_schema(TABLE)}
    required = ("identifier", *described.op_required(TABLE))

    @classmethod
    def of(cls, table: Table) -> CreateTable:
        """The operation creating ``table`` as it is (column ids aside)."""
        return cls(identifier=table.identifier, definition=described.normalized(table))

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Op:
        identifier = values.pop("identifier")
        return cls(identifier=identifier, definition=described.build(Table, identifier, values))

    def apply(self, txn: Transaction) -> None:
        txn.create_table(self.identifier, **described.arguments(self.definition))


@dataclass(frozen=True, kw_only=True)
class TableChanges(ObjectOp, SetsFields):
    """What every table alteration can change: properties, columns, comment, protection.

    Column updates are keyed by the column's new name."""

    set_properties: Mapping[str, str] = field(default_factory=dict)
    unset_properties: tuple[str, ...] = ()
    add_columns: tuple[Column, ...] = ()
    remove_columns: tuple[str, ...] = ()
    rename_columns: Mapping[str, str] = field(default_factory=dict)
    update_columns: Mapping[str, Column] = field(default_factory=dict)
    column_order: tuple[str, ...] | None = None
    comment: str | None = None
    protected: bool | None = None
    action_type = "TABLE_ALTER"
    schema = {"identifier": _IDENT, "set_properties": _PROPS, "unset_properties": _NAMES,
              "add_columns": _COLUMNS, "remove_columns": _NAMES,
              "rename_columns": {"type": "object", "additionalProperties": _NAME},
              "update_columns": {"type": "object", "additionalProperties": _COLUMN},
              "column_order": _nullable(_NAMES), "comment": _nullable(_TEXT),
              "protected": _nullable(_BOOL)}
    required = ("identifier",)


@dataclass(frozen=True, kw_only=True)
class AlterTable(TableChanges):
    """An alteration of the Olympia definition itself (tables of formats other than
    Iceberg, and Iceberg tables declared without metadata yet); ``new_values``: the whole
    new values of the table's own fields (:func:`olympia.spec.fields.alterable`: location,
    format properties)."""

    op: Literal["alter_table"] = "alter_table"
    settable = described.alterable(TABLE)
    schema = {**TableChanges.schema, **_settable_schema(settable)}

    def apply(self, txn: Transaction) -> None:
        txn.alter_table(self.identifier, set_properties=self.set_properties,
                        unset_properties=self.unset_properties, add_columns=self.add_columns,
                        remove_columns=self.remove_columns, rename_columns=self.rename_columns,
                        update_columns=self.update_columns, column_order=self.column_order,
                        comment=self.comment, protected=self.protected, **self.new_values)


# Iceberg operations: partition and sort terms as written in specs (olympia.spec.iceberg)
_TERMS: dict[str, Any] = {"type": "array", "items": {"type": "string", "minLength": 1,
                                                       "maxLength": 1000}}
_FORMAT_VERSION: dict[str, Any] = {"enum": [1, 2]}


@dataclass(frozen=True, kw_only=True)
class CreateIcebergTable(ObjectOp, SetsFields):
    """Create a real Iceberg table (metadata file and definition) through pyiceberg; an
    Iceberg table declared without metadata yet becomes one. ``location`` empty: derived
    from the namespace's ``location`` property or the catalog's ``warehouse``.
    ``new_values``: the fields only Olympia keeps beyond comment, protection and table type
    (:func:`olympia.spec.fields.olympia_only`)."""

    op: Literal["create_iceberg_table"] = "create_iceberg_table"
    columns: tuple[Column, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    table_type: str = "external"
    location: str = ""
    partition_by: tuple[str, ...] = ()
    sort_by: tuple[str, ...] = ()
    format_version: int = 2
    comment: str = ""
    protected: bool = False
    action_type = "TABLE_CREATE"
    schema = {"identifier": _IDENT, "columns": _COLUMNS, "properties": _PROPS,
              "table_type": _NAME, "location": _TEXT, "partition_by": _TERMS,
              "sort_by": _TERMS, "format_version": _FORMAT_VERSION, "comment": _TEXT,
              "protected": _BOOL, **_settable_schema(described.olympia_only(TABLE))}
    required = ("identifier", "columns")
    settable = described.olympia_only(TABLE)

    def apply(self, txn: Transaction) -> None:
        staging = _iceberg_staging(txn, self)
        _iceberg_apply().create_table(txn, staging.catalog, self, dry_run=staging.dry_run)


@dataclass(frozen=True, kw_only=True)
class AlterIcebergTable(TableChanges):
    """Evolve a real Iceberg table through pyiceberg (schema, partition spec, sort order,
    properties, format version) in the transaction; comment, protection and
    ``new_values`` (:func:`olympia.spec.fields.olympia_only`) are Olympia's.
    ``partition_by``/``sort_by`` None: unchanged."""

    op: Literal["alter_iceberg_table"] = "alter_iceberg_table"
    partition_by: tuple[str, ...] | None = None
    sort_by: tuple[str, ...] | None = None
    format_version: int | None = None
    settable = described.olympia_only(TABLE)
    schema = {**TableChanges.schema, "partition_by": _nullable(_TERMS),
              "sort_by": _nullable(_TERMS), "format_version": _nullable(_FORMAT_VERSION),
              **_settable_schema(settable)}

    def apply(self, txn: Transaction) -> None:
        staging = _iceberg_staging(txn, self)
        _iceberg_apply().alter_table(txn, staging.catalog, self, dry_run=staging.dry_run)


@dataclass(frozen=True)
class IcebergStaging:
    """Where a transaction's Iceberg operations go: the catalog it stages in and whether
    they only stage definitions and write no metadata file (plans staged to be
    classified)."""

    catalog: Catalog
    dry_run: bool


_STAGING: weakref.WeakKeyDictionary[Transaction, IcebergStaging] = weakref.WeakKeyDictionary()


def stage_iceberg(txn: Transaction, catalog: Catalog, dry_run: bool) -> None:
    """Let Iceberg operations stage in ``txn``, a transaction of ``catalog``."""
    _STAGING[txn] = IcebergStaging(catalog, dry_run)


def _iceberg_apply() -> Any:
    """olympia.plan.iceberg_apply, which needs pyiceberg (only Iceberg tables do).

    Raises:
        CatalogError: pyiceberg is not installed.
    """
    try:
        from olympia.plan import iceberg_apply
    except ModuleNotFoundError as exc:
        if lacks_pyiceberg(exc):
            raise CatalogError("Iceberg tables need pyiceberg: pip install "
                               "'olympia-catalog[iceberg]'") from None
        raise
    return iceberg_apply


def _iceberg_staging(txn: Transaction, op: Op) -> IcebergStaging:
    staging = _STAGING.get(txn)
    if staging is None:
        raise CatalogError(f"{op.op} needs a transaction prepared for Iceberg operations "
                           "(olympia.plan.ops.stage_iceberg)")
    return staging


@dataclass(frozen=True, kw_only=True)
class RenameTable(ObjectOp):
    op: Literal["rename_table"] = "rename_table"
    new_name: str
    action_type = "TABLE_RENAME"
    schema = {"identifier": _IDENT, "new_name": _NAME}
    required = ("identifier", "new_name")

    def apply(self, txn: Transaction) -> None:
        txn.rename_table(self.identifier, self.new_name)


@dataclass(frozen=True, kw_only=True)
class DropTable(ObjectOp):
    op: Literal["drop_table"] = "drop_table"
    action_type = "TABLE_DROP"
    schema = {"identifier": _IDENT}
    required = ("identifier",)

    def apply(self, txn: Transaction) -> None:
        txn.drop_table(self.identifier)


@dataclass(frozen=True, kw_only=True)
class ViewOp(ObjectOp):
    """The whole ``definition`` of a view, as created or replaced (its fields are those
    :mod:`olympia.spec.fields` describes, written flat in the JSON form)."""

    definition: View
    schema = {"identifier": _IDENT, **described.op_schema(VIEW)}
    required = ("identifier", *described.op_required(VIEW))

    @classmethod
    def of(cls, view: View) -> Self:
        """The operation giving ``view`` its whole definition as it is (column ids aside)."""
        return cls._of(view.identifier, described.normalized(view))

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Op:
        identifier = values.pop("identifier")
        return cls._of(identifier, described.build(View, identifier, values))

    @classmethod
    def _of(cls, identifier: Ident, view: View) -> Self:
        args: dict[str, Any] = {"identifier": identifier, "definition": view}
        return cls(**args)  # a subclass: its ``op`` has a default


@dataclass(frozen=True, kw_only=True)
class CreateView(ViewOp):
    op: Literal["create_view"] = "create_view"
    action_type = "VIEW_CREATE"

    def apply(self, txn: Transaction) -> None:
        txn.create_view(self.identifier, **described.arguments(self.definition))


@dataclass(frozen=True, kw_only=True)
class ReplaceView(ViewOp):
    op: Literal["replace_view"] = "replace_view"
    action_type = "VIEW_REPLACE"

    def apply(self, txn: Transaction) -> None:
        txn.replace_view(self.identifier, **described.arguments(self.definition))


@dataclass(frozen=True, kw_only=True)
class RenameView(ObjectOp):
    op: Literal["rename_view"] = "rename_view"
    new_name: str
    action_type = "VIEW_RENAME"
    schema = {"identifier": _IDENT, "new_name": _NAME}
    required = ("identifier", "new_name")

    def apply(self, txn: Transaction) -> None:
        txn.rename_view(self.identifier, self.new_name)


@dataclass(frozen=True, kw_only=True)
class DropView(ObjectOp):
    op: Literal["drop_view"] = "drop_view"
    action_type = "VIEW_DROP"
    schema = {"identifier": _IDENT}
    required = ("identifier",)

    def apply(self, txn: Transaction) -> None:
        txn.drop_view(self.identifier)


OP_CLASSES: dict[str, type[Op]] = {
    cls.__dataclass_fields__["op"].default: cls  # type: ignore[misc]
    for cls in (CreateNamespace, AlterNamespace, RenameNamespace, DropNamespace, CreateTable,
                AlterTable, CreateIcebergTable, AlterIcebergTable, RenameTable, DropTable,
                CreateView, ReplaceView, RenameView, DropView)
}
