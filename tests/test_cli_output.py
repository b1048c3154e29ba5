"""Issue 15 findings 4, 7 and 9 through the command line: colour through pipes, a closed
stdout, ``validate --json``, history detail (column-level diffs, renames, namespace renames
in the log, every field in ``show --json``, one type spelling) and CLI words in messages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Cli
from plan_helpers import write_spec, write_text

from benchmarks.common import recording
from olympia import Catalog
from olympia.plan.versiondiff import version_diff

SCRIPT = str(Path(sys.executable).with_name("olympia"))
ESC = "\033["


class WarehouseCli(Cli):
    """The CLI on a catalog in ``tmp_path``; colour decided by the command line alone."""

    def __init__(self, tmp_path: Path) -> None:
        self.warehouse = str(tmp_path / "wh")
        super().__init__({"OLYMPIA_CATALOG": self.warehouse, "NO_COLOR": None,
                          "OLYMPIA_GIT_COMMIT": None})


@pytest.fixture
def cli(tmp_path: Path) -> WarehouseCli:
    cli = WarehouseCli(tmp_path)
    assert cli("init").exit_code == 0
    return cli


def spec_docs(columns: list[dict[str, object]]) -> dict[str, object]:
    return {"sales": {"namespace": "sales", "tables": {"orders": {"columns": columns},
                                                       "scratch": {}}}}


ORDERS = [{"name": "id", "type": "int4", "nullable": False, "comment": "the key"},
          {"name": "amount", "type": "decimal(10,2)"},
          {"name": "items", "type": "list", "element": {"type": "struct", "fields": [
              {"name": "sku", "type": "varchar", "nullable": False},
              {"name": "qty", "type": "int4"}]}}]


def applied(cli: WarehouseCli, tmp_path: Path, columns: list[dict[str, object]] = ORDERS) -> Path:
    spec = write_spec(tmp_path / "spec", spec_docs(columns))
    out = cli("apply", str(spec), "--auto-approve")
    assert out.exit_code == 0, out.output
    return spec


# --- finding 4: colour, pipes, validate --json ------------------------------------------------


def test_color_always_never_auto_and_no_color(cli: WarehouseCli, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path / "spec", spec_docs(ORDERS)))
    # CliRunner's stdout is not a terminal, like a CI log: auto means no colour
    assert ESC not in cli("plan", spec).output
    always = cli("plan", spec, "--color", "always").output
    assert f"{ESC}32m  + table sales.orders{ESC}0m" in always
    assert re.sub(r"\033\[\d+m", "", always) == cli("plan", spec, "--color", "never").output
    assert ESC not in cli("plan", spec, "--no-color").output
    out = cli("plan", spec, "--color", "sometimes")
    assert out.exit_code == 1 and "'sometimes' is not one of" in out.output
    cli.env["NO_COLOR"] = "1"
    assert ESC not in cli("plan", spec).output
    assert ESC in cli("plan", spec, "--color", "always").output  # explicit beats NO_COLOR
    cli.env["NO_COLOR"] = None
    assert cli("apply", spec, "--auto-approve").exit_code == 0
    for command in (["log"], ["show"], ["diff", "0", "1"],
                    ["rollback", "--to", "0", "--dry-run"]):
        assert ESC in cli(*command, "--color", "always").output, command
        assert ESC not in cli(*command, "--color", "never").output, command
        assert ESC not in cli(*command).output, command


def test_color_through_a_real_pipe(cli: WarehouseCli, tmp_path: Path) -> None:
    """The console script writing into a pipe (a CI log): colour only with --color always."""
    spec = str(write_spec(tmp_path / "spec", spec_docs(ORDERS)))
    env = {**os.environ, "OLYMPIA_CATALOG": cli.warehouse}
    env.pop("NO_COLOR", None)
    for args, colored in ((["--color", "always"], True), ([], False),
                          (["--color", "auto"], False)):
        proc = subprocess.run([SCRIPT, "plan", spec, *args], capture_output=True, text=True,
                              env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert (ESC in proc.stdout) is colored, args


@pytest.mark.parametrize("command", [["show"], ["log"], ["plan", "SPEC"], ["diff", "0", "1"]])
def test_closed_stdout_exits_quietly(cli: WarehouseCli, tmp_path: Path, command: list[str]) -> None:
    """``olympia show | head -1``: the reader goes away; no "Error: Broken pipe", no Python
    noise about flushing stdout at exit, exit 0."""
    spec = str(applied(cli, tmp_path))
    args = [spec if a == "SPEC" else a for a in command]
    env = {**os.environ, "OLYMPIA_CATALOG": cli.warehouse}
    proc = subprocess.Popen([SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command writes anything: its first write fails
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, stderr
    assert stderr == ""
    # and through a shell pipeline, the way users write it
    shell = subprocess.run(f"set -o pipefail; {SCRIPT} {' '.join(args)} | head -1",
                           shell=True, executable="/bin/bash", capture_output=True,
                           text=True, env=env, timeout=120)
    assert shell.returncode == 0 and shell.stderr == "" and len(shell.stdout.splitlines()) == 1


def test_validate_json(cli: WarehouseCli, tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    write_text(spec, "a.yaml", """
        namespace: a
        tables:
          t: {colums: []}
          u: {columns: [{name: x, type: strng}]}
        """)
    write_text(spec, "b.yaml", "namespace: b\nviews: {v: {sql: 1}}\n")
    out = cli("validate", str(spec), "--json")
    assert out.exit_code == 3  # unchanged: spec invalid
    data = json.loads(out.output)
    assert data["valid"] is False
    problems = data["problems"]
    assert all(set(p) == {"file", "line", "column", "message"} for p in problems)
    a, b = str(spec / "a.yaml"), str(spec / "b.yaml")
    assert {(p["file"], p["line"]) for p in problems} >= {(a, 3), (a, 4), (b, 2)}
    first = next(p for p in problems if p["line"] == 3)
    assert (first["file"], first["column"]) == (a, 7)
    assert first["message"].startswith("tables.t: unknown key 'colums' (did you mean "
                                       "'columns'?)")
    # the human form lists the same problems
    human = cli("validate", str(spec))
    assert human.exit_code == 3
    for p in problems:
        assert f"{p['file']}:{p['line']}:{p['column']}: {p['message']}" in human.output
    out = cli("validate", str(tmp_path / "missing"), "--json")
    assert out.exit_code == 3
    assert json.loads(out.output)["problems"] == [
        {"file": str(tmp_path / "missing"), "line": None, "column": None,
         "message": "no such file or directory"}]
    (spec / "b.yaml").unlink()
    write_text(spec, "a.yaml", "namespace: a\n")
    out = cli("validate", str(spec), "--json")
    assert out.exit_code == 0
    assert json.loads(out.output) == {"valid": True, "problems": [],
                                      "summary": "1 files, 1 namespaces, 0 tables, 0 views"}


# --- finding 7: history detail -----------------------------------------------------------------


def test_diff_names_columns_and_renames(cli: WarehouseCli, tmp_path: Path) -> None:
    applied(cli, tmp_path)  # version 1
    catalog = Catalog.open(cli.warehouse)
    with catalog.transaction() as txn:  # version 2
        txn.alter_table("sales.orders", rename_columns={"amount": "total"},
                        update_columns={"id": {"name": "id", "type": "int8",
                                               "nullable": False, "comment": "the key"}},
                        add_columns=[{"name": "note", "type": "varchar(20)"}],
                        remove_columns=["items"])
        txn.rename_table("sales.scratch", "scratch2")
    out = cli("diff", "1", "2")
    assert out.exit_code == 0, out.output
    assert out.output == (
        "  ~ table sales.orders\n"
        "      ~ column amount: renamed to total\n"
        "      - column items: list<struct<sku: varchar not null, qty: int4>>\n"
        "      + column note: varchar(20)\n"
        "      ~ column id: int4 not null -> int8 not null\n"
        "  ~ table sales.scratch2 (renamed from sales.scratch)\n"
        "      ~ name: \"sales.scratch\" -> \"sales.scratch2\"\n")
    data = json.loads(cli("diff", "1", "2", "--json").output)
    assert [a["name"] for a in data["added"]] == ["sales.scratch2"]  # the object-level keys
    assert [r["name"] for r in data["removed"]] == ["sales.scratch"]
    renamed = next(c for c in data["changes"] if c["action"] == "rename")
    assert renamed["from"] == {"name": "sales.scratch", "namespace": "sales",
                               "object_name": "scratch"}
    orders = next(c for c in data["changes"] if c["name"] == "sales.orders")
    assert {"attr": "column amount", "before": "amount", "after": "total",
            "rename": True} in orders["details"]
    # incompatible changes are flagged as a plan flags them
    catalog.alter_table("sales.orders", update_columns={"id": {
        "name": "id", "type": "int2", "nullable": False, "comment": "the key"}})
    assert "~ column id: int8 not null -> int2 not null  [incompatible]" in cli(
        "diff", "2", "3").output
    assert cli("diff", "3", "3").output == "no differences\n"


def test_namespace_rename_in_log_and_diff(cli: WarehouseCli, tmp_path: Path) -> None:
    applied(cli, tmp_path)
    catalog = Catalog.open(cli.warehouse)
    catalog.rename_namespace("sales", "shop")  # version 2
    out = cli("log", "-n", "1")
    assert out.exit_code == 0
    lines = out.output.splitlines()
    assert lines[1:4] == ["    rename namespace sales -> shop",
                          "        moves table sales.orders -> shop.orders",
                          "        moves table sales.scratch -> shop.scratch"]
    assert lines[4:] == ["(more: --before 2)"]
    (entry,) = json.loads(cli("log", "-n", "1", "--json").output)
    kinds = [(a["type"], a.get("moved_by")) for a in entry["actions"]]
    assert kinds[0] == ("NAMESPACE_RENAME", None)
    assert all(moved == "rename namespace sales -> shop" for _, moved in kinds[1:])
    assert entry["actions"][0]["moves"][0] == {"type": "table", "from": "sales.orders",
                                               "to": "shop.orders"}
    diff = cli("diff", "1", "2").output
    assert "  ~ namespace shop (renamed from sales)" in diff
    assert "  ~ table shop.orders (renamed from sales.orders)" in diff
    assert "+ " not in diff and "- " not in diff


def test_show_json_carries_every_field_and_types_match_the_plan(cli: WarehouseCli,
                                                                tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    write_text(spec, "s.yaml", """
        namespace: s
        comment: the shop
        protected: true
        properties: {owner: team}
        tables:
          t:
            format: parquet
            comment: facts
            protected: true
            location: s3://lake/t
            properties: {a: b}
            columns:
              - {name: id, type: bigint, nullable: false, comment: key, properties: {pii: "no"}}
              - {name: m, type: map, key: {type: string}, value: {type: int}}
        views:
          v:
            sql: SELECT id FROM s.t
            comment: ids
            protected: true
            properties: {c: d}
            references: [s.t]
            columns: [{name: id, type: int8}]
        """)
    plan = cli("plan", str(spec))
    assert cli("apply", str(spec), "--auto-approve").exit_code == 0
    shown = json.loads(cli("show", "--json").output)
    (ns,) = shown["namespaces"]
    assert ns == {"name": "s", "comment": "the shop", "protected": True,
                  "properties": {"owner": "team"}}
    (table,) = shown["tables"]
    assert (table["comment"], table["protected"], table["location"], table["properties"],
            table["format"]) == ("facts", True, "s3://lake/t", {"a": "b"}, "parquet")
    assert "format_properties" in table and "table_type" in table
    key = table["columns"][0]
    assert (key["comment"], key["properties"], key["nullable"], key["type_text"]) == (
        "key", {"pii": "no"}, False, "int8 not null")
    (view,) = shown["views"]
    assert (view["comment"], view["protected"], view["properties"],
            view["referenced_objects"]) == ("ids", True, {"c": "d"}, ["s.t"])
    # one spelling: what the plan printed for each column is what show prints
    text = cli("show").output
    for col in table["columns"]:
        assert f"+ column {col['name']}: {col['type_text']}" in plan.output
        assert re.search(rf"^    {col['name']} {re.escape(col['type_text'])}(\n|  \()", text,
                         re.MULTILINE)
    assert "    m map<varchar, int4>\n" in text
    assert "namespace s  (protected; comment \"the shop\"; owner=team)\n" in text
    assert "  table t [parquet]  (protected; comment \"facts\"; a=b)\n" in text
    assert "    id int8 not null  (comment \"key\"; pii=no)\n" in text
    assert "  view v [ansi]  (protected; comment \"ids\"; c=d): SELECT id FROM s.t\n" in text


# --- finding 9: init --property and CLI words ---------------------------------------------------


def test_init_property_without_value_is_an_error(tmp_path: Path) -> None:
    cli = WarehouseCli(tmp_path)
    out = cli("init", "--property", "owner")
    assert out.exit_code == 1
    assert out.output.startswith("Error: --property needs KEY=VALUE, got 'owner'")
    assert not Catalog.exists_at(cli.warehouse)  # nothing was created
    out = cli("init", "--property", "owner=team", "--property", "empty=")
    assert out.exit_code == 0, out.output
    assert Catalog.open(cli.warehouse).properties == {"owner": "team", "empty": ""}


def test_messages_speak_cli_not_python(cli: WarehouseCli, tmp_path: Path) -> None:
    spec = applied(cli, tmp_path)
    write_spec(spec, {"sales": {"namespace": "sales", "tables": {"orders": {
        "columns": ORDERS}}}})
    for command in (["apply", str(spec), "--auto-approve"],
                    ["rollback", "--to", "0", "--auto-approve"]):
        out = cli(*command)
        assert out.exit_code == 5, out.output
        assert "--allow-destructive" in out.output
        assert not re.search(r"\w+=(True|False)|allow_destructive", out.output), out.output
    out = cli("show", "--version", "1", "--as-of", "2020-01-01T00:00:00Z")
    assert out.exit_code == 1
    assert out.output == "Error: give only one of --version, --as-of and --export\n"


def test_diff_reads_only_what_differs(tmp_path: Path) -> None:
    """``diff`` reads the definitions of changed objects only (both versions), and the roots
    in between only when something was both added and removed (a possible rename)."""
    catalog = Catalog.create(str(tmp_path / "wh"))
    with catalog.transaction() as txn:  # version 1: 40 tables
        txn.create_namespace("s")
        for i in range(40):
            txn.create_table("s", f"t{i:02d}", columns=[{"name": "id", "type": "int4"}])
    catalog.alter_table("s.t03", add_columns=[{"name": "x", "type": "int8"}])  # version 2
    catalog.alter_table("s.t07", set_properties={"a": "b"})  # version 3
    catalog.rename_table("s.t09", "renamed")  # version 4
    cold = Catalog.open(catalog.uri)
    with recording(cold.storage) as log:
        result = version_diff(cold, 1, 3)
    assert [c.change.name for c in result.changes] == ["s.t03", "s.t07"]
    assert log.count("read", "def") == 4  # two objects, before and after
    assert log.count("read", "root") == 2  # the two versions compared, none in between
    cold = Catalog.open(catalog.uri)
    with recording(cold.storage) as log:
        result = version_diff(cold, 1, 4)
    assert [(c.change.action, c.change.name) for c in result.changes] == [
        ("rename", "s.renamed"), ("update", "s.t03"), ("update", "s.t07")]
    assert log.count("read", "def") == 6
    assert log.count("read", "root") == 3  # 1, then 2 and 3 for their actions (opening read 4)
