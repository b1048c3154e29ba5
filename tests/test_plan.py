"""Plan and apply: ordering, idempotence, renames, destructive and protected changes,
saved-plan staleness, inspect round trips, golden outputs, CLI exit codes."""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from conftest import Location
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olympia import Catalog
from olympia.cli import main
from olympia.exceptions import (
    DestructiveChangeError,
    ProtectedObjectError,
    StalePlanError,
)
from olympia.plan import Plan, apply_plan, make_plan
from olympia.plan.inspect import inspect
from olympia.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
EXAMPLE_VARS = {"finance_retention": "7y"}
_ids = itertools.count()


def write_spec(directory: Path, docs: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.yaml"):
        old.unlink()
    for name, doc in docs.items():
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


def plan_for(catalog: Catalog, spec_dir: Path, **variables: str) -> Plan:
    return make_plan(catalog, load_spec(spec_dir, variables))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("OLYMPIA_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"golden {name} differs (OLYMPIA_UPDATE_GOLDEN=1 rewrites)"


def test_example_plan_golden_and_idempotent(location: Location) -> None:
    catalog = Catalog.create(location.uri, location.storage_options)
    plan = plan_for(catalog, ROOT / "examples" / "catalog", **EXAMPLE_VARS)
    text = plan.render_text(color=False).replace(catalog.uri, "CATALOG")
    check_golden("example_create.txt", text + "\n")
    kinds = [(c.action, c.kind) for c in plan.changes]
    first_view = kinds.index(("create", "view"))
    assert all(k == ("create", "namespace") for k in kinds[:3])
    assert all(k[1] == "view" for k in kinds[first_view:])
    result = apply_plan(catalog, plan)
    assert result.version == 1  # ONE version for the whole plan
    again = plan_for(catalog, ROOT / "examples" / "catalog", **EXAMPLE_VARS)
    assert not again.has_changes
    assert again.render_text(color=False).endswith("No changes. The catalog matches the spec.")


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
            "views": {"v_orders": {"sql": "SELECT * FROM sales.orders",
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
        {"name": "amount", "type": "decimal(12,2)"},
        {"name": "note", "type": "int4"},
        {"name": "created", "type": "date"},
    ]
    sales["tables"]["customers"] = dict(sales["tables"].pop("old_customers"),
                                        renamed_from="old_customers")
    del sales["tables"]["scratch"]
    sales["views"]["v_orders"]["sql"] = "SELECT order_id FROM sales.orders"
    docs["hr"] = dict(docs.pop("old_hr"), namespace="hr", renamed_from="old_hr")
    return docs


def test_update_plan_golden_renames_and_destructive(tmp_path: Path) -> None:
    catalog = Catalog.create(f"memory://plan-{next(_ids)}")
    apply_plan(catalog, plan_for(catalog, write_spec(tmp_path / "spec", base_docs())))
    plan = plan_for(catalog, write_spec(tmp_path / "spec", changed_docs()))
    check_golden("example_update.txt",
                 plan.render_text(color=False).replace(catalog.uri, "CATALOG") + "\n")
    actions = {(c.action, c.kind, c.name) for c in plan.changes}
    assert ("rename", "namespace", "hr") in actions
    assert ("rename", "table", "sales.customers") in actions
    assert ("drop", "table", "sales.scratch") in actions
    assert not any(c.action == "drop" and c.kind == "namespace" for c in plan.changes)
    orders = next(c for c in plan.changes if c.name == "sales.orders")
    assert orders.destructive  # legacy removed, note varchar(10) -> int4
    incompatible = [d["attr"] for d in orders.details if d.get("incompatible")]
    assert incompatible == ["column note"]
    with pytest.raises(DestructiveChangeError, match="sales.scratch"):
        apply_plan(catalog, plan)
    version = catalog.version
    result = apply_plan(catalog, plan, allow_destructive=True)
    assert result.version == version + 1
    table = catalog.load_table("sales.orders")
    assert [c.name for c in table.columns] == ["order_id", "amount", "note", "created"]
    assert table.columns[0].id == 1  # renamed, not dropped and re-created
    assert catalog.list_namespaces() == ["hr", "sales"]
    assert catalog.list_tables("sales") == ["customers", "orders"]
    assert not plan_for(catalog, tmp_path / "spec").has_changes


def test_protected_objects_survive_deleted_yaml(tmp_path: Path) -> None:
    catalog = Catalog.create(f"memory://plan-{next(_ids)}")
    docs = {"core": {"namespace": "core", "protected": True, "tables": {
        "ledger": {"protected": True, "columns": [{"name": "id", "type": "int8"}]}}}}
    apply_plan(catalog, plan_for(catalog, write_spec(tmp_path / "s", docs)))
    docs = {"core": {"namespace": "core", "protected": True}}
    plan = plan_for(catalog, write_spec(tmp_path / "s", docs))
    (drop,) = plan.changes
    assert drop.blocked and "protected" in drop.blocked
    assert "refused" in plan.render_text(color=False)
    with pytest.raises(ProtectedObjectError, match="core.ledger"):
        apply_plan(catalog, plan, allow_destructive=True)
    # managed by pattern: an undeclared namespace is dropped, but not a protected one
    write_spec(tmp_path / "s", {"settings": {"manage": ["co*"]}})
    plan = plan_for(catalog, tmp_path / "s")
    assert {(c.action, c.name) for c in plan.changes} == {("drop", "core"),
                                                          ("drop", "core.ledger")}
    assert all(c.blocked for c in plan.changes)


def test_unmanaged_namespaces_are_left_alone(tmp_path: Path) -> None:
    catalog = Catalog.create(f"memory://plan-{next(_ids)}")
    catalog.create_namespace("other")
    catalog.create_table("other", "t", columns=[{"name": "x", "type": "int4"}])
    plan = plan_for(catalog, write_spec(tmp_path / "s", {"a": {"namespace": "a"}}))
    assert [(c.action, c.name) for c in plan.changes] == [("create", "a")]


def test_saved_plan_staleness(tmp_path: Path) -> None:
    catalog = Catalog.create(f"memory://plan-{next(_ids)}")
    spec_dir = write_spec(tmp_path / "s", base_docs())
    apply_plan(catalog, plan_for(catalog, spec_dir))
    write_spec(spec_dir, {**base_docs(), "extra": {"namespace": "extra"}})
    plan_file = tmp_path / "plan.json"
    plan_for(catalog, spec_dir).save(plan_file)
    # an unrelated change: the saved plan still applies, on the new latest version
    catalog.create_namespace("unrelated")
    result = apply_plan(catalog, Plan.load(plan_file))
    assert result.version == catalog.version and catalog.namespace_exists("extra")
    # a change to a managed object makes a saved plan stale
    write_spec(spec_dir, {**base_docs(), "extra": {"namespace": "extra",
                                                   "properties": {"k": "v"}}})
    plan_for(catalog, spec_dir).save(plan_file)
    catalog.alter_namespace("extra", set_properties={"k": "other"})
    with pytest.raises(StalePlanError, match="plan is stale, re-plan"):
        apply_plan(catalog, Plan.load(plan_file))
    assert catalog.load_namespace("extra").properties == {"k": "other"}


def test_inspect_round_trip(location: Location, tmp_path: Path) -> None:
    catalog = Catalog.create(location.uri, location.storage_options)
    apply_plan(catalog, plan_for(catalog, ROOT / "examples" / "catalog", **EXAMPLE_VARS))
    catalog.create_namespace("api_made", {"x": "1"}, comment="made by hand")
    catalog.create_view("api_made", "v", sql="  SELECT 1  ", columns=[{"name": "a",
                                                                       "type": "int4"}])
    files = inspect(catalog, tmp_path / "inspected")
    assert len(files) == 4
    assert files[0].read_text().startswith("# yaml-language-server: $schema=")
    assert not plan_for(catalog, tmp_path / "inspected").has_changes
    old = tmp_path / "v0"
    inspect(catalog.at_version(0), old)
    assert list(old.iterdir()) == []


# --- property-based: random specs --------------------------------------------------------

names = st.sampled_from(["a", "b", "c", "d"])
types = st.sampled_from(["int4", "int8", "varchar", "date", "decimal(10,2)", "boolean"])
columns = st.lists(st.fixed_dictionaries({"name": st.sampled_from(["x", "y", "z", "w"]),
                                          "type": types, "nullable": st.booleans()}),
                   min_size=1, max_size=3, unique_by=lambda c: c["name"])
tables = st.dictionaries(names, st.fixed_dictionaries(
    {"columns": columns, "properties": st.dictionaries(names, names, max_size=2)}),
    max_size=3)
specs = st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.fixed_dictionaries(
    {"properties": st.dictionaries(names, names, max_size=2), "tables": tables}),
    min_size=1, max_size=3)


def to_docs(spec: dict[str, Any]) -> dict[str, Any]:
    docs = {}
    for ns, body in spec.items():
        doc = {"namespace": ns, **body}
        views = {f"v_{t}": {"sql": f"SELECT * FROM {ns}.{t}", "references": [f"{ns}.{t}"]}
                 for t in list(body["tables"])[:1]}
        if views:
            doc["views"] = views
        docs[ns] = doc
    docs["settings"] = {"manage": ["n*"]}
    return docs


def state(catalog: Catalog) -> Any:
    namespaces, tables_, views = catalog.load_all()
    return (sorted((n.name, sorted(n.properties.items())) for n in namespaces),
            sorted((t.namespace, t.name, tuple(c.without_ids() for c in t.columns),
                    sorted(t.properties.items())) for t in tables_),
            sorted((v.namespace, v.name, v.sql) for v in views))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=specs, second=specs)
def test_random_specs_converge(first: dict[str, Any], second: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Catalog.create(f"memory://prop-{next(_ids)}")
        spec_a = write_spec(Path(tmp) / "a", to_docs(first))
        apply_plan(catalog, plan_for(catalog, spec_a), allow_destructive=True)
        assert not plan_for(catalog, spec_a).has_changes
        spec_b = write_spec(Path(tmp) / "b", to_docs(second))
        apply_plan(catalog, plan_for(catalog, spec_b), allow_destructive=True)
        assert not plan_for(catalog, spec_b).has_changes
        fresh = Catalog.create(f"memory://prop-{next(_ids)}")
        apply_plan(fresh, plan_for(fresh, spec_b))
        assert state(catalog) == state(fresh)  # A then B ends exactly where B alone does


# --- CLI ------------------------------------------------------------------------------------


def test_cli_workflow_and_exit_codes(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    env = {"OLYMPIA_CATALOG": warehouse, "NO_COLOR": "1"}
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(main, list(args), env=env)

    assert run("init").exit_code == 0
    spec_dir = write_spec(tmp_path / "spec", base_docs())
    out = run("plan", str(spec_dir), "--detailed-exitcode", "--out", str(tmp_path / "p.json"))
    assert out.exit_code == 2, out.output
    out = run("apply", str(tmp_path / "p.json"), "--auto-approve", "--git-commit", "abc")
    assert out.exit_code == 0 and "as version 1" in out.output
    assert run("plan", str(spec_dir), "--detailed-exitcode").exit_code == 0
    log = json.loads(run("log", "--json", "-n", "1").output)
    assert log[0]["info"]["git_commit"] == "abc"
    # destructive refused: exit 5
    write_spec(spec_dir, changed_docs())
    out = run("apply", str(spec_dir), "--auto-approve")
    assert out.exit_code == 5 and "--allow-destructive" in out.output
    # stale saved plan: exit 4
    assert run("plan", str(spec_dir), "--out", str(tmp_path / "p2.json")).exit_code == 0
    Catalog.open(warehouse).alter_table("sales.orders", set_properties={"x": "y"})
    out = run("apply", str(tmp_path / "p2.json"), "--auto-approve", "--allow-destructive")
    assert out.exit_code == 4 and "stale" in out.output
    # invalid spec: exit 3, file:line in the message, no traceback
    (spec_dir / "broken.yaml").write_text("namespace: x\ntables: {t: {colums: []}}\n")
    out = run("validate", str(spec_dir))
    assert out.exit_code == 3 and "broken.yaml:2:" in out.output
    assert "Traceback" not in out.output
    # json plan is versioned and machine-readable
    (spec_dir / "broken.yaml").unlink()
    data = json.loads(run("plan", str(spec_dir), "--json").output)
    assert data["format"] == "olympia-plan" and data["format_version"] == 1
    # without --auto-approve and no terminal: refuse
    out = run("apply", str(spec_dir), "--allow-destructive")
    assert out.exit_code != 0 and "--auto-approve" in out.output


def test_inspect_cli_round_trip(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    runner = CliRunner()
    env = {"OLYMPIA_CATALOG": warehouse}
    runner.invoke(main, ["init"], env=env)
    out = runner.invoke(main, ["apply", str(ROOT / "examples" / "catalog"), "--auto-approve",
                               "--var-file", str(ROOT / "examples" / "vars.yaml")], env=env)
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["inspect", "--out", str(tmp_path / "i")], env=env)
    assert out.exit_code == 0
    out = runner.invoke(main, ["plan", str(tmp_path / "i"), "--detailed-exitcode"], env=env)
    assert out.exit_code == 0, out.output


def test_applying_spec_on_s3_is_one_version(s3_server: Any) -> None:
    location = Location(f"s3://{s3_server.bucket}/plan-{next(_ids)}",
                        dict(s3_server.storage_options), "s3")
    catalog = Catalog.create(location.uri, location.storage_options)
    result = apply_plan(catalog, plan_for(catalog, ROOT / "examples" / "catalog",
                                          **EXAMPLE_VARS))
    assert result.version == 1
    reopened = Catalog.open(location.uri, location.storage_options)
    assert reopened.version == 1
    assert not plan_for(reopened, ROOT / "examples" / "catalog", **EXAMPLE_VARS).has_changes


