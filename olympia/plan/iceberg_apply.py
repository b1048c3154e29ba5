"""Catalog-as-code on real Iceberg tables: ``olympia apply`` creating and evolving them.

The plan layer's Iceberg operations call in here with the Olympia transaction the whole apply
stages in. Everything goes through pyiceberg (``create_table``, ``update_schema``,
``update_spec``, ``update_sort_order``, properties, ``upgrade_table_version``) on an
:class:`OlympiaCatalog` bound to that transaction, so one apply stays ONE Olympia version and
the metadata files are pyiceberg's own. A dry run (staging a plan to classify it) computes
the same metadata and definitions but writes no file.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import NoSuchIcebergTableError, ValidationError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Transaction as IcebergTransaction
from pyiceberg.table.sorting import (
    UNSORTED_SORT_ORDER,
    NullOrder,
    SortDirection,
    SortField,
    SortOrder,
)
from pyiceberg.table.update import (
    AddSortOrderUpdate,
    AssertDefaultSortOrderId,
    SetDefaultSortOrderUpdate,
    TableUpdate,
)
from pyiceberg.table.update.schema import UpdateSchema
from pyiceberg.transforms import parse_transform

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.catalog.objects import Column, assign_column_ids
from olympia.catalog.transaction import Transaction
from olympia.exceptions import InvalidArgumentError, OlympiaError
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.iceberg.typemap import column_from_field, iceberg_type, schema_from_columns
from olympia.spec.iceberg import SortTerm, Term, as_stored

if TYPE_CHECKING:
    from olympia.plan.ops import AlterIcebergTable, CreateIcebergTable

FIRST_PARTITION_FIELD_ID = 1000  # Iceberg's first partition field id
_BOUND: weakref.WeakKeyDictionary[Transaction, OlympiaCatalog] = weakref.WeakKeyDictionary()


def bound(txn: Transaction, store: OlympiaStore, dry_run: bool = False) -> OlympiaCatalog:
    """The OlympiaCatalog staging in ``txn``, a transaction of ``store`` (one per
    transaction)."""
    catalog = _BOUND.get(txn)
    if catalog is None:
        catalog = OlympiaCatalog.over(store, dry_run=dry_run).bound_to(txn)
        _BOUND[txn] = catalog
    return catalog


def create_table(txn: Transaction, store: OlympiaStore, op: CreateIcebergTable,
                 dry_run: bool = False) -> None:
    """Create the Iceberg table ``op`` declares in ``txn``.

    Raises:
        InvalidArgumentError: a column type Iceberg cannot hold, a malformed term, or no
            location (none declared, no namespace ``location``, no catalog ``warehouse``).
        TableLocationError: the location derived from its name would leave the warehouse.
        LocationInUseError: its location overlaps another live table's.
    """
    catalog = bound(txn, store, dry_run)
    ns, name = op.identifier
    columns = assign_column_ids(op.columns, 1)
    schema = schema_from_columns(columns)
    by_name = {c.name: c for c in columns}
    terms = [Term.parse(t) for t in op.partition_by]
    sorts = [SortTerm.parse(t) for t in op.sort_by]
    for term in [*terms, *(s.term for s in sorts)]:
        term.check(by_name)
    spec = PartitionSpec(*(
        PartitionField(by_name[t.column].id, FIRST_PARTITION_FIELD_ID + i,
                       parse_transform(t.transform), _field_name(t))
        for i, t in enumerate(terms)))
    order = SortOrder(*(_sort_field(s, by_name) for s in sorts)) if sorts else UNSORTED_SORT_ORDER
    properties = {**op.properties, "format-version": str(op.format_version)}
    try:
        created = catalog.create_table((ns, name), schema, op.location or None, spec, order,
                                       properties)
    except OlympiaError:  # names the table already (its location, its metadata file)
        raise
    except (ValidationError, ValueError) as exc:  # what pyiceberg refuses, named
        if "No default path" in str(exc):
            raise InvalidArgumentError(
                f"table {ns}.{name}: no location for the Iceberg table: declare its location, "
                f"a location property on namespace {ns}, or create the catalog with a "
                "warehouse (olympia init --property warehouse=URI)") from None
        raise InvalidArgumentError(f"table {ns}.{name}: Iceberg refuses it: {exc}") from None
    _olympia_side(txn, op.identifier, created.metadata_location, op.comment, op.protected,
                  op.table_type, op.new_values)


def alter_table(txn: Transaction, store: OlympiaStore, op: AlterIcebergTable,
                dry_run: bool = False) -> None:
    """Evolve the Iceberg table ``op`` names as it says, in ``txn``: one pyiceberg
    transaction (schema, partition spec, sort order, properties, format version), then the
    Olympia-only comment and protection.

    Raises:
        InvalidArgumentError: the table is not an Iceberg table with metadata, or a term
            does not fit its columns.
        IcebergMetadataError: its metadata file is missing or unreadable.
    """
    catalog = bound(txn, store, dry_run)
    try:
        table = catalog.load_table(op.identifier)
    except NoSuchIcebergTableError as exc:
        raise InvalidArgumentError(str(exc)) from None
    ns, name = op.identifier
    try:
        with table.transaction() as itx:
            _evolve(itx, op)
    except (ValidationError, ValueError) as exc:  # what pyiceberg refuses, named
        raise InvalidArgumentError(f"table {ns}.{name}: Iceberg refuses the change: "
                                   f"{exc}") from None
    location = catalog._staging().load_table(op.identifier).location
    _olympia_side(txn, op.identifier, location, op.comment, op.protected, None, op.new_values)


def _evolve(itx: IcebergTransaction, op: AlterIcebergTable) -> None:
    """Stage ``op`` in one pyiceberg transaction: format version, properties; partition
    fields and sort order no longer declared, or on columns about to go, before the schema
    changes; then the declared partition fields and sort order."""
    if op.format_version is not None and op.format_version > itx.table_metadata.format_version:
        itx.upgrade_table_version(op.format_version)  # type: ignore[arg-type]
    if op.set_properties:
        itx.set_properties(dict(op.set_properties))
    if op.unset_properties:
        itx.remove_properties(*op.unset_properties)
    schema = itx.table_metadata.schema()
    going = {*op.remove_columns, *_replaced(schema, op)}
    current = _partition_terms(itx, op.rename_columns)
    wanted = list(current) if op.partition_by is None else [Term.parse(t)
                                                            for t in op.partition_by]
    gone = [field for term, field in current.items()
            if term not in wanted or term.column in going]
    if gone:
        with itx.update_spec() as update:
            for field in gone:
                update.remove_field(field)
    order = _sort_terms(itx, op.rename_columns) if op.sort_by is None else [
        SortTerm.parse(t) for t in op.sort_by]
    resort = op.sort_by is not None or any(s.term.column in going for s in order)
    if resort and going:  # unsorted until the schema changed: the order may name a column
        _unsort(itx)
    _evolve_schema(itx, schema, op)
    added = [term for term in wanted if term not in _partition_terms(itx, {})]
    if added:
        with itx.update_spec() as update:
            for term in added:
                update.add_field(term.column, parse_transform(term.transform),
                                 _field_name(term))
    if resort and not order:
        _unsort(itx)
    elif resort:
        with itx.update_sort_order() as sorting:
            for s in order:
                add = sorting.desc if s.descending else sorting.asc
                add(s.term.column, parse_transform(s.term.transform),
                    NullOrder.NULLS_FIRST if s.nulls_first else NullOrder.NULLS_LAST)


def _unsort(itx: IcebergTransaction) -> None:
    """Make the unsorted order (id 0) the default. pyiceberg 0.12's ``update_sort_order``
    cannot: it adds the empty order and then asks for the highest order id, not 0."""
    metadata = itx.table_metadata
    if metadata.default_sort_order_id == 0:
        return
    updates: tuple[TableUpdate, ...] = (
        SetDefaultSortOrderUpdate(sort_order_id=0),)  # type: ignore[call-arg]
    if metadata.sort_order_by_id(0) is None:
        updates = (AddSortOrderUpdate(sort_order=UNSORTED_SORT_ORDER),  # type: ignore[call-arg]
                   *updates)
    itx._apply(updates, (AssertDefaultSortOrderId(  # type: ignore[call-arg]
        default_sort_order_id=metadata.default_sort_order_id),))


def _replaced(schema: Schema, op: AlterIcebergTable) -> list[str]:
    """The updated columns (new names) whose type Iceberg cannot promote in place."""
    old_of = {new: old for old, new in op.rename_columns.items()}
    return [name for name, col in op.update_columns.items()
            if not _in_place(_current(schema, old_of.get(name, name)), as_stored(col))]


def _term(transform: str, column: str) -> Term:
    function, _, width = transform.partition("[")
    return Term(function, column, int(width.rstrip("]")) if width else None)


def _partition_terms(itx: IcebergTransaction, renamed: Mapping[str, str]) -> dict[Term, str]:
    """The current partition fields as terms (column names after ``renamed``), with their
    field names; fields Iceberg voided are left out."""
    metadata = itx.table_metadata
    names = {f.field_id: renamed.get(f.name, f.name) for f in metadata.schema().fields}
    return {_term(str(f.transform), names[f.source_id]): f.name for f in metadata.spec().fields
            if str(f.transform) != "void" and f.source_id in names}


def _sort_terms(itx: IcebergTransaction, renamed: Mapping[str, str]) -> list[SortTerm]:
    """The current default sort order as terms (column names after ``renamed``)."""
    metadata = itx.table_metadata
    names = {f.field_id: renamed.get(f.name, f.name) for f in metadata.schema().fields}
    order = metadata.sort_order_by_id(metadata.default_sort_order_id)
    return [SortTerm(_term(str(f.transform), names[f.source_id]),
                     f.direction == SortDirection.DESC, f.null_order == NullOrder.NULLS_FIRST)
            for f in (order.fields if order else []) if f.source_id in names]


def _evolve_schema(itx: IcebergTransaction, schema: Schema, op: AlterIcebergTable) -> None:
    """Renames (keeping field ids), removals, updates in place where Iceberg can promote the
    type; a column whose type it cannot promote is replaced (the gate has made that a
    destructive change); then additions and the column order."""
    old_of = {new: old for old, new in op.rename_columns.items()}
    updates = {name: (_current(schema, old_of.get(name, name)), as_stored(col))
               for name, col in op.update_columns.items()}
    replaced = _replaced(schema, op)
    if op.rename_columns or op.remove_columns or updates:
        with itx.update_schema(allow_incompatible_changes=True) as update:
            for old, new in op.rename_columns.items():
                if new not in replaced:
                    update.rename_column(old, new)
            for name in (*op.remove_columns, *(old_of.get(n, n) for n in replaced)):
                update.delete_column(name)
            for name, (before, after) in updates.items():
                if name not in replaced:
                    _update(update, (old_of.get(name, name),), before, after)
    added = [*(op.update_columns[n] for n in replaced), *op.add_columns]
    if added or op.column_order is not None:
        with itx.update_schema(allow_incompatible_changes=True) as update:
            for col in added:
                update.add_column(col.name, iceberg_type(_with_ids(col)), col.comment or None,
                                  required=not col.nullable)
            order = list(op.column_order or [])
            if not order and replaced:  # a replaced column keeps its place
                order = [op.rename_columns.get(f.name, f.name) for f in schema.fields
                         if f.name not in op.remove_columns]
            for i, name in enumerate(order):
                if i == 0:
                    update.move_first(name)
                else:
                    update.move_after(name, order[i - 1])


def _current(schema: Schema, name: str) -> Column:
    return column_from_field(schema.find_field(name))


_PROMOTIONS = {("int4", "int8"), ("float4", "float8")}


def _in_place(before: Column, after: Column) -> bool:
    """Whether Iceberg evolves stored column ``before`` into ``after`` keeping its field id:
    the same type or a promotion (int -> long, float -> double, more decimal precision at
    the same scale), nested parts likewise, struct fields added or removed."""
    if before.type != after.type and (before.type, after.type) not in _PROMOTIONS:
        if not (before.type.startswith("decimal(") and after.type.startswith("decimal(")):
            return False
        (p1, s1), (p2, s2) = (map(int, t[8:-1].split(",")) for t in (before.type, after.type))
        if s1 != s2 or p2 < p1:
            return False
    old_fields = {f.name: f for f in before.fields}
    if any(f.name in old_fields and not _in_place(old_fields[f.name], f) for f in after.fields):
        return False
    return all(getattr(before, p) is None or getattr(after, p) is None
               or _in_place(getattr(before, p), getattr(after, p))
               for p in ("element", "key", "value"))


def _update(update: UpdateSchema, path: tuple[str, ...], before: Column,
            after: Column) -> None:
    """Change one field in place: type (primitive widening), nullability, doc; struct fields
    added, removed and changed the same way."""
    if before.type != after.type and not after.fields and after.element is None \
            and after.key is None:
        update.update_column(path, field_type=iceberg_type(_with_ids(after)))
    if before.nullable != after.nullable:
        if after.nullable:
            update.make_column_optional(path)
        else:
            update.update_column(path, required=True)
    if before.comment != after.comment:  # "" clears it (None would mean "unchanged")
        update.update_column(path, doc=after.comment)
    old_fields = {f.name: f for f in before.fields}
    for f in after.fields:
        if f.name in old_fields:
            _update(update, (*path, f.name), old_fields[f.name], f)
        else:
            update.add_column((*path, f.name), iceberg_type(_with_ids(f)), f.comment or None,
                              required=not f.nullable)
    for name in old_fields:
        if name not in {f.name for f in after.fields}:
            update.delete_column((*path, name))
    for part in ("element", "value"):
        old, new = getattr(before, part), getattr(after, part)
        if old is not None and new is not None:
            _update(update, (*path, part), old, new)


def _with_ids(column: Column) -> Column:
    """``column`` with provisional ids (pyiceberg assigns the real ones)."""
    return assign_column_ids((column,), 1)[0]


def _field_name(term: Term) -> str:
    """Iceberg's default partition field name: ``region``, ``placed_at_day``,
    ``id_bucket_16``."""
    if term.function == "identity":
        return term.column
    return f"{term.column}_{term.function}" + (f"_{term.width}" if term.width else "")


def _sort_field(term: SortTerm, columns: Mapping[str, Column]) -> SortField:
    return SortField(source_id=columns[term.term.column].id,
                     transform=parse_transform(term.term.transform),
                     direction=SortDirection.DESC if term.descending else SortDirection.ASC,
                     null_order=NullOrder.NULLS_FIRST if term.nulls_first
                     else NullOrder.NULLS_LAST)


def _olympia_side(txn: Transaction, identifier: tuple[str, str], location: str,
                  comment: str | None, protected: bool | None, table_type: str | None,
                  new_values: Mapping[str, Any]) -> None:
    """Set what only Olympia keeps (comment, protection, table type, the fields of
    ``new_values``) on the definition the Iceberg commit staged."""
    definition = txn.load_table(identifier)
    changes: dict[str, Any] = {k: v for k, v in new_values.items()
                               if getattr(definition, k) != v}
    if comment is not None and comment != definition.comment:
        changes["comment"] = comment
    if protected is not None and protected != definition.protected:
        changes["protected"] = protected
    if table_type is not None and table_type != definition.table_type:
        changes["table_type"] = table_type
    if changes:
        txn.put_table(replace(definition, location=location, **changes))
