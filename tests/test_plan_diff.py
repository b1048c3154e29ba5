"""Planning: golden outputs, order, normalisation, renames, destructive and protected
changes, scope, and the action types a plan promises."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from plan_helpers import (
    EXAMPLE,
    EXAMPLE_VARS,
    check_golden,
    converge,
    memory_catalog,
    plan_for,
    write_spec,
    write_text,
)

from olympia.catalog.actions import type_name
from olympia.catalog.objects import Column
from olympia.exceptions import (
    DestructiveChangeError,
    InvalidArgumentError,
    ProtectedDropError,
    ProtectedObjectError,
)
from olympia.plan import Plan, apply_plan
from olympia.plan.changes import Change, column_details
from olympia.plan.render import want_color


def text_of(plan: Plan, color: bool = False) -> str:
    return plan.render_text(color=color).replace(plan.catalog_uri, "CATALOG") + "\n"


def base_docs() -> dict[str, Any]:
    return {
        "sales": {
            "namespace": "sales", "properties": {"owner": "a", "tier": "1"},
            "tables": {
                "orders": {"columns": [
                    {"name": "id", "type": "int4", "nullable": False},
                    {"name": "amount", "type": "decimal(10,2)"},
                    {"name": "note", "type": "varchar(10)"},
                    {"name": "legacy", "type": "varchar"},
                ]},
                "old_customers": {"columns": [{"name": "id", "type": "int8"}]},
                "scratch": {"columns": [{"name": "x", "type": "int4"}]},
            },
            "views": {"v_orders": {"sql": "SELECT *\nFROM sales.orders",
                                   "references": ["sales.orders"]}},
        },
        "old_hr": {"namespace": "old_hr", "tables": {"people": {"columns": [
            {"name": "id", "type": "int8"}]}}},
    }


def changed_docs() -> dict[str, Any]:
    docs = base_docs()
    sales = docs["sales"]
    sales["properties"] = {"owner": "b"}
    sales["tables"]["orders"]["columns"] = [
        {"name": "order_id", "renamed_from": "id", "type": "int8", "nullable": False},
        {"name": "amount", "type": "decimal(12,2)", "comment": "in EUR"},
        {"name": "note", "type": "int4"},
        {"name": "created", "type": "date"},
    ]
    sales["tables"]["customers"] = dict(sales["tables"].pop("old_customers"),
                                        renamed_from="old_customers")
    del sales["tables"]["scratch"]
    sales["views"]["v_orders"]["sql"] = "SELECT order_id\nFROM sales.orders\nWHERE 1 = 1"
    docs["hr"] = dict(docs.pop("old_hr"), namespace="hr", renamed_from="old_hr")
    return docs


def test_example_plan_golden_and_ordered(tmp_path: Path) -> None:
    catalog = memory_catalog()
    plan = plan_for(catalog, EXAMPLE, **EXAMPLE_VARS)
    check_golden("plan_example_create.txt", text_of(plan))
    order = [(c.action, c.kind, c.name) for c in plan.changes]
    kinds = [k for _, k, _ in order]
    assert kinds == sorted(kinds, key=["namespace", "table", "view"].index)
    views = [n for _, k, n in order if k == "view"]
    assert views.index("reporting.revenue_by_country") < views.index(
        "reporting.country_ranking")  # a view after the views it reads, not by name
    assert views.index("sales.orders_with_customers") < views.index(
        "reporting.revenue_by_country")
    assert plan.summary() == {"create": 15, "update": 0, "rename": 0, "replace": 0, "drop": 0,
                              "destructive": 0, "blocked": 0}


def test_update_plan_golden_with_renames_and_destructive_changes(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path / "spec", base_docs()))
    plan = plan_for(catalog, write_spec(tmp_path / "spec", changed_docs()))
    check_golden("plan_update.txt", text_of(plan))
    check_golden("plan_update_color.txt", text_of(plan, color=True))
    changes = {(c.action, c.kind, c.name): c for c in plan.changes}
    assert ("rename", "namespace", "hr") in changes
    assert ("rename", "table", "sales.customers") in changes
    assert not any(c.action == "drop" and c.kind == "namespace" for c in plan.changes)
    orders = changes[("update", "table", "sales.orders")]
    assert orders.reasons == ["removes column legacy",
                              "changes column note incompatibly (varchar(10) -> int4)"]
    assert changes[("drop", "table", "sales.scratch")].reasons == ["drops table sales.scratch"]
    with pytest.raises(DestructiveChangeError, match="sales.scratch"):
        apply_plan(catalog, plan)
    result = apply_plan(catalog, plan, allow_destructive=True)
    table = catalog.load_table("sales.orders")
    assert [c.name for c in table.columns] == ["order_id", "amount", "note", "created"]
    assert table.columns[0].id == 1  # renamed in place, not dropped and added
    assert catalog.list_namespaces() == ["hr", "sales"]
    assert catalog.list_tables("hr") == ["people"]
    assert catalog.list_tables("sales") == ["customers", "orders"]
    assert not plan_for(catalog, tmp_path / "spec").has_changes
    assert "old_hr.people" in result.changed_objects and "hr.people" in result.changed_objects


def test_planned_actions_are_what_the_transaction_records(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path / "spec", base_docs()))
    plan = plan_for(catalog, write_spec(tmp_path / "spec", changed_docs()))
    planned = [a for c in plan.changes for a in c.actions]
    assert "TABLE_ALTER_RENAME_COLUMN" in planned and "NAMESPACE_RENAME" in planned
    version = apply_plan(catalog, plan, allow_destructive=True).version
    recorded = [type_name(a) for a in catalog.at_version(version).actions()]
    assert recorded == [*planned, "TRANSACTION_INFO"]


def test_normalised_comparison_never_shows_a_diff(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path / "a", {"s": {
        "namespace": "s", "properties": {"b": "2", "a": "1", "flag": "true"},
        "tables": {"t": {"format": "ICEBERG", "columns": [
            {"name": "x", "type": "BIGINT"}, {"name": "d", "type": "Decimal(10, 2)"},
            {"name": "ts", "type": "timestamp"}, {"name": "s", "type": "String"},
            {"name": "m", "type": "map", "key": {"type": "text"}, "value": {"type": "int"}}]}},
        "views": {"v": {"sql": "\n  SELECT 1\n\n", "references": ["s.t"]}}}}))
    write_text(tmp_path / "b", "s.yaml", """
        namespace: s
        properties: {a: 1, flag: true, b: 2}
        tables:
          t:
            format: iceberg
            columns:
              - {name: x, type: int8}
              - {name: d, type: "decimal(10,2)"}
              - {name: ts, type: timestamp6}
              - {name: s, type: varchar}
              - {name: m, type: map, key: {type: varchar}, value: {type: int4}}
        views:
          v:
            references: [s.t]
            sql: |
              SELECT 1
    """)
    assert not plan_for(catalog, tmp_path / "b").has_changes


def test_column_order_is_a_change_of_its_own(tmp_path: Path) -> None:
    catalog = memory_catalog()
    columns = [{"name": n, "type": "int4"} for n in "abc"]
    converge(catalog, write_spec(tmp_path, {"s": {"namespace": "s", "tables": {
        "t": {"columns": columns}}}}))
    write_spec(tmp_path, {"s": {"namespace": "s", "tables": {
        "t": {"columns": [columns[2], columns[0], columns[1]]}}}})
    (change,) = plan_for(catalog, tmp_path).changes
    assert change.actions == ["TABLE_ALTER_REORDER_COLUMNS"] and not change.destructive
    assert change.details == [{"attr": "column order", "before": ["a", "b", "c"],
                               "after": ["c", "a", "b"]}]
    converge(catalog, tmp_path)
    assert [c.name for c in catalog.load_table("s.t").columns] == ["c", "a", "b"]
    assert [c.id for c in catalog.load_table("s.t").columns] == [3, 1, 2]


@pytest.mark.parametrize(("before", "after", "safe"), [
    ({"type": "int4"}, {"type": "int8"}, True),
    ({"type": "int8"}, {"type": "int4"}, False),
    ({"type": "float4"}, {"type": "float8"}, True),
    ({"type": "decimal(10,2)"}, {"type": "decimal(12,2)"}, True),
    ({"type": "decimal(10,2)"}, {"type": "decimal(12,3)"}, False),
    ({"type": "varchar(10)"}, {"type": "varchar"}, True),
    ({"type": "varchar"}, {"type": "varchar(10)"}, False),
    ({"type": "int4", "nullable": False}, {"type": "int4"}, True),
    ({"type": "int4"}, {"type": "int4", "nullable": False}, False),
    ({"type": "int4"}, {"type": "int4", "comment": "c", "properties": {"k": "v"}}, True),
    ({"type": "struct", "fields": [{"name": "a", "type": "int4"}]},
     {"type": "struct", "fields": [{"name": "a", "type": "int8"}, {"name": "b", "type": "date"}]},
     True),
    ({"type": "struct", "fields": [{"name": "a", "type": "int4"}]},
     {"type": "struct", "fields": [{"name": "b", "type": "int4"}]}, False),
    ({"type": "list", "element": {"type": "int4"}}, {"type": "list", "element": {"type": "int8"}},
     True),
    ({"type": "map", "key": {"type": "varchar"}, "value": {"type": "int8"}},
     {"type": "map", "key": {"type": "varchar"}, "value": {"type": "int4"}}, False),
])
def test_incompatible_type_changes_are_destructive(tmp_path: Path, before: dict[str, Any],
                                                   after: dict[str, Any], safe: bool) -> None:
    catalog = memory_catalog()

    def docs(column: dict[str, Any]) -> dict[str, Any]:
        return {"s": {"namespace": "s", "tables": {"t": {"format": "parquet",  # column props
                                                         "columns": [{"name": "c", **column}]}}}}

    converge(catalog, write_spec(tmp_path, docs(before)))
    (change,) = plan_for(catalog, write_spec(tmp_path, docs(after))).changes
    assert change.destructive is not safe
    assert change.actions == ["TABLE_ALTER_UPDATE_COLUMN"]
    converge(catalog, tmp_path)
    assert not plan_for(catalog, tmp_path).has_changes


def test_renames_only_from_hints(tmp_path: Path) -> None:
    catalog = memory_catalog()
    docs = {"s": {"namespace": "s", "tables": {"a": {"columns": [{"name": "x", "type": "int"}]}},
                  "views": {"v": {"sql": "SELECT 1"}}}}
    converge(catalog, write_spec(tmp_path, docs))
    unhinted = copy.deepcopy(docs)
    unhinted["s"]["tables"] = {"b": unhinted["s"]["tables"]["a"]}
    plan = plan_for(catalog, write_spec(tmp_path, unhinted))
    assert [(c.action, c.name) for c in plan.changes] == [("create", "s.b"), ("drop", "s.a")]
    assert plan.destructive  # a rename without a hint is never guessed
    hinted = copy.deepcopy(unhinted)
    hinted["s"]["tables"]["b"]["renamed_from"] = "a"
    hinted["s"]["views"] = {"w": {"sql": "SELECT 1", "renamed_from": "v"}}
    plan = plan_for(catalog, write_spec(tmp_path, hinted))
    assert [(c.action, c.name, c.from_name) for c in plan.changes] == [
        ("rename", "s.b", "s.a"), ("rename", "s.w", "s.v")]
    assert not plan.destructive
    converge(catalog, tmp_path)
    assert not plan_for(catalog, tmp_path).has_changes  # a hint that was applied is history


def test_kind_and_format_changes_replace_the_object(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path, {"s": {"namespace": "s", "tables": {
        "x": {}, "y": {"format": "delta"}}}}))
    plan = plan_for(catalog, write_spec(tmp_path, {"s": {"namespace": "s", "tables": {
        "y": {"format": "iceberg"}}, "views": {"x": {"sql": "SELECT 1"}}}}))
    assert [(c.action, c.kind, c.name, c.actions) for c in plan.changes] == [
        ("replace", "table", "s.y", ["TABLE_DROP", "TABLE_CREATE"]),
        ("replace", "view", "s.x", ["TABLE_DROP", "VIEW_CREATE"])]
    assert plan.destructive
    converge(catalog, tmp_path)
    assert catalog.view_exists("s.x") and catalog.load_table("s.y").format == "iceberg"


def test_protected_objects_are_never_dropped(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path, {"core": {
        "namespace": "core", "tables": {"ledger": {"protected": True}, "tmp": {}}}}))
    # the YAML is deleted: the catalog still knows the table is protected
    plan = plan_for(catalog, write_spec(tmp_path, {"core": {"namespace": "core"}}))
    blocked = [c for c in plan.changes if c.blocked]
    assert [c.name for c in blocked] == ["core.ledger"]
    assert "! refused: table core.ledger is protected" in plan.render_text(color=False)
    assert plan.summary_line().endswith("(2 destructive, 1 refused).")
    with pytest.raises(ProtectedDropError, match="core.ledger") as err:
        apply_plan(catalog, plan, allow_destructive=True)
    assert isinstance(err.value, ProtectedObjectError | DestructiveChangeError)
    assert catalog.table_exists("core.tmp")  # nothing applied
    # managed by a pattern only: the namespace holds a protected table, so it stays too
    plan = plan_for(catalog, write_spec(tmp_path, {"x": {"manage": ["co*"]}}))
    assert {c.name: bool(c.blocked) for c in plan.changes} == {
        "core.ledger": True, "core.tmp": False, "core": True}
    # removing protection is destructive; then the drop goes through
    write_spec(tmp_path, {"core": {"namespace": "core", "tables": {"ledger": {}, "tmp": {}}}})
    (unprotect,) = plan_for(catalog, tmp_path).changes
    assert unprotect.reasons == ["removes protection"]
    with pytest.raises(DestructiveChangeError):
        apply_plan(catalog, plan_for(catalog, tmp_path))
    converge(catalog, tmp_path)
    converge(catalog, write_spec(tmp_path, {"x": {"manage": ["co*"]}}))
    assert catalog.list_namespaces() == []


def test_only_managed_namespaces_are_compared(tmp_path: Path) -> None:
    catalog = memory_catalog()
    catalog.create_namespace("other")
    catalog.create_table("other", "t")
    catalog.create_namespace("tmp_a")
    catalog.create_namespace("tmp_b", properties={"k": "v"})
    plan = plan_for(catalog, write_spec(tmp_path, {"a": {"namespace": "a"}}))
    assert [(c.action, c.name) for c in plan.changes] == [("create", "a")]
    assert plan.managed == ["a"]
    write_spec(tmp_path, {"a": {"namespace": "a"}, "tmp_b": {"namespace": "tmp_b"},
                          "m": {"manage": ["tmp_*"]}})
    plan = plan_for(catalog, tmp_path)
    assert plan.managed == ["a", "tmp_a", "tmp_b"]
    assert [(c.action, c.name) for c in plan.changes] == [
        ("create", "a"), ("update", "tmp_b"), ("drop", "tmp_a")]


def test_engine_owned_location_and_format_properties_when_omitted(tmp_path: Path) -> None:
    """Other formats than Iceberg (whose location and format properties are never
    compared: tests/test_iceberg_spec.py)."""
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path, {"s": {"namespace": "s", "tables": {"t": {
        "format": "delta"}}}}))
    catalog.alter_table("s.t", location="s3://b/t/_delta_log/00002.json",
                        format_properties={"metadata-version": "2"})
    assert not plan_for(catalog, tmp_path).has_changes  # no perpetual diff with the engine
    write_spec(tmp_path, {"s": {"namespace": "s", "tables": {"t": {
        "format": "delta", "location": "s3://b/t/_delta_log/00003.json",
        "format_properties": {}}}}})
    (change,) = plan_for(catalog, tmp_path).changes
    assert [d["attr"] for d in change.details] == ["location",
                                                   "format_properties.metadata-version"]


def test_views_outside_the_spec_that_read_dropped_objects_are_warned(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path, {"s": {"namespace": "s", "tables": {"t": {}}}}))
    catalog.create_namespace("reports")
    catalog.create_view("reports", "r", sql="SELECT * FROM s.t", referenced_objects=["s.t"])
    plan = plan_for(catalog, write_spec(tmp_path, {"s": {"namespace": "s"}}))
    assert plan.warnings == ["view reports.r (not managed by this spec) reads s.t, which this "
                             "plan drops or renames"]
    assert "Warnings:\n  ! view reports.r" in plan.render_text(color=False)


def test_plans_are_deterministic_and_json_is_versioned(tmp_path: Path) -> None:
    catalog = memory_catalog()
    first = plan_for(catalog, EXAMPLE, **EXAMPLE_VARS).to_dict()
    second = plan_for(catalog, EXAMPLE, **EXAMPLE_VARS).to_dict()
    for data in (first, second):
        data.pop("created_at")
        data.pop("checksum")
    assert first == second
    assert first["format"] == "olympia-plan" and first["format_version"] == 2
    assert first["catalog"]["id"] == catalog.catalog_def.id and first["base_version"] == 0
    change = first["changes"][0]
    assert set(change) >= {"action", "type", "name", "destructive", "details", "actions", "ops"}
    assert change["source"].endswith("finance.yaml:2:12")
    json.dumps(first)


def test_colour_follows_no_color_and_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert want_color(Tty()) and not want_color(object())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not want_color(Tty())
    plan = plan_for(memory_catalog(), EXAMPLE, **EXAMPLE_VARS)
    assert "\033[" not in plan.render_text() and "\033[32m" in plan.render_text(color=True)
    assert re.sub(r"\033\[\d+m", "", plan.render_text(color=True)) == plan.render_text(False)


def test_nested_details_name_map_parts_field_order_and_nullability() -> None:
    def struct(*fields: Column, nullable: bool = True) -> Column:
        return Column("s", "struct", nullable, fields=fields)

    a, b = Column("a", "int4"), Column("b", "varchar", comment="x")
    (d,) = column_details(struct(a, b), struct(b, a, nullable=False))
    assert d["incompatible"] and [(n["attr"], n["before"], n["after"]) for n in d["nested"]] == [
        ("nullable", True, False), ("field order", ["a", "b"], ["b", "a"])]
    m1 = Column("m", "map", key=Column("key", "varchar"), value=Column("value", "int4"))
    m2 = Column("m", "map", key=Column("key", "varchar"),
                value=Column("value", "int8", comment="wider"))
    (d,) = column_details(m1, m2)
    assert "incompatible" not in d and d["nested"] == [
        {"attr": "value", "before": "int4", "after": "int8", "text": True},
        {"attr": "value comment", "before": "", "after": "wider"}]
    assert column_details(Column("c", "int4"), Column("c", "int4", comment="new")) == [
        {"attr": "column c comment", "before": "", "after": "new"}]
    saved = {"action": "update", "type": "table", "name": "s.t",
             "details": [{"attr": "column c", "nested": [{"attr": "x", "nested": "bad"}]}]}
    with pytest.raises(InvalidArgumentError, match="details and actions must be lists"):
        Change.from_dict(saved)
