"""The one description of namespace, table and view fields (olympia.spec.fields) and what
reads it: plan operations, their JSON form, the facts the UI and olympia show list."""

from __future__ import annotations

import dataclasses

import pytest

from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.plan.opjson import parse_op
from olympia.plan.ops import AlterTable, CreateNamespace, CreateTable, CreateView
from olympia.spec import fields as described
from olympia.spec.fields import facts

TABLE = Table("sales", "orders", (Column("id", "int8", id=1),), {"b": "2", "a": "1"},
              "parquet", "managed", "s3://b/orders", {"k": "v"}, "orders", True)
VIEW = View("sales", "v", " SELECT 1 ", "spark", (Column("x", "int4"),),
            (("sales", "orders"),), "sales", {"p": "q"}, "a view", True)


def test_every_stored_field_is_described_once() -> None:
    """A field of a catalog dataclass missing from the description, or described but not
    stored, is refused by name."""
    described.check_described(described.FIELDS)
    for kind, fields in described.FIELDS.items():
        names = [f.name for f in fields if f.stored]
        assert len(names) == len(set(names))
        assert {f.name for f in dataclasses.fields(described.CLASSES[kind])} == set(names)
    fewer = {**described.FIELDS, ObjectType.TABLE: tuple(
        f for f in described.FIELDS[ObjectType.TABLE] if f.name != "location")}
    with pytest.raises(TypeError, match="location"):
        described.check_described(fewer)
    more = {**described.FIELDS, ObjectType.VIEW: (*described.FIELDS[ObjectType.VIEW],
                                                    described.Field("owner"))}
    with pytest.raises(TypeError, match="owner"):
        described.check_described(more)


def test_operations_write_the_described_fields_flat() -> None:
    """A creation's JSON form is its definition's fields, flat, in the dataclass's order,
    defaults left out (columns and SQL always), and it reads back to the same operation."""
    op = CreateTable.of(TABLE)
    assert op.to_dict() == {
        "op": "create_table", "identifier": ["sales", "orders"],
        "columns": [{"name": "id", "type": "int8"}], "properties": {"a": "1", "b": "2"},
        "format": "parquet", "table_type": "managed", "location": "s3://b/orders",
        "format_properties": {"k": "v"}, "comment": "orders", "protected": True}
    assert list(op.to_dict()) == ["op", "identifier", "columns", "properties", "format",
                                  "table_type", "location", "format_properties", "comment",
                                  "protected"]
    assert parse_op(op.to_dict()) == op
    bare = CreateTable.of(Table("sales", "t"))
    assert bare.to_dict() == {"op": "create_table", "identifier": ["sales", "t"],
                              "columns": []}
    view = CreateView.of(VIEW)
    assert list(view.to_dict()) == ["op", "identifier", "sql", "dialect", "columns",
                                    "referenced_objects", "default_namespace", "properties",
                                    "comment", "protected"]
    assert view.to_dict()["referenced_objects"] == [["sales", "orders"]]
    assert parse_op(view.to_dict()) == view
    ns = CreateNamespace.of(Namespace("sales", {"o": "x"}, protected=True))
    assert ns.to_dict() == {"op": "create_namespace", "namespace": "sales",
                            "properties": {"o": "x"}, "protected": True}
    assert parse_op(ns.to_dict()) == ns


def test_alterations_set_whole_values_of_the_described_fields() -> None:
    """An alteration's new whole values (the fields a spec may leave alone) are written flat
    after its other keywords, and only those fields are accepted."""
    op = AlterTable(identifier=("sales", "orders"), comment="c",
                    new_values={"format_properties": {"k": "v"}, "location": "s3://b/x"})
    assert list(op.to_dict()) == ["op", "identifier", "comment", "location",
                                  "format_properties"]
    assert parse_op(op.to_dict()) == op
    assert parse_op({"op": "alter_table", "identifier": ["a", "b"], "location": None}) == (
        AlterTable(identifier=("a", "b")))
    with pytest.raises(Exception, match="unknown keyword 'format'"):
        parse_op({"op": "alter_table", "identifier": ["a", "b"], "format": "delta"})


def test_a_labelled_field_is_a_fact_of_its_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages lay out today's fields themselves; a field described with a label is
    listed among its object's facts (maps as key=value) without touching a template (the
    pages and olympia show list them)."""
    assert facts(TABLE) == [] and facts(VIEW) == [] and facts(Namespace("n")) == []
    labelled = tuple(dataclasses.replace(f, label=f.name.title()) if f.name in (
        "location", "format_properties") else f for f in described.FIELDS[ObjectType.TABLE])
    monkeypatch.setitem(described.FIELDS, ObjectType.TABLE, labelled)
    assert facts(TABLE) == [("Location", "s3://b/orders"), ("Format_Properties", "k=v")]
