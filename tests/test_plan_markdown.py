"""Markdown plans for pull requests (golden files), saved plans rendered the same way, and the
example CI workflow: valid YAML whose every ``olympia`` command line the CLI accepts."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from cli_helpers import Cli
from plan_helpers import ROOT, check_golden, memory_catalog, write_spec

from olympia import Catalog
from olympia.cli import main
from olympia.plan import apply_plan, make_plan
from olympia.plan.markdown import render_markdown
from olympia.spec import load_spec

WORKFLOW = ROOT / "examples" / "ci" / "olympia-catalog.yml"
COLS = [{"name": "id", "type": "int4"}, {"name": "x", "type": "int4"}]


def before() -> dict[str, Any]:
    return {
        "sales": {"namespace": "sales", "tables": {
            "orders": {"format": "parquet", "columns": COLS},
            "scratch": {"format": "parquet"}, "old_name": {"format": "parquet"}},
            "views": {"recent": {"sql": "SELECT id\nFROM sales.orders",
                                 "references": ["sales.orders"]}}},
        "core": {"namespace": "core", "tables": {
            "ledger": {"format": "parquet", "protected": True}}},
    }


def after() -> dict[str, Any]:
    return {
        "sales": {"namespace": "sales", "properties": {"owner": "team-a"}, "tables": {
            "orders": {"format": "parquet", "columns": [
                {"name": "id", "type": "int8"}, {"name": "note", "type": "varchar(20)"}]},
            "new_name": {"format": "parquet", "renamed_from": "old_name"}},
            "views": {"recent": {"sql": "SELECT id\nFROM sales.orders\nWHERE id > 0",
                                 "references": ["sales.orders"]}}},
        "core": {"namespace": "core"},
        "marketing": {"namespace": "marketing", "tables": {
            "campaigns": {"format": "parquet", "columns": [{"name": "id", "type": "int8"}]}}},
    }


def markdown_of(catalog: Catalog, spec: Path) -> str:
    plan = make_plan(catalog, load_spec(spec), git_commit="0123abcd")
    return render_markdown(plan).replace(catalog.uri, "CATALOG")


def test_golden_markdown_plans(tmp_path: Path) -> None:
    catalog = memory_catalog()
    spec = write_spec(tmp_path / "spec", before())
    check_golden("plan_create.md", markdown_of(catalog, spec))
    apply_plan(catalog, make_plan(catalog, load_spec(spec)))
    check_golden("plan_empty.md", markdown_of(catalog, spec))
    write_spec(spec, after())
    text = markdown_of(catalog, spec)
    check_golden("plan_changes.md", text)
    # warnings first: refused and destructive changes come before the table and details
    assert text.index("[!CAUTION]") < text.index("[!WARNING]") < text.index("| | create")
    assert text.index("| | create") < text.index("<details>")
    assert text.count("<details>") == text.count("</details>") == 3  # core, marketing, sales


def test_values_cannot_break_out_of_the_markup(tmp_path: Path) -> None:
    catalog = memory_catalog()
    sneaky = "```\n</details><img src=x onerror=alert(1)>"
    spec = write_spec(tmp_path / "spec", {"s": {"namespace": "s", "comment": sneaky,
                                                "tables": {"t": {"format": "parquet"}}}})
    text = markdown_of(catalog, spec)
    assert "````diff" in text  # the fence outgrows the backticks inside
    body = text.split("````diff\n", 1)[1].split("\n````\n", 1)[0]
    assert "</details><img" in body  # inside the code block: shown, never interpreted
    assert text.count("</details>") == 2  # the block's own closing tag, and the quoted one


def test_plan_format_markdown_for_specs_and_saved_plans(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    cli = Cli({"OLYMPIA_CATALOG": warehouse, "NO_COLOR": "1", "OLYMPIA_GIT_COMMIT": "0123abcd",
               "OLYMPIA_PLAN_KEY": "k3y"})
    assert cli("init").exit_code == 0
    spec = write_spec(tmp_path / "spec", before())
    assert cli("apply", str(spec), "--auto-approve").exit_code == 0
    write_spec(spec, after())
    saved = str(tmp_path / "plan.json")
    out = cli("plan", str(spec), "--format", "markdown", "--out", saved, "--detailed-exitcode")
    assert out.exit_code == 2
    uri = Catalog.open(warehouse).uri
    assert out.output.replace(uri, "CATALOG") == (
        (Path(__file__).parent / "golden" / "plan_changes.md").read_text())
    # the saved plan (signed, as OLYMPIA_PLAN_KEY is set) renders the same, classified again
    shown = cli("plan", saved, "--format", "markdown")
    assert shown.exit_code == 0 and shown.output == out.output
    assert cli("plan", saved).output.startswith(f"Olympia plan for {uri}, based on version 1")
    out = cli("plan", saved, "--git-commit", "x")
    assert out.exit_code == 1 and "a saved plan is shown as it was saved" in out.output
    cli.env["OLYMPIA_PLAN_KEY"] = "another"
    assert cli("plan", saved, "--format", "markdown").exit_code == 1  # not signed with it
    cli.env["OLYMPIA_PLAN_KEY"] = "k3y"
    # a saved plan that went stale says so instead of showing changes it cannot apply
    Catalog.open(warehouse).alter_table("sales.orders", set_properties={"a": "b"})
    out = cli("plan", saved, "--format", "markdown")
    assert out.exit_code == 4 and "plan is stale, re-plan" in out.output


# --- the example CI workflow ---------------------------------------------------------------


def olympia_commands(script: str) -> list[list[str]]:
    """The arguments of every ``olympia`` command in a shell script (operators such as
    ``>``, ``|`` and ``||`` end a command)."""
    commands = []
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        for i, token in enumerate(tokens):
            if token == "olympia" and (i == 0 or set(tokens[i - 1]) <= set("|&;()")):
                args = []
                for arg in tokens[i + 1:]:
                    if set(arg) <= set("|&;<>()"):
                        break
                    args.append(arg)
                commands.append(args)
    return commands


def parse(args: list[str]) -> click.Context:
    """Parse ``olympia ARGS`` as the CLI would, without running the command."""
    ctx = main.make_context("olympia", list(args))
    name, command, rest = main.resolve_command(ctx, ctx.protected_args + ctx.args)
    assert command is not None, name
    return command.make_context(name or "", rest, parent=ctx)


def test_example_workflow_parses_and_the_cli_accepts_its_commands(
        monkeypatch: pytest.MonkeyPatch) -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text("utf-8"))
    jobs = workflow["jobs"]
    assert set(jobs) == {"validate", "plan-comment", "plan", "apply", "drift"}
    assert workflow[True] is not None  # "on:" (YAML 1.1 reads the key as true)
    monkeypatch.setenv("OLYMPIA_CATALOG", "s3://bucket/catalog")
    commands = [args for job in jobs.values() for step in job["steps"] if "run" in step
                for args in olympia_commands(step["run"])]
    assert [c[0] for c in commands] == ["validate", "fmt", "plan", "plan", "plan", "apply",
                                        "drift"]
    for args in commands:
        ctx = parse(args)
        assert ctx.command.name == args[0]
    by_name = {args[0] + " " + args[1]: parse(args).params for args in commands}
    assert by_name["validate catalog/"]["as_json"] is True
    assert by_name["apply plan.json"]["auto_approve"] is True
    assert by_name["fmt --check"]["check"] is True
    markdown = [parse(a).params for a in commands if "markdown" in a]
    assert markdown and all(p["output_format"] == "markdown" for p in markdown)
    assert any(p["out"] == "plan.json" for p in markdown)  # the PR comment job saves it too
    # the saved plan is signed and checked with OLYMPIA_PLAN_KEY where it is made and applied
    for name in ("plan-comment", "plan", "apply"):
        assert "secrets.OLYMPIA_PLAN_KEY" in jobs[name]["env"]["OLYMPIA_PLAN_KEY"]
    for name in ("plan-comment", "plan", "apply", "drift"):
        assert "secrets." in jobs[name]["env"]["OLYMPIA_STORAGE_OPTIONS"]
    # secrets reach only the jobs that use the catalog
    assert "env" not in jobs["validate"] and "secrets." not in str(workflow["env"])
    assert jobs["apply"]["needs"] == "plan" and jobs["apply"]["environment"] == "catalog"
    # the checker itself refuses what the CLI refuses
    with pytest.raises(click.UsageError):
        parse(["plan", "catalog/", "--format", "html"])
    assert olympia_commands("x=1; olympia plan a --out p.json > p.md || true") == [
        ["plan", "a", "--out", "p.json"]]
