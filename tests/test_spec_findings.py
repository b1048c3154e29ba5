"""Issue 15 findings about specs, each reproduced through the CLI: view cycles named whole,
moves across namespaces refused at validate, ignored rename hints never silent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from plan_helpers import write_text

from olympia.cli import main
from olympia.spec import load_spec


def run(tmp_path: Path, *args: str) -> Result:
    env = {"OLYMPIA_CATALOG": str(tmp_path / "wh"), "NO_COLOR": "1"}
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    assert run(tmp_path, "init").exit_code == 0
    return tmp_path / "spec"


def test_views_reading_each_other_are_named_as_a_cycle_at_validate(tmp_path: Path,
                                                                     spec: Path) -> None:
    path = write_text(spec, "reporting.yaml", """
        namespace: reporting
        views:
          a:
            references: [reporting.b]
            sql: SELECT * FROM reporting.b
          b:
            references: [reporting.c]
            sql: SELECT * FROM reporting.c
          c:
            references: [reporting.a]
            sql: SELECT * FROM reporting.a
          d:
            references: [reporting.a]
            sql: SELECT * FROM reporting.a
        """)
    for command in ("validate", "plan"):
        out = run(tmp_path, command, str(spec))
        assert out.exit_code == 3
        assert out.output.replace(str(path), "F").splitlines() == [
            "Error: F:10:18: view reporting.c references reporting.a: views read each other "
            "in a cycle (reporting.a -> reporting.b -> reporting.c -> reporting.a); no order "
            "can create them"]


def test_two_cycles_are_both_reported(tmp_path: Path, spec: Path) -> None:
    write_text(spec, "r.yaml", """
        namespace: r
        views:
          a: {references: [r.b], sql: x}
          b: {references: [r.a], sql: x}
          c: {references: [r.d], sql: x}
          d: {references: [r.c, r.a], sql: x}
        """)
    out = run(tmp_path, "validate", str(spec), "--json")
    messages = [p["message"] for p in json.loads(out.output)["problems"]]
    assert [m.split("(")[1].split(")")[0] for m in messages] == ["r.a -> r.b -> r.a",
                                                                 "r.c -> r.d -> r.c"]


def test_a_move_across_namespaces_is_an_error_at_validate(tmp_path: Path, spec: Path) -> None:
    write_text(spec, "ingest.yaml", "namespace: ingest\n")
    path = write_text(spec, "commerce.yaml", """
        namespace: commerce
        tables:
          payments:
            renamed_from: ingest.payments_raw
            columns: [{name: id, type: bigint}]
        """)
    out = run(tmp_path, "validate", str(spec))
    assert out.exit_code == 3
    assert out.output.replace(str(path), "F").splitlines() == [
        "Error: F:4:19: renamed_from 'ingest.payments_raw': moving ingest.payments_raw to "
        "namespace commerce is not supported (a rename stays in its namespace); drop and "
        "create it, or keep table commerce.payments in ingest"]


def test_a_move_from_a_managed_namespace_is_refused_by_plan(tmp_path: Path,
                                                            spec: Path) -> None:
    """The old namespace is managed by pattern, not declared: validate cannot see the move,
    plan does."""
    write_text(spec, "ingest.yaml", """
        namespace: ingest
        tables: {payments_raw: {format: parquet, columns: [{name: id, type: bigint}]}}
        """)
    assert run(tmp_path, "apply", str(spec), "--auto-approve").exit_code == 0
    (spec / "ingest.yaml").unlink()
    write_text(spec, "commerce.yaml", """
        manage: [ingest]
        namespace: commerce
        tables:
          payments:
            renamed_from: ingest.payments_raw
            format: parquet
            columns: [{name: id, type: bigint}]
        """)
    assert run(tmp_path, "validate", str(spec)).exit_code == 0
    out = run(tmp_path, "plan", str(spec))
    assert out.exit_code == 3
    assert "moving ingest.payments_raw to namespace commerce is not supported" in out.output


def test_a_rename_hint_naming_nothing_is_a_warning(tmp_path: Path, spec: Path) -> None:
    write_text(spec, "s.yaml", """
        namespace: s
        tables: {t: {renamed_from: old_t, format: parquet}}
        """)
    out = run(tmp_path, "plan", str(spec))
    assert out.exit_code == 0
    assert ("! table s.t: renamed_from old_t names no table of s in the catalog, so it is "
            "created new") in out.output
    assert run(tmp_path, "apply", str(spec), "--auto-approve").exit_code == 0
    out = run(tmp_path, "plan", str(spec))  # applied: the hint is history now, no warning
    assert "renamed_from" not in out.output and "No changes" in out.output


def test_extension_keys_anchors_merge_keys_and_spliced_column_lists(tmp_path: Path,
                                                                    spec: Path) -> None:
    """Finding 5: x- keys are ignored, merge keys and anchored column lists are spliced, and
    what is wrong in a shared part is reported where it is written."""
    path = write_text(spec, "s.yaml", """
        x-common: &cols
          - {name: id, type: bigint, nullable: false, x-note: the key}
          - {name: at, type: timestamptz}
        x-defaults: &defaults {format: parquet, comment: shared, protected: false}
        namespace: s
        x-owner: data-team
        tables:
          plain:
            x-ticket: ABC-1
            <<: *defaults
            columns: *cols
          more:
            <<: [{comment: own}, *defaults]
            protected: true
            columns: [*cols, {name: extra, type: int}, [{name: last, type: date}]]
        """)
    out = run(tmp_path, "validate", str(spec))
    assert out.exit_code == 0, out.output
    tables = {k[1]: s.table for k, s in load_spec(spec).tables.items()}
    assert [c.name for c in tables["plain"].columns] == ["id", "at"]
    assert [c.name for c in tables["more"].columns] == ["id", "at", "extra", "last"]
    assert (tables["plain"].format, tables["plain"].comment, tables["plain"].protected) == (
        "parquet", "shared", False)
    assert (tables["more"].comment, tables["more"].protected) == ("own", True)
    # an error inside the shared list: reported once, at the anchor, without Python reprs
    text = path.read_text().replace("type: timestamptz}", "type: timestampz}")
    path.write_text(text.replace("- {name: id, type: bigint,", "- {name: id, type: 7,"))
    out = run(tmp_path, "validate", str(spec))
    lines = out.output.replace(str(path), "F").splitlines()
    assert lines[0].startswith("Error: F:2:22: tables.more.columns[0].type: 7 is not of type")
    assert lines[1].startswith("F:2:22: tables.plain.columns[0].type: 7 is not of type")
    # one pass: the bad type of 'at' is reported with them (once, where it is written)
    assert lines[2:] == [
        "F:3:22: column 'at': unknown type 'timestampz' (did you mean 'timestamptz'?); "
        "known types: binary, boolean, char(N), date, decimal(P,S), fixed(N), float4, float8, "
        "int1, int2, int4, int8, json, list, map, struct, time3, time6, time9, timestamp3, "
        "timestamp6, timestamp9, timestamptz3, timestamptz6, timestamptz9, timetz3, timetz6, "
        "timetz9, uuid, varchar, varchar(N)"]
    path.write_text(text)
    out = run(tmp_path, "validate", str(spec))
    assert out.output.replace(str(path), "F").splitlines() == [
        "Error: F:3:22: column 'at': unknown type 'timestampz' (did you mean 'timestamptz'?); "
        "known types: binary, boolean, char(N), date, decimal(P,S), fixed(N), float4, float8, "
        "int1, int2, int4, int8, json, list, map, struct, time3, time6, time9, timestamp3, "
        "timestamp6, timestamp9, timestamptz3, timestamptz6, timestamptz9, timetz3, timetz6, "
        "timetz9, uuid, varchar, varchar(N)"]


@pytest.mark.parametrize(("text", "message"), [
    ("namespace: s\ntables:\n  t:\n    <<: [1]\n",
     "F:4:10: a merge key (<<) takes a mapping or a list of mappings, e.g. <<: *defaults"),
    ("namespace: s\ntables:\n  t: {columns: [{name: a, type: strct}]}\n",
     "F:3:33: column 'a': unknown type 'strct' (did you mean 'struct'?); known types:"),
    ("namespace: s\ntables:\n  t: {columns: [{name: a, type: timestamp(3)}]}\n",
     "F:3:33: column 'a': unknown type 'timestamp(3)' (did you mean 'timestamp3'?)"),
    ("namespace: s\ntables: {orders: {}}\nviews:\n  v: {references: [s.order], sql: x}\n",
     "F:4:20: view s.v references s.order: the spec declares no such table or view (did you "
     "mean s.orders?)"),
])
def test_problems_with_guesses(tmp_path: Path, spec: Path, text: str, message: str) -> None:
    path = write_text(spec, "a.yaml", text)
    out = run(tmp_path, "validate", str(spec))
    assert out.exit_code == 3
    assert out.output.replace(str(path), "F").startswith(f"Error: {message}"), out.output


def test_one_bad_value_does_not_hide_the_others_of_its_table(tmp_path: Path,
                                                             spec: Path) -> None:
    """Finding 6: a wrong value and an unknown type in one table come in one pass (the type
    used to be checked only once the table's schema errors were fixed)."""
    path = write_text(spec, "a.yaml", """
        namespace: s
        tables:
          t:
            columns:
              - {name: a, type: strct}
              - {name: b, type: int, nullable: maybe}
              - {name: c, type: "varchar(0)"}
        """)
    out = run(tmp_path, "validate", str(spec))
    assert [line.split(": ", 2)[:2] for line in
            out.output.replace(str(path), "F").splitlines()] == [
        ["Error", "F:5:25"], ["F:6:40", "tables.t.columns[1].nullable"], ["F:7:25", "column 'c'"]]


def test_wrong_collections_are_quoted_as_yaml_not_python(tmp_path: Path, spec: Path) -> None:
    path = write_text(spec, "a.yaml", """
        namespace: s
        tables:
          t: {columns: {name: a, type: int, x-note: "it's"}}
        """)
    out = run(tmp_path, "validate", str(spec))
    assert out.output.replace(str(path), "F").splitlines() == [
        "Error: F:3:16: tables.t.columns: {name: a, type: int, x-note: \"it's\"} is not of type "
        "'array'"]
