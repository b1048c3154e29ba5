"""Column changes as a pure function: ids kept, new ids after the highest, errors named."""

from __future__ import annotations

import pytest

from olympia.catalog.columns import change_columns
from olympia.catalog.objects import assign_column_ids, canonical_type, coerce_columns
from olympia.exceptions import AlreadyExistsError, InvalidArgumentError, NoSuchColumnError

COLUMNS = assign_column_ids(coerce_columns([
    {"name": "id", "type": "int8"},
    {"name": "point", "type": "struct", "fields": [{"name": "x", "type": "int4"}]},
    {"name": "note", "type": "string"},
]), 1)


def test_changes_apply_in_order_and_keep_ids() -> None:
    change = change_columns(
        "s.t", COLUMNS, remove=["note"], rename={"id": "key"},
        update={"key": {"type": "int8", "nullable": False}},
        add=[{"name": "added", "type": "date"}], order=["added", "point", "key"])
    assert [(c.name, c.id) for c in change.columns] == [("added", 6), ("point", 2), ("key", 1)]
    assert not change.columns[2].nullable
    assert [c.name for c in change.added] == ["added"] and change.reordered
    assert [c.name for c in COLUMNS] == ["id", "point", "note"]  # the input is untouched


def test_nothing_changed_reports_no_reorder() -> None:
    change = change_columns("s.t", COLUMNS)
    assert change.columns == COLUMNS and not change.added and not change.reordered


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"remove": ["nope"]}, NoSuchColumnError, "column nope does not exist in table s.t"),
    ({"rename": {"id": "note"}}, AlreadyExistsError, "column note already exists"),
    ({"update": {"nope": {"type": "int4"}}}, NoSuchColumnError, "column nope"),
    ({"add": [{"name": "id", "type": "int4"}]}, AlreadyExistsError, "column id already"),
    ({"order": ["id"]}, InvalidArgumentError, "must list exactly its columns"),
])
def test_bad_changes_name_the_column(kwargs: dict[str, object], error: type[Exception],
                                     message: str) -> None:
    with pytest.raises(error, match=message):
        change_columns("s.t", COLUMNS, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("CHAR(007)", "char(7)"), ("varchar", "varchar"), ("varchar(0)", "varchar"),
    ("fixed(2147483647)", "fixed(2147483647)"),
])
def test_type_parameters_are_normalised(spelling: str, canonical: str) -> None:
    assert canonical_type(spelling) == canonical


@pytest.mark.parametrize("spelling", ["char(2147483648)", "char(4294967296)",
                                      "fixed(0)", "char(1" + "0" * 5000 + ")"])
def test_type_parameters_are_bounded_in_the_api_too(spelling: str) -> None:
    with pytest.raises(InvalidArgumentError,
                       match=r"at most 2147483647|positive length"):
        canonical_type(spelling)
