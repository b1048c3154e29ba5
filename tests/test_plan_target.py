"""``olympia plan/apply --target KIND.NAME`` through the CLI: the subset planned, what it
pulls in, drops, staleness of saved targeted plans, forged ones, bad targets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli
from click.testing import Result
from plan_helpers import write_spec

from olympia.plan.planfile import seal


def cols(*names: str) -> list[dict[str, str]]:
    return [{"name": n, "type": "int8"} for n in names]


def docs(orders: tuple[str, ...] = ("id",), scratch: tuple[str, ...] = ("id",),
         people: bool = True, protected_scratch: bool = False) -> dict[str, Any]:
    sales: dict[str, Any] = {
        "namespace": "sales",
        "tables": {"orders": {"columns": cols(*orders)},
                   "scratch": {"columns": cols(*scratch), "protected": protected_scratch}},
        "views": {"big": {"sql": "select id from sales.orders",
                          "references": ["sales.orders"], "columns": cols("id")},
                  "top": {"sql": "select id from sales.big",
                          "references": ["sales.big"], "columns": cols("id")}}}
    hr: dict[str, Any] = {"namespace": "hr", "tables": {"people": {"columns": cols("id")}}}
    if not people:
        hr["tables"] = {}
    return {"sales": sales, "hr": hr}


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = Cli({"OLYMPIA_CATALOG": str(tmp_path / "wh"), "NO_COLOR": "1",
               "OLYMPIA_GIT_COMMIT": None, "OLYMPIA_PLAN_KEY": None})
    assert cli("init").exit_code == 0
    return cli


def ok(result: Result, code: int = 0) -> Result:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def planned(cli: Cli, spec: Path, *targets: str) -> list[tuple[str, str, str]]:
    args = [a for t in targets for a in ("--target", t)]
    data = json.loads(ok(cli("plan", str(spec), "--json", *args)).output)
    return [(c["action"], c["type"], c["name"]) for c in data["changes"]]


def catalog_state(cli: Cli) -> dict[str, list[str]]:
    """Each table and view (``ns.name``) with its column names."""
    shown = json.loads(ok(cli("show", "--json")).output)
    return {f"{o['namespace']}.{o['object_name']}": [c["name"] for c in o["columns"]]
            for o in shown["tables"] + shown["views"]}


def test_only_the_targeted_table_and_its_namespace_are_planned(cli: Cli, tmp_path: Path,
                                                               ) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    assert planned(cli, spec, "table.sales.orders") == [
        ("create", "namespace", "sales"), ("create", "table", "sales.orders")]
    text = ok(cli("plan", str(spec), "--target", "table.sales.orders")).output
    assert ("Targeted plan: only table.sales.orders and what it needs; other changes in the "
            "spec are not shown.") in text
    assert "scratch" not in text.split("Warnings:")[0] and "hr" not in text.split("Warnings:")[0]
    markdown = ok(cli("plan", str(spec), "--target", "table.sales.orders",
                      "--format", "markdown")).output
    assert "**Targeted plan: only table.sales.orders and what it needs;" in markdown
    data = json.loads(ok(cli("plan", str(spec), "--json", "--target", "table.sales.orders",
                             "--target", "table.sales.orders")).output)
    assert data["format_version"] == 3
    assert data["targets"] == [{"type": "table", "namespace": "sales", "object_name": "orders"}]
    whole = json.loads(ok(cli("plan", str(spec), "--json")).output)
    assert whole["format_version"] == 2 and "targets" not in whole


def test_a_view_pulls_in_what_it_references_and_a_namespace_covers_its_objects(
        cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    assert planned(cli, spec, "view.sales.big") == [
        ("create", "namespace", "sales"), ("create", "table", "sales.orders"),
        ("create", "view", "sales.big")]
    assert planned(cli, spec, "view.sales.top") == [
        ("create", "namespace", "sales"), ("create", "table", "sales.orders"),
        ("create", "view", "sales.big"), ("create", "view", "sales.top")]
    assert planned(cli, spec, "namespace.hr") == [
        ("create", "namespace", "hr"), ("create", "table", "hr.people")]
    assert planned(cli, spec, "namespace.hr", "table.sales.scratch") == [
        ("create", "namespace", "hr"), ("create", "namespace", "sales"),
        ("create", "table", "hr.people"), ("create", "table", "sales.scratch")]
    ok(cli("apply", str(spec), "--auto-approve"))
    text = ok(cli("plan", str(spec), "--target", "view.sales.big", "--detailed-exitcode"))
    assert text.output.rstrip().endswith("No changes to the targeted objects.")


def test_apply_with_targets_changes_only_the_targeted_objects(cli: Cli, tmp_path: Path,
                                                              ) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    out = ok(cli("apply", str(spec), "--target", "table.sales.orders", "--auto-approve"))
    assert "Applied 2 changes as version 1." in out.output
    assert catalog_state(cli) == {"sales.orders": ["id"]}
    ok(cli("apply", str(spec), "--auto-approve"))
    write_spec(spec, docs(orders=("id", "amount"), scratch=("id", "note")))
    ok(cli("apply", str(spec), "--target", "table.sales.scratch", "--auto-approve"))
    assert catalog_state(cli) == {"sales.orders": ["id"], "sales.scratch": ["id", "note"],
                                  "sales.big": ["id"], "sales.top": ["id"], "hr.people": ["id"]}


def test_targeting_an_undeclared_object_plans_its_drop_gated(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    ok(cli("apply", str(spec), "--auto-approve"))
    gone = docs(people=False)
    del gone["sales"]["tables"]["scratch"]
    write_spec(spec, gone)
    assert planned(cli, spec, "table.sales.scratch") == [("drop", "table", "sales.scratch")]
    out = ok(cli("apply", str(spec), "--target", "table.sales.scratch", "--auto-approve"), 5)
    assert "--allow-destructive" in out.output
    ok(cli("apply", str(spec), "--target", "table.sales.scratch", "--auto-approve",
           "--allow-destructive"))
    assert set(catalog_state(cli)) == {"sales.orders", "sales.big", "sales.top", "hr.people"}


def test_a_protected_targeted_object_is_never_dropped(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs(protected_scratch=True))
    ok(cli("apply", str(spec), "--auto-approve"))
    gone = docs()
    del gone["sales"]["tables"]["scratch"]
    write_spec(spec, gone)
    out = ok(cli("apply", str(spec), "--target", "table.sales.scratch", "--auto-approve",
                 "--allow-destructive"), 5)
    assert "protected" in out.output
    assert "sales.scratch" in catalog_state(cli)


def test_a_saved_targeted_plan_is_stale_only_when_a_covered_object_changed(
        cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    ok(cli("apply", str(spec), "--auto-approve"))
    write_spec(spec, docs(orders=("id", "amount"), scratch=("id", "note"), people=False))
    saved = str(tmp_path / "orders.json")
    ok(cli("plan", str(spec), "--target", "table.sales.orders", "--out", saved))
    # another table of the same namespace, and a table of another namespace, change
    other = write_spec(tmp_path / "other", docs(scratch=("id", "x"), people=False))
    ok(cli("apply", str(other), "--target", "table.sales.scratch", "--target",
           "table.hr.people", "--auto-approve", "--allow-destructive"))
    out = ok(cli("apply", saved, "--auto-approve"))
    assert "Targeted plan: only table.sales.orders" in out.output
    assert catalog_state(cli) == {"sales.orders": ["id", "amount"], "sales.scratch": ["id", "x"],
                                  "sales.big": ["id"], "sales.top": ["id"]}
    # the targeted object itself changes after planning: refused, nothing applied
    ok(cli("plan", str(spec), "--target", "table.sales.scratch", "--out", saved))
    ok(cli("apply", str(spec), "--target", "table.sales.scratch", "--auto-approve",
           "--allow-destructive"))
    write_spec(other, docs(scratch=("id", "y")))
    ok(cli("apply", str(other), "--target", "table.sales.scratch", "--auto-approve",
           "--allow-destructive"))
    out = ok(cli("apply", saved, "--auto-approve", "--allow-destructive"), 4)
    assert "plan is stale, re-plan" in out.output
    assert catalog_state(cli)["sales.scratch"] == ["id", "y"]


def forge(path: Path, edit: Any) -> None:
    """Edit a saved plan's body with ``edit`` and seal it again (anyone can)."""
    data = json.loads(path.read_text())
    body = {k: v for k, v in data.items() if k not in ("checksum", "signature")}
    edit(body)
    path.write_text(json.dumps(seal(body)))


def test_a_forged_targeted_plan_is_refused(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    ok(cli("apply", str(spec), "--auto-approve"))
    write_spec(spec, docs(orders=("id", "amount")))
    saved = tmp_path / "orders.json"
    ok(cli("plan", str(spec), "--target", "table.sales.orders", "--out", str(saved)))
    before = catalog_state(cli)

    def slip_in_a_drop(body: dict[str, Any]) -> None:  # hr is managed: the scope allows it
        body["changes"][0]["ops"].append({"op": "drop_table", "identifier": ["hr", "people"]})

    forge(saved, slip_in_a_drop)
    for command in (("plan", str(saved)), ("apply", str(saved), "--auto-approve",
                                           "--allow-destructive")):
        out = ok(cli(*command), 1)
        assert ("operation drop_table changes hr.people, outside the plan's targets "
                "(table.sales.orders)") in out.output
    assert catalog_state(cli) == before

    def drop_targets(body: dict[str, Any]) -> None:  # a partial plan passed off as whole
        del body["targets"]

    ok(cli("plan", str(spec), "--target", "table.sales.orders", "--out", str(saved)))
    forge(saved, drop_targets)
    out = ok(cli("apply", str(saved), "--auto-approve"), 1)
    assert "targets go with format version 3" in out.output
    assert catalog_state(cli) == before


@pytest.mark.parametrize(("target", "message"), [
    ("tabel.sales.orders", "unknown kind 'tabel' (did you mean table?)"),
    ("table.sales.ordrs", "names no table of the spec or of the namespaces it manages in the "
                          "catalog (did you mean table.sales.orders?)"),
    ("view.sales.orders", "names no view"),
    ("namespace.nowhere", "names no namespace"),
    ("table.sales", "a table is named table.NAMESPACE.NAME"),
    ("table", "no name: write table.NAME"),
    ("table.sales..orders", "malformed name (empty name part)"),
    ('table."sales.orders', "malformed name (unclosed double quote)"),
])
def test_bad_targets_are_clear_errors(cli: Cli, tmp_path: Path, target: str,
                                      message: str) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    for command in ("plan", "apply"):
        out = ok(cli(command, str(spec), "--target", target, "--auto-approve"
                     if command == "apply" else "--detailed-exitcode"), 1)
        assert out.output.startswith(f"Error: --target {target}: {message}"), out.output
    assert catalog_state(cli) == {}


def test_dotted_names_are_quoted_or_resolved(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", {
        "dotted": {"namespace": "raw.events", "tables": {"clicks": {}}},
        "plain": {"namespace": "raw", "tables": {"events.clicks": {}, "other": {}}}})
    assert planned(cli, spec, 'table."raw.events".clicks') == [
        ("create", "namespace", "raw.events"), ("create", "table", "raw.events.clicks")]
    assert planned(cli, spec, 'table.raw."events.clicks"') == [
        ("create", "namespace", "raw"), ("create", "table", "raw.events.clicks")]
    assert planned(cli, spec, "namespace.raw.events") == [
        ("create", "namespace", "raw.events"), ("create", "table", "raw.events.clicks")]
    out = ok(cli("plan", str(spec), "--target", "table.raw.events.clicks"), 1)
    assert ('ambiguous: table.raw."events.clicks" and table."raw.events".clicks both exist; '
            "quote the parts holding dots") in out.output
    data = json.loads(ok(cli("plan", str(spec), "--json", "--target",
                             'table."raw.events".clicks')).output)
    assert data["targets"] == [{"type": "table", "namespace": "raw.events",
                                "object_name": "clicks"}]


def test_target_with_a_saved_plan_is_an_error(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    saved = str(tmp_path / "p.json")
    ok(cli("plan", str(spec), "--target", "namespace.hr", "--out", saved))
    for command in ("plan", "apply"):
        out = ok(cli(command, saved, "--target", "namespace.hr"), 1)
        assert "--target" in out.output and "saved" in out.output
    out = ok(cli("apply", saved, "--auto-approve"))
    assert "Targeted plan: only namespace.hr and what it needs" in out.output
    assert catalog_state(cli) == {"hr.people": ["id"]}
