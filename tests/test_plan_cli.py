"""The catalog-as-code commands through click's CliRunner: workflow and every exit code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from plan_helpers import EXAMPLE, ROOT, check_golden, write_spec, write_text

from olympia import Catalog
from olympia.cli import main
from olympia.spec import schema


class Cli:
    def __init__(self, tmp_path: Path) -> None:
        self.warehouse = str(tmp_path / "wh")
        self.env: dict[str, str | None] = {"OLYMPIA_CATALOG": self.warehouse, "NO_COLOR": "1",
                                           "OLYMPIA_GIT_COMMIT": None}
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None) -> Result:
        result = self.runner.invoke(main, list(args), env=self.env, input=input)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            "".join(traceback.format_exception(result.exception)))
        return result


def docs() -> dict[str, Any]:
    return {"sales": {"namespace": "sales", "tables": {
        "orders": {"columns": [{"name": "id", "type": "int8"}, {"name": "x", "type": "int4"}]},
        "scratch": {}}}}


def error_line(result: Result) -> str:
    """The one line a failed command printed, which must be all it printed."""
    (line,) = result.output.splitlines()
    assert line.startswith("Error: "), line
    return line


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = Cli(tmp_path)
    assert cli("init").exit_code == 0
    return cli


def test_plan_save_apply_and_log(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    plan_file = str(tmp_path / "p.json")
    out = cli("plan", str(spec), "--detailed-exitcode", "--out", plan_file)
    assert out.exit_code == 2, out.output
    assert "+ table sales.orders" in out.output and f"olympia apply {plan_file}" in out.output
    out = cli("apply", plan_file, "--auto-approve", "--git-commit", "abc123")
    assert out.exit_code == 0, out.output
    assert out.output.rstrip().endswith("Applied 3 changes as version 1.")
    assert cli("plan", str(spec), "--detailed-exitcode").exit_code == 0
    (entry,) = json.loads(cli("log", "--json", "-n", "1").output)
    assert entry["info"]["git_commit"] == "abc123" and entry["info"]["spec_digest"]


def test_exit_codes(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    assert cli("apply", str(spec), "--auto-approve").exit_code == 0
    # 5: destructive change refused (before asking anything)
    changed = docs()
    del changed["sales"]["tables"]["scratch"]
    write_spec(spec, changed)
    out = cli("apply", str(spec))
    assert out.exit_code == 5 and "--allow-destructive" in out.output
    assert "- table sales.scratch: drops table sales.scratch" in out.output
    # 4: stale saved plan
    plan_file = str(tmp_path / "p.json")
    assert cli("plan", str(spec), "--out", plan_file).exit_code == 0
    Catalog.open(cli.warehouse).alter_table("sales.orders", set_properties={"x": "y"})
    out = cli("apply", plan_file, "--auto-approve", "--allow-destructive")
    assert out.exit_code == 4 and "plan is stale, re-plan" in out.output
    # 3: invalid spec, every problem as file:line:col, nothing written
    write_text(spec, "broken.yaml", "namespace: x\ntables: {t: {colums: []}}\n")
    for command in (["validate", str(spec)], ["plan", str(spec)],
                    ["apply", str(spec), "--auto-approve"]):
        out = cli(*command)
        assert out.exit_code == 3 and f"{spec / 'broken.yaml'}:2:14: tables.t: unknown key" \
            in out.output
    assert Catalog.open(cli.warehouse).version == 2
    (spec / "broken.yaml").unlink()
    # 1: other errors, one line, no traceback
    out = cli("plan", str(spec), "-c", str(tmp_path / "nowhere"))
    assert out.exit_code == 1 and out.output.startswith("Error: no Olympia catalog at")
    out = cli("apply", str(tmp_path / "missing.json"))
    assert out.exit_code == 3  # not a file: read as a spec path that does not exist
    (tmp_path / "junk.json").write_text("[]")
    out = cli("apply", str(tmp_path / "junk.json"), "--auto-approve")
    assert out.exit_code == 1 and "not an olympia-plan file" in out.output
    out = cli("plan", str(spec), "--var", "novalue")
    assert out.exit_code == 1 and "--var needs NAME=VALUE" in out.output
    # 5 as well: protected objects are refused even with --allow-destructive
    protected = docs()
    protected["sales"]["tables"]["orders"]["protected"] = True
    write_spec(spec, protected)
    assert cli("apply", str(spec), "--auto-approve").exit_code == 0
    write_spec(spec, {"sales": {"namespace": "sales"}})
    out = cli("apply", str(spec), "--auto-approve", "--allow-destructive")
    assert out.exit_code == 5 and "protected" in out.output


def test_interactive_confirmation(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    out = cli("apply", str(spec), input="no\n")
    assert out.exit_code == 1 and "apply cancelled; nothing was changed" in out.output
    out = cli("apply", str(spec))  # no input at all (CI without --auto-approve)
    assert out.exit_code == 1
    assert Catalog.open(cli.warehouse).version == 0
    out = cli("apply", str(spec), input="yes\n")
    assert out.exit_code == 0 and "Only 'yes' will be accepted" in out.output
    assert Catalog.open(cli.warehouse).version == 1
    out = cli("apply", str(spec))  # nothing to do: nothing to confirm
    assert out.exit_code == 0 and "No changes." in out.output


def test_json_outputs_and_variables(cli: Cli, tmp_path: Path, ) -> None:
    vars_file = ROOT / "examples" / "vars.yaml"
    out = cli("validate", str(EXAMPLE))
    assert out.exit_code == 3 and "undefined variable 'finance_retention'" in out.output
    out = cli("validate", str(EXAMPLE), "--var-file", str(vars_file))
    assert out.exit_code == 0
    assert out.output == "Valid: 4 files, 4 namespaces, 6 tables, 5 views.\n"
    out = cli("plan", str(EXAMPLE), "--json", "--var", "finance_retention=1y")
    data = json.loads(out.output)
    assert data["format"] == "olympia-plan" and data["format_version"] == 2
    assert data["summary"]["create"] == 15
    cli.env["OLYMPIA_VAR_finance_retention"] = "2y"
    out = cli("apply", str(EXAMPLE), "--auto-approve", "--json")
    assert json.loads(out.output)["version"] == 1
    assert Catalog.open(cli.warehouse).load_namespace("finance").properties["retention"] == "2y"
    out = cli("apply", str(EXAMPLE), "--auto-approve", "--json")
    assert json.loads(out.output) == {"version": 1, "base_version": 1, "changes": [],
                                      "changed_objects": []}


def test_progress_for_large_applies(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", {"big": {"namespace": "big", "tables": {
        f"t{i:03d}": {} for i in range(60)}}})
    out = cli("apply", str(spec), "--auto-approve")
    assert out.exit_code == 0
    assert "staged 61/61 changes" in out.output and "committing one new version" in out.output


def test_inspect_and_schema_commands(cli: Cli, tmp_path: Path) -> None:
    vars_file = str(ROOT / "examples" / "vars.yaml")
    assert cli("apply", str(EXAMPLE), "--auto-approve", "--var-file", vars_file).exit_code == 0
    out = cli("inspect", "--out", str(tmp_path / "i"))
    assert out.exit_code == 0 and "Wrote 4 spec files for version 1" in out.output
    assert cli("plan", str(tmp_path / "i"), "--detailed-exitcode").exit_code == 0
    out = cli("inspect", "--out", str(tmp_path / "v0"), "--version", "0")
    assert out.exit_code == 0 and "Wrote 1 spec files for version 0" in out.output
    assert cli("plan", str(tmp_path / "v0"), "--detailed-exitcode").exit_code == 0
    out = cli("inspect", "--out", str(tmp_path / "v9"), "--version", "9")
    assert out.exit_code == 1 and "version 9 does not exist" in out.output
    write_text(tmp_path / "i", "extra.yaml", "namespace: extra\n")
    out = cli("inspect", "--out", str(tmp_path / "i"))
    assert out.exit_code == 1 and "--clean" in out.output
    assert cli("inspect", "--out", str(tmp_path / "i"), "--clean").exit_code == 0
    assert json.loads(cli("schema").output) == schema()


def test_usage_errors_exit_1_so_that_2_only_means_changes(cli: Cli, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path / "spec", docs()))
    out = cli("plan")
    assert out.exit_code == 1
    assert error_line(out) == "Error: Missing argument 'SPEC'. (see 'main plan --help')"
    for args in (["plan", spec, "--bogus"], ["nosuchcommand"], ["inspect", "--version", "x"],
                 ["plan", spec, "--storage-option", "novalue"]):
        out = cli(*args)
        assert out.exit_code == 1 and error_line(out), args
    cli.env["OLYMPIA_STORAGE_OPTIONS"] = "{not json"
    out = cli("plan", spec)
    assert out.exit_code == 1
    assert error_line(out).startswith("Error: OLYMPIA_STORAGE_OPTIONS is not valid JSON")
    cli.env["OLYMPIA_STORAGE_OPTIONS"] = "[1]"
    line = error_line(cli("plan", spec))  # the value itself is never echoed (it may be secret)
    assert line.startswith("Error: OLYMPIA_STORAGE_OPTIONS must be a JSON object, got ")
    assert "[1]" not in line
    del cli.env["OLYMPIA_STORAGE_OPTIONS"]
    assert cli("plan", spec, "--detailed-exitcode").exit_code == 2
    for args in (["--help"], ["plan", "--help"], ["-h"], ["--version"]):
        assert cli(*args).exit_code == 0, args
    # the console script itself
    script = Path(sys.executable).with_name("olympia")
    proc = subprocess.run([str(script), "plan", "--bogus"], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout) == (1, "")
    (line,) = proc.stderr.splitlines()
    assert line.startswith("Error: No such option '--bogus'.")
    assert line.endswith("(see 'olympia plan --help')")


def test_file_errors_and_too_deep_input_are_one_line_errors(cli: Cli, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path / "spec", docs()))
    missing = tmp_path / "nonexistent" / "dir" / "p.json"
    for args in (["plan", spec, "--out", str(missing)], ["schema", "--out", str(missing)]):
        out = cli(*args)
        assert out.exit_code == 1
        assert error_line(out) == f"Error: {missing}: No such file or directory"
    (tmp_path / "file").write_text("")
    out = cli("inspect", "--out", str(tmp_path / "file" / "sub"))
    assert out.exit_code == 1 and error_line(out) == (
        f"Error: {tmp_path / 'file' / 'sub'}: Not a directory")
    deep = write_text(tmp_path / "deep", "a.yaml", "namespace: s\ncomment: " + "[" * 5000
                      + "]" * 5000 + "\n")
    out = cli("validate", str(deep.parent))
    assert out.exit_code == 3
    assert error_line(out) == f"Error: {deep}:2:109: collections nested more than 100 levels deep"
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    out = cli("apply", str(tmp_path / "deep.json"), "--auto-approve")
    assert out.exit_code == 1 and "not a readable plan file" in error_line(out)


def test_inspect_of_an_empty_catalog_plans_to_no_changes(cli: Cli, tmp_path: Path) -> None:
    out_dir = tmp_path / "i"
    out = cli("inspect", "--out", str(out_dir))
    assert out.exit_code == 0 and "Wrote 1 spec files for version 0" in out.output
    assert cli("plan", str(out_dir), "--detailed-exitcode").exit_code == 0
    # declaring nothing, it manages nothing: planned against a full catalog, no drops
    assert cli("apply", str(write_spec(tmp_path / "spec", docs())), "--auto-approve"
               ).exit_code == 0
    out = cli("plan", str(out_dir), "--detailed-exitcode")
    assert out.exit_code == 0 and "No changes." in out.output
    # inspecting into the same folder again replaces the empty-catalog file
    assert cli("inspect", "--out", str(out_dir)).exit_code == 0
    assert sorted(p.name for p in out_dir.glob("*.yaml")) == ["sales.yaml"]


def test_the_git_commit_is_recorded_at_plan_time(cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec", docs())
    plan_file = str(tmp_path / "p.json")
    assert cli("plan", str(spec), "--out", plan_file, "--git-commit", "abc123").exit_code == 0
    assert json.loads(Path(plan_file).read_text())["spec"]["git_commit"] == "abc123"
    assert cli("apply", plan_file, "--auto-approve").exit_code == 0
    (entry,) = json.loads(cli("log", "--json", "-n", "1").output)
    assert entry["info"]["git_commit"] == "abc123"
    # at apply, --git-commit (or OLYMPIA_GIT_COMMIT) overrides the plan's
    write_spec(spec, docs() | {"hr": {"namespace": "hr"}})
    cli.env["OLYMPIA_GIT_COMMIT"] = "from-env"
    assert cli("plan", str(spec), "--out", plan_file).exit_code == 0
    assert json.loads(Path(plan_file).read_text())["spec"]["git_commit"] == "from-env"
    assert cli("apply", plan_file, "--auto-approve", "--git-commit", "def456").exit_code == 0
    (entry,) = json.loads(cli("log", "--json", "-n", "1").output)
    assert entry["info"]["git_commit"] == "def456"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_git_commit_is_detected_where_the_spec_is(cli: Cli, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    spec = write_spec(repo / "catalog", docs())
    write_text(repo, "README", "not part of the spec\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "spec"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()

    def planned() -> str:
        assert cli("plan", str(spec), "--out", str(tmp_path / "p.json")).exit_code == 0
        return str(json.loads((tmp_path / "p.json").read_text())["spec"]["git_commit"])

    assert planned() == head
    (repo / "README").write_text("edited, outside the spec\n")
    assert planned() == head
    write_text(spec, "hr.yaml", "namespace: hr\n")
    assert planned() == f"{head}-dirty"
    cli.env["PATH"] = str(tmp_path / "no-git-here")  # no git at all: nothing recorded
    assert planned() == ""
    del cli.env["PATH"]
    assert cli("apply", str(spec), "--auto-approve").exit_code == 0
    (entry,) = json.loads(cli("log", "--json", "-n", "1").output)
    assert entry["info"]["git_commit"] == f"{head}-dirty"


def test_apply_json_shows_the_plan_on_stderr_before_asking(cli: Cli, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path / "spec", docs()))
    out = cli("apply", spec, "--json", input="no\n")
    assert out.exit_code == 1 and "+ table sales.orders" in out.stderr and out.stdout == ""
    out = cli("apply", spec, "--json", input="yes\n")
    assert out.exit_code == 0 and "+ table sales.orders" in out.stderr
    assert json.loads(out.stdout)["version"] == 1
    write_spec(Path(spec), docs() | {"hr": {"namespace": "hr"}})
    out = cli("apply", spec, "--json", "--auto-approve")  # nothing to confirm: nothing shown
    assert out.exit_code == 0 and out.stderr == "" and json.loads(out.stdout)["version"] == 2


def _device(screen: list[dict[str, Any]], os_type: str = "varchar") -> dict[str, Any]:
    return {"name": "device", "type": "struct", "comment": "client device", "fields": [
        {"name": "os", "type": os_type},
        {"name": "screen", "type": "struct", "fields": screen},
        {"name": "tags", "type": "list", "element": {"type": "varchar"}}]}


def test_nested_type_changes_name_each_field(cli: Cli, tmp_path: Path) -> None:
    """Issue 15, finding 1: a change inside a struct names the fields it adds, removes and
    retypes, in text, JSON and Markdown, instead of two whole types on one line."""
    def doc(device: dict[str, Any]) -> dict[str, Any]:
        return {"shop": {"namespace": "shop", "tables": {"events": {
            "format": "parquet",
            "columns": [{"name": "id", "type": "bigint", "comment": "event id"}, device]}}}}

    spec = tmp_path / "spec"
    write_spec(spec, doc(_device([{"name": "w", "type": "int"}, {"name": "h", "type": "int"}])))
    assert cli("apply", str(spec), "--auto-approve").exit_code == 0
    changed = _device([{"name": "w", "type": "bigint"}, {"name": "dpr", "type": "float"}],
                      os_type="int")
    changed["fields"][2]["element"] = {"type": "varchar", "nullable": False}
    changed["fields"].append({"name": "model", "type": "varchar", "comment": "as reported",
                              "properties": {"pii": "no"}})
    write_spec(spec, doc(changed))
    out = cli("plan", str(spec))
    assert out.exit_code == 0, out.output
    check_golden("plan_nested.txt", out.output.replace(cli.warehouse, "CATALOG"))
    assert "struct<" not in out.output  # no whole types on one line
    data = json.loads(cli("plan", str(spec), "--json").output)
    (device,) = [d for d in data["changes"][0]["details"] if d["attr"] == "column device"]
    assert device["incompatible"] and device["before"].startswith("struct<os: varchar")
    inner = {d["attr"]: d for d in device["nested"]}
    assert set(inner) == {"os", "screen", "tags", "model"}
    assert inner["os"]["before"] == "varchar" and inner["os"]["after"] == "int4"
    screen = {d["attr"]: (d["before"], d["after"]) for d in inner["screen"]["nested"]}
    assert screen == {"h": ("int4", None), "dpr": (None, "float4"), "w": ("int4", "int8")}
    assert inner["tags"]["nested"][0]["attr"] == "element"
    assert [d["attr"] for d in inner["model"]["nested"]] == ["comment", "properties.pii"]
    markdown = cli("plan", str(spec), "--format", "markdown").output
    check_golden("plan_nested.md", markdown.replace(cli.warehouse, "CATALOG"))
    assert "!       column device  [incompatible]" in markdown
    assert "-               h: int4  [incompatible]" in markdown
    assert "+               dpr: float4" in markdown
