"""Saved plans are untrusted input: forged operations, forged classification, malformed
operations, signatures, and plans in the previous format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from plan_helpers import memory_catalog, plan_for, write_spec
from test_plan_cli import Cli

from olympia import Catalog
from olympia.exceptions import DestructiveChangeError, InvalidArgumentError, ProtectedDropError
from olympia.plan import Plan, apply_plan
from olympia.plan.opjson import parse_op
from olympia.plan.ops import OP_CLASSES, AlterTable, DropTable, RenameTable
from olympia.plan.planfile import checksum

KEY = "s3cr3t-plan-key-do-not-print"
WRONG = "wrong-k3y-do-not-print"


def docs() -> dict[str, Any]:
    return {"sales": {"namespace": "sales", "tables": {
        "orders": {"columns": [{"name": "id", "type": "int8"}]}, "scratch": {}}}}


def reseal(data: dict[str, Any]) -> dict[str, Any]:
    """What anyone can do: recompute the plain checksum after editing a plan."""
    body = {k: v for k, v in data.items() if k not in ("checksum", "signature")}
    return {**data, "checksum": checksum(body)}


def forge(plan_file: Path, out: Path, **edits: Any) -> Path:
    """``plan_file`` with its first change's operations (and fields) replaced, resealed."""
    data = json.loads(plan_file.read_text())
    data["changes"][0].update(edits)
    out.write_text(json.dumps(reseal(data)))
    return out


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = Cli(tmp_path)
    assert cli("init").exit_code == 0
    catalog = Catalog.open(cli.warehouse)
    catalog.create_namespace("other")
    catalog.create_table("other", "keep", columns=[{"name": "id", "type": "int8"}])
    return cli


def saved_plan(cli: Cli, tmp_path: Path, spec_docs: dict[str, Any]) -> Path:
    spec = write_spec(tmp_path / "spec", spec_docs)
    plan_file = tmp_path / "plan.json"
    out = cli("plan", str(spec), "--out", str(plan_file))
    assert out.exit_code == 0, out.output
    return plan_file


def test_a_forged_drop_outside_the_managed_namespaces_is_refused(cli: Cli,
                                                                  tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    assert cli("apply", str(spec), "--auto-approve").exit_code == 0
    write_spec(spec, {"sales": {**docs()["sales"], "comment": "changed"}})
    plan_file = tmp_path / "plan.json"
    assert cli("plan", str(spec), "--out", str(plan_file)).exit_code == 0
    forged = forge(plan_file, tmp_path / "forged.json", destructive=False, reasons=[],
                   ops=[{"op": "drop_table", "identifier": ["other", "keep"]}])
    for extra in ([], ["--allow-destructive"]):
        out = cli("apply", str(forged), "--auto-approve", *extra)
        assert out.exit_code == 1, out.output
        assert ("operation drop_table changes namespace other, which the plan does not "
                "manage (it manages: sales)") in out.output
    assert Catalog.open(cli.warehouse).list_tables("other") == ["keep"]
    assert Catalog.open(cli.warehouse).version == 3


def test_forged_classification_is_ignored(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    assert cli("apply", str(spec), "--auto-approve").exit_code == 0
    changed = docs()
    changed["sales"]["comment"] = "c"
    write_spec(spec, changed)
    plan_file = tmp_path / "plan.json"
    assert cli("plan", str(spec), "--out", str(plan_file)).exit_code == 0
    # a drop inside the managed namespace, claimed harmless: needs --allow-destructive
    forged = forge(plan_file, tmp_path / "drop.json", action="update", destructive=False,
                   reasons=[], ops=[{"op": "drop_table", "identifier": ["sales", "scratch"]}])
    out = cli("apply", str(forged), "--auto-approve")
    assert out.exit_code == 5 and "drops table sales.scratch" in out.output
    # removing a column and narrowing a type, claimed harmless
    forged = forge(plan_file, tmp_path / "alter.json", destructive=False, reasons=[], ops=[
        {"op": "alter_table", "identifier": ["sales", "orders"], "remove_columns": ["id"],
         "add_columns": [{"name": "n", "type": "int4"}]}])
    out = cli("apply", str(forged), "--auto-approve")
    assert out.exit_code == 5 and "removes column id" in out.output
    assert Catalog.open(cli.warehouse).version == 3


def test_protected_objects_are_never_dropped_by_a_forged_plan(tmp_path: Path) -> None:
    catalog = memory_catalog()
    spec_docs = docs()
    spec_docs["sales"]["tables"]["orders"]["protected"] = True
    spec = write_spec(tmp_path / "spec", spec_docs)
    apply_plan(catalog, plan_for(catalog, spec))
    spec_docs["sales"]["comment"] = "c"
    plan = plan_for(catalog, write_spec(spec, spec_docs))
    # unprotect, then drop, in one plan: still refused, also with allow_destructive
    plan.changes[0].ops = [AlterTable(identifier=("sales", "orders"), protected=False),
                           DropTable(identifier=("sales", "orders"))]
    plan.changes[0].blocked, plan.changes[0].reasons = "", []
    with pytest.raises(ProtectedDropError, match="table sales.orders is protected"):
        apply_plan(catalog, plan, allow_destructive=True)
    # ... also under another name
    plan.changes[0].ops = [AlterTable(identifier=("sales", "orders"), protected=False),
                           RenameTable(identifier=("sales", "orders"), new_name="gone"),
                           DropTable(identifier=("sales", "gone"))]
    with pytest.raises(ProtectedDropError, match="table sales.gone is protected"):
        apply_plan(catalog, plan, allow_destructive=True)
    assert catalog.refresh() == 1 and catalog.load_table("sales.orders").protected


@pytest.mark.parametrize(("op", "message"), [
    ({"op": "truncate_table", "identifier": ["sales", "orders"]},
     "unknown operation 'truncate_table'"),
    ({"op": "drop_table", "identifier": ["sales", "orders"], "cascade": True},
     "drop_table: unknown keyword 'cascade'"),
    ({"op": "drop_table", "identifier": 5}, "drop_table: identifier: 5 is not of type 'array'"),
    ({"op": "drop_table", "identifier": ["sales", 5]},
     "drop_table: identifier.1: 5 is not of type 'string'"),
    ({"op": "drop_table"}, "drop_table: missing keyword 'identifier'"),
    ({"op": "create_table", "identifier": ["sales", "t"],
      "columns": [{"name": "c", "type": "char(4294967296)"}]}, "column 'c': "),
    ({"op": "create_table", "identifier": ["sales", "t"],
      "columns": [{"name": "c", "type": "nosuchtype"}]}, "column 'c': unknown type"),
    ({"op": "alter_namespace", "namespace": "sales", "protected": "no"},
     "alter_namespace: protected: 'no' is not valid under any of the given schemas"),
    ({"op": "rename_table", "identifier": ["sales", "orders"], "new_name": ""},
     "new_name: '' should be non-empty"),
    ("drop everything", "an operation must be an object"),
])
def test_malformed_operations_are_clear_errors(op: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        parse_op(op)
    assert message in str(err.value)


def test_every_malformed_operation_of_a_saved_plan_is_named(cli: Cli, tmp_path: Path) -> None:
    plan_file = saved_plan(cli, tmp_path, docs())
    data = json.loads(plan_file.read_text())
    data["changes"][0]["ops"] = [{"op": "drop_table", "identifier": 5}]
    data["changes"][1]["ops"] = [{"op": "create_table", "identifier": ["sales", "t"],
                                  "columns": [], "colour": "red"}]
    (tmp_path / "bad.json").write_text(json.dumps(reseal(data)))
    out = cli("apply", str(tmp_path / "bad.json"), "--auto-approve")
    assert out.exit_code == 1
    assert "change 1: create namespace sales: operation 1: drop_table: identifier: 5 is " \
        "not of type 'array'" in out.output
    assert "change 2: create table sales.orders: operation 1: create_table: unknown " \
        "keyword 'colour'" in out.output
    data["base_version"] = "zero"
    (tmp_path / "bad.json").write_text(json.dumps(reseal(data)))
    out = cli("apply", str(tmp_path / "bad.json"), "--auto-approve")
    assert out.exit_code == 1 and "base_version: 'zero' is not of type 'integer'" in out.output
    assert Catalog.open(cli.warehouse).version == 2


def test_every_operation_round_trips_through_json() -> None:
    catalog = memory_catalog()
    catalog.create_namespace("a")
    assert set(OP_CLASSES) == {
        f"{verb}_{kind}" for verb in ("create", "rename", "drop")
        for kind in ("namespace", "table", "view")} | {
        "alter_namespace", "alter_table", "replace_view", "create_iceberg_table",
        "alter_iceberg_table"}
    iceberg = [parse_op(d) for d in (
        {"op": "create_iceberg_table", "identifier": ["a", "t"], "format_version": 1,
         "columns": [{"name": "ts", "type": "timestamptz"}], "partition_by": ["day(ts)"],
         "sort_by": ["ts desc nulls first"], "location": "s3://b/t"},
        {"op": "alter_iceberg_table", "identifier": ["a", "t"], "partition_by": [],
         "sort_by": None, "rename_columns": {"ts": "at"}},
    )]
    assert [parse_op(o.to_dict()) for o in iceberg] == iceberg
    assert iceberg[0].partition_by == ("day(ts)",)  # type: ignore[attr-defined]
    ops = [parse_op(d) for d in (
        {"op": "create_table", "identifier": ["a", "t"],
         "columns": [{"name": "s", "type": "struct", "fields": [{"name": "x", "type": "int"}]}]},
        {"op": "alter_table", "identifier": ["a", "t"], "add_columns": [{"name": "y",
                                                                          "type": "int8"}],
         "update_columns": {"s": {"name": "s", "type": "struct", "fields": [
             {"name": "x", "type": "int8"}]}}, "column_order": ["y", "s"]},
        {"op": "create_view", "identifier": ["a", "v"], "sql": "SELECT 1",
         "referenced_objects": [["a", "t"]]},
        {"op": "rename_view", "identifier": ["a", "v"], "new_name": "w"},
    )]
    assert [parse_op(o.to_dict()) for o in ops] == ops
    with catalog.transaction() as txn:
        for o in ops:
            o.apply(txn)
    assert [c.name for c in catalog.load_table("a.t").columns] == ["y", "s"]
    assert catalog.load_view("a.w").referenced_objects == (("a", "t"),)


def test_signed_plans(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    unsigned = tmp_path / "unsigned.json"
    assert cli("plan", str(spec), "--out", str(unsigned)).exit_code == 0
    cli.env["OLYMPIA_PLAN_KEY"] = KEY
    signed = tmp_path / "signed.json"
    out = cli("plan", str(spec), "--out", str(signed))
    assert out.exit_code == 0 and KEY not in out.output
    data = json.loads(signed.read_text())
    assert data["signature"]["algorithm"] == "HMAC-SHA256" and KEY not in signed.read_text()
    printed = json.loads(cli("plan", str(spec), "--json").output)
    assert Plan.from_dict(printed, "stdout", KEY).changes
    # unsigned, re-signed with another key, or edited after signing: refused, exit 1
    out = cli("apply", str(unsigned), "--auto-approve")
    assert out.exit_code == 1 and "the plan is not signed, but OLYMPIA_PLAN_KEY is set" \
        in out.output
    data["changes"][0]["ops"][0]["comment"] = "edited"
    (tmp_path / "tampered.json").write_text(json.dumps(reseal(data)))
    for plan_file in (signed, tmp_path / "tampered.json"):
        cli.env["OLYMPIA_PLAN_KEY"] = WRONG if plan_file == signed else KEY
        out = cli("apply", str(plan_file), "--auto-approve")
        assert out.exit_code == 1 and "the plan's signature does not match OLYMPIA_PLAN_KEY" \
            in out.output
        assert KEY not in out.output and WRONG not in out.output
    assert Catalog.open(cli.warehouse).version == 2  # the fixture's two versions
    out = cli("apply", str(signed), "--auto-approve")
    assert out.exit_code == 0 and "Applied 3 changes" in out.output
    # without the key the signature is not required (nor checked): behaviour as before
    cli.env["OLYMPIA_PLAN_KEY"] = None
    write_spec(spec, {"sales": {**docs()["sales"], "comment": "c"}})
    assert cli("plan", str(spec), "--out", str(unsigned)).exit_code == 0
    assert cli("apply", str(unsigned), "--auto-approve").exit_code == 0


def test_a_plan_in_the_previous_format_is_converted(tmp_path: Path) -> None:
    catalog = memory_catalog()
    plan = plan_for(catalog, write_spec(tmp_path / "spec", docs()))
    data = plan.to_dict()
    data["format_version"] = 1
    for change in data["changes"]:
        change["ops"] = [{"op": o.pop("op"), "args": o} for o in change["ops"]]
    (tmp_path / "v1.json").write_text(json.dumps(reseal(data)))
    loaded = Plan.load(tmp_path / "v1.json")
    assert [c.ops for c in loaded.changes] == [c.ops for c in plan.changes]
    assert loaded.to_dict()["format_version"] == 2
    assert apply_plan(catalog, loaded).version == 1
    assert catalog.list_tables("sales") == ["orders", "scratch"]


def test_classification_comes_from_the_operations(tmp_path: Path) -> None:
    catalog = memory_catalog()
    spec = write_spec(tmp_path / "spec", docs())
    apply_plan(catalog, plan_for(catalog, spec))
    plan = plan_for(catalog, write_spec(spec, {"sales": {"namespace": "sales"}}))
    data = plan.to_dict()
    for change in data["changes"]:
        change.update(destructive=False, reasons=[], blocked="")
    data["destructive"] = False
    loaded = Plan.from_dict(reseal(data))
    with pytest.raises(DestructiveChangeError, match="drops table sales.orders"):
        apply_plan(catalog, loaded)
    assert [c.reasons for c in loaded.changes] == [c.reasons for c in plan.changes]
