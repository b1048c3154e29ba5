"""Column changes of a table, as a pure function from one column list to the next."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from olympia.catalog.objects import Column, assign_column_ids, coerce_columns, max_column_id
from olympia.exceptions import AlreadyExistsError, InvalidArgumentError, NoSuchColumnError


@dataclass(frozen=True)
class ColumnChange:
    """The result of :func:`change_columns`."""

    columns: tuple[Column, ...]  # the new columns, in their final order
    added: tuple[Column, ...]  # the added columns, with their new ids
    reordered: bool  # whether ``order`` moved any column


def change_columns(
    table: str, columns: Sequence[Column], *, remove: Sequence[str] = (),
    rename: Mapping[str, str] | None = None,
    update: Mapping[str, Column | Mapping[str, Any]] | None = None,
    add: Sequence[Column | Mapping[str, Any]] = (), order: Sequence[str] | None = None,
) -> ColumnChange:
    """Apply column changes in the order remove, rename, update, add, reorder.

    An updated column keeps its id (its nested fields get new ids unless already numbered
    above the table's highest); added columns are numbered after the highest id in use.

    Args:
        table: The table's name, for messages.
        columns: The current columns.
        remove: Names of columns to remove.
        rename: Old name -> new name.
        update: Column name (after renames) -> its new definition.
        add: Columns to append.
        order: The complete list of column names in their new order.

    Returns:
        The new columns, the added ones, and whether the order changed.

    Raises:
        NoSuchColumnError: A removed, renamed or updated column does not exist.
        AlreadyExistsError: A renamed or added column's name is taken.
        InvalidArgumentError: ``order`` does not list exactly the columns.
    """
    by_name = {c.name: c for c in columns}
    for removed in remove:
        _require(table, by_name, removed)
        del by_name[removed]
    cols = [c for c in columns if c.name in by_name]
    renames = dict(rename or {})
    for old_name, new_name in renames.items():
        _require(table, by_name, old_name)
        if new_name in by_name and new_name not in renames:
            raise AlreadyExistsError(f"column {new_name} already exists in table {table}")
    cols = [replace(c, name=renames.get(c.name, c.name)) for c in cols]
    next_id = max_column_id(columns) + 1
    updates = {k: Column.coerce(v, k) for k, v in (update or {}).items()}
    for i, col in enumerate(cols):
        if col.name in updates:
            (new_col,) = assign_column_ids([replace(updates.pop(col.name), name=col.name)],
                                           next_id)
            next_id = max_column_id([new_col]) + 1
            cols[i] = replace(new_col, id=col.id)
    if updates:
        _require(table, {c.name: c for c in cols}, next(iter(updates)))
    added = assign_column_ids(coerce_columns(add), next_id)
    names = {c.name for c in cols}
    for col in added:
        if col.name in names:
            raise AlreadyExistsError(f"column {col.name} already exists in table {table}")
    cols += added
    unordered = [c.name for c in cols]
    if order is not None:
        if sorted(order) != sorted(unordered):
            raise InvalidArgumentError(
                f"column_order for table {table} must list exactly its columns: "
                f"{', '.join(unordered)}")
        position = {n: i for i, n in enumerate(order)}
        cols.sort(key=lambda c: position[c.name])
    return ColumnChange(tuple(cols), added, [c.name for c in cols] != unordered)


def _require(table: str, columns: Mapping[str, Column], name: str) -> None:
    if name not in columns:
        raise NoSuchColumnError(f"column {name} does not exist in table {table}")
