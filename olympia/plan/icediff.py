"""Planning Iceberg tables: create them for real, and compare what a spec declares of them.

A table of format ``iceberg`` is created through pyiceberg when it has a location: declared,
from its namespace's ``location`` property, or under the catalog's ``warehouse`` property;
without one it stays a definition without Iceberg metadata (with a plan warning), as before.

For a table with Iceberg metadata the plan compares what the spec declares — columns as
Iceberg stores them, table properties, partitioning (as a set: field order is not
compared), sort order, format version when declared — and never the metadata location,
snapshots or the format properties Iceberg writes, so data appended by a job is not a
change to revert. Its table location cannot change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import Table
from olympia.exceptions import InvalidArgumentError
from olympia.plan.changes import Change, alter_common, detail, new_field_values
from olympia.plan.ops import Action, AlterIcebergTable, CreateIcebergTable, Kind
from olympia.spec import fields as described
from olympia.spec.iceberg import Layout, Term, as_stored, layout_of
from olympia.spec.model import TableSpec

if TYPE_CHECKING:
    from olympia.plan.diff import Differ

LOCATION = "location"  # the namespace property pyiceberg places a namespace's tables under
TABLE_LOCATION = "table-location"  # format property: the Iceberg table's location


def has_metadata(table: Table) -> bool:
    """Whether ``table`` is an Iceberg table with metadata (its location is the metadata
    file), not a definition declared without it."""
    return table.format == "iceberg" and bool(table.location)


def creatable(item: TableSpec, namespace_properties: Mapping[str, str], warehouse: str) -> bool:
    """Whether the Iceberg table ``item`` declares can be created: it has a location."""
    return bool((item.manages("location") and item.table.location)
                or namespace_properties.get(LOCATION) or warehouse)


def create_op(item: TableSpec) -> CreateIcebergTable:
    """The operation creating the Iceberg table ``item`` declares."""
    table = item.table
    return CreateIcebergTable(
        identifier=(table.namespace, table.name),
        columns=tuple(c.without_ids() for c in table.columns),
        properties=dict(sorted(table.properties.items())), table_type=table.table_type,
        location=table.location if item.manages("location") else "",
        partition_by=item.layout.partition_texts(), sort_by=item.layout.sort_texts(),
        format_version=item.format_version or 2, comment=table.comment,
        protected=table.protected, new_values={
            f.name: f.normal(f.value(table)) for f in described.olympia_only(ObjectType.TABLE)
            if f.value(table) != described.default(table, f)})


def create_details(item: TableSpec) -> list[dict[str, Any]]:
    """The Iceberg-only details of a table to create."""
    out = []
    if item.layout.partition_by:
        out.append(detail("partition_by", None, list(item.layout.partition_texts()), text=True))
    if item.layout.sort_by:
        out.append(detail("sort_by", None, list(item.layout.sort_texts()), text=True))
    if item.format_version:
        out.append(detail("format_version", None, item.format_version))
    return out


def alter(differ: Differ, item: TableSpec, current: Table) -> list[Change]:
    """The change turning the Iceberg table ``current`` (with metadata) into what ``item``
    declares, or none."""
    desired = item.table
    name = f"{desired.namespace}.{desired.name}"
    stored = replace(item, table=replace(desired, columns=tuple(
        as_stored(c) for c in desired.columns)))
    args, details = alter_common(current, desired)
    new_values, more = new_field_values(current, desired,
                                        described.olympia_only(ObjectType.TABLE))
    if new_values:
        args["new_values"] = new_values
    details += more
    fmt = current.format_properties
    if item.manages("location") and desired.location.rstrip("/") != fmt.get(
            TABLE_LOCATION, "").rstrip("/"):
        differ.problem(item.position, f"table {name}: its Iceberg location is "
                       f"{fmt.get(TABLE_LOCATION, '(unknown)')} and cannot change; remove "
                       "location from the spec or declare that one")
    version = int(fmt.get("format-version", "2") or "2")
    if item.format_version is not None and item.format_version != version:
        if item.format_version < version:
            differ.problem(item.position, f"table {name}: Iceberg format version {version} "
                           f"cannot be lowered to {item.format_version}")
        else:
            args["format_version"] = item.format_version
            details.append(detail("format_version", version, item.format_version))
    column_args, column_details = differ.column_changes(stored, current)
    args.update(column_args)
    try:
        now = layout_of(fmt, current.columns)
    except InvalidArgumentError as exc:
        differ.problem(item.position, f"table {name}: {exc}")
        now = Layout()
    renamed = dict(column_args.get("rename_columns", {}))
    now = Layout(tuple(_moved(t, renamed) for t in now.partition_by),
                 tuple(replace(s, term=_moved(s.term, renamed)) for s in now.sort_by))
    if set(now.partition_by) != set(item.layout.partition_by):
        args["partition_by"] = item.layout.partition_texts()
        details.append(detail("partition_by", list(now.partition_texts()),
                              list(item.layout.partition_texts()), text=True))
    if now.sort_by != item.layout.sort_by:
        args["sort_by"] = item.layout.sort_texts()
        details.append(detail("sort_by", list(now.sort_texts()),
                              list(item.layout.sort_texts()), text=True))
    if not args:
        return []
    return [Change(Action.UPDATE, Kind.TABLE, name, details=details + column_details,
                   ops=[AlterIcebergTable(identifier=(desired.namespace, desired.name),
                                          **args)],
                   source=str(item.position))]


def _moved(term: Term, renamed: Mapping[str, str]) -> Term:
    """``term`` after its column's rename (Iceberg follows field ids)."""
    return replace(term, column=renamed.get(term.column, term.column))

