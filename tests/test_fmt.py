"""olympia fmt: the canonical layout, comments and values kept, --check for CI; inspect
output is already formatted; formatting is idempotent and never changes what a spec plans."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from plan_helpers import (
    EXAMPLE,
    EXAMPLE_VARS,
    GOLDEN,
    ROOT,
    check_golden,
    memory_catalog,
    plan_for,
    write_spec,
    write_text,
)
from test_plan_property import namespaces, to_docs

from olympia import Catalog
from olympia.cli import main
from olympia.exceptions import SpecError
from olympia.plan import apply_plan, inspect
from olympia.spec import load_spec
from olympia.spec.fmt import MAX_FORMAT_CHARS, format_text
from olympia.spec.model import Spec
from olympia.spec.yamlpos import CoreDumper, dump


def run(tmp_path: Path, *args: str) -> Result:
    env = {"OLYMPIA_CATALOG": str(tmp_path / "wh"), "NO_COLOR": "1"}
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


MESSY = ("# yaml-language-server: $schema=olympia-spec.schema.json   \r\n\r\n\r\n"
         "namespace: s   \r\n"
         "# the team's tables  \r\n\r\n\r\n"
         "tables:\r\n"
         "  t:   # inline comment \r\n"
         "    columns: [{name: id, type: bigint}]\r\n"
         "views:\r\n"
         "  v:\r\n"
         "    sql: |\r\n"
         "      SELECT id   \r\n"
         "\r\n"
         "      FROM s.t\r\n"
         "\r\n\r\n")
TIDY = ("# yaml-language-server: $schema=olympia-spec.schema.json\n\n"
        "namespace: s\n"
        "# the team's tables\n\n"
        "tables:\n"
        "  t:   # inline comment\n"
        "    columns: [{name: id, type: bigint}]\n"
        "views:\n"
        "  v:\n"
        "    sql: |\n"
        "      SELECT id   \n"
        "\n"
        "      FROM s.t\n")


def test_fmt_check_then_rewrite_keeping_comments_and_values(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    path = write_text(spec, "s.yaml", "")
    path.write_bytes(MESSY.encode())
    tidy = write_text(spec, "tidy.yaml", "namespace: other\n")
    before = load_spec(spec)
    out = run(tmp_path, "fmt", "--check", str(spec))
    assert (out.exit_code, out.output) == (3, f"would reformat {path}\n")
    assert path.read_bytes() == MESSY.encode()  # --check writes nothing
    out = run(tmp_path, "fmt", str(spec))
    assert (out.exit_code, out.output) == (0, f"reformatted {path}\n")
    assert path.read_bytes() == TIDY.encode() and tidy.read_text() == "namespace: other\n"
    assert same_state(load_spec(spec), before)  # the SQL keeps its spaces and blank line
    out = run(tmp_path, "fmt", "--check", str(spec))
    assert (out.exit_code, out.output) == (0, "All spec files are formatted.\n")


def test_fmt_reports_every_broken_file_and_writes_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    bad = write_text(spec, "a.yaml", "namespace: [unclosed\n")
    messy = write_text(spec, "b.yaml", "namespace: b   \n")
    out = run(tmp_path, "fmt", str(spec))
    assert out.exit_code == 3
    assert out.output.splitlines() == [
        f"Error: {bad}:2:1: invalid YAML: expected ',' or ']', but got '<stream end>'"]
    assert messy.read_text() == "namespace: b   \n"
    out = run(tmp_path, "fmt", str(tmp_path / "nope"))
    assert out.exit_code == 3 and "no such file or directory" in out.output


def test_inspect_output_is_already_formatted(tmp_path: Path) -> None:
    assert run(tmp_path, "init").exit_code == 0
    vars_file = str(ROOT / "examples" / "vars.yaml")
    assert run(tmp_path, "apply", str(EXAMPLE), "--auto-approve", "--var-file",
               vars_file).exit_code == 0
    assert run(tmp_path, "inspect", "--out", str(tmp_path / "i")).exit_code == 0
    out = run(tmp_path, "fmt", "--check", str(tmp_path / "i"))
    assert (out.exit_code, out.output) == (0, "All spec files are formatted.\n")
    out = run(tmp_path, "fmt", "--check", str(EXAMPLE))  # as examples/ci checks specs
    assert (out.exit_code, out.output) == (0, "All spec files are formatted.\n")


def same_state(a: Spec, b: Spec) -> bool:
    """Whether two specs declare the same (what plan compares; positions aside)."""
    def state(spec: Spec) -> Any:
        return ({k: (v.namespace, v.renamed_from) for k, v in spec.namespaces.items()},
                {k: (v.table, v.renamed_from, v.column_renames, v.layout, v.format_version)
                 for k, v in spec.tables.items()},
                {k: (v.view, v.renamed_from) for k, v in spec.views.items()},
                sorted(spec.manage))
    return bool(state(a) == state(b))


_EXAMPLES = {p.name: p.read_text() for p in sorted(EXAMPLE.glob("*.yaml"))}


@st.composite
def messy_files(draw: st.DrawFn) -> dict[str, str]:
    """The example's files with whitespace, blank lines, comments and CRLF scattered."""
    out = {}
    for name, text in _EXAMPLES.items():
        lines = text.split("\n")
        for _ in range(draw(st.integers(0, 6))):
            i = draw(st.integers(0, len(lines) - 1))
            kind = draw(st.sampled_from(["spaces", "blank", "comment", "tab"]))
            if kind == "spaces":
                lines[i] += " " * draw(st.integers(1, 3))
            elif kind == "tab":
                lines[i] += "\t"
            elif kind == "blank":
                lines.insert(i, "")
            else:
                lines.insert(i, "# note  ")
        newline = draw(st.sampled_from(["\n", "\r\n"]))
        out[name] = newline.join(lines) + newline * draw(st.integers(0, 3))
    return out


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=messy_files())
def test_fmt_is_idempotent_and_never_changes_what_a_spec_plans(tmp_path: Path,
                                                               files: dict[str, str]) -> None:
    spec = tmp_path / "prop"
    shutil.rmtree(spec, ignore_errors=True)
    spec.mkdir()
    for name, text in files.items():
        (spec / name).write_bytes(text.encode())
    try:
        before = load_spec(spec, EXAMPLE_VARS)
    except SpecError:
        assume(False)  # a mutation made the example invalid: nothing to compare
        raise
    for name, text in files.items():
        once = format_text(text, name)
        assert format_text(once, name) == once
        (spec / name).write_bytes(once.encode())
    assert same_state(load_spec(spec, EXAMPLE_VARS), before)


def test_fmt_golden_messy_spec_with_comments_anchors_and_merge_keys(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    messy = (GOLDEN / "fmt_messy.yaml").read_text()
    path = spec / "sales.yaml"
    path.write_text(messy)
    out = run(tmp_path, "fmt", "--check", str(spec))
    assert (out.exit_code, out.output) == (3, f"would reformat {path}\n")
    assert path.read_text() == messy  # --check writes nothing
    out = run(tmp_path, "fmt", str(spec))
    assert (out.exit_code, out.output) == (0, f"reformatted {path}\n")
    formatted = path.read_text()
    check_golden("fmt_messy.formatted.yaml", formatted)
    assert format_text(formatted, str(path)) == formatted  # idempotent
    before = tmp_path / "before"
    before.mkdir()
    (before / "sales.yaml").write_text(messy)
    assert same_state(load_spec(spec), load_spec(before))
    assert "<<: *owner" in formatted and "- *audit" in formatted  # never expanded
    out = run(tmp_path, "fmt", "--check", str(spec))
    assert (out.exit_code, out.output) == (0, "All spec files are formatted.\n")


def test_fmt_keeps_quotes_only_where_a_reader_needs_them() -> None:
    text = ("namespace: 'n'\nproperties:\n  a: \"plain\"\n  b: 'yes'\n  c: \"1.10\"\n"
            "  d: '012'\n  e: \"${var.x}\"\n  f: 'null'\n  g: \"a: b\"\n  h: ''\n  i:\n"
            "  j: ~\n  k: 1.10\n")
    assert format_text(text, "q.yaml") == (
        "namespace: n\nproperties:\n  a: plain\n  b: 'yes'\n  c: \"1.10\"\n  d: '012'\n"
        "  e: \"${var.x}\"\n  f: 'null'\n  g: \"a: b\"\n  h: ''\n  i:\n  j: ~\n  k: 1.10\n")


def test_fmt_keeps_escapes_and_line_breaks_of_quoted_text_as_written() -> None:
    doc = {"namespace": "n", "properties": {"\x1a\U00010000": "\x1f\U00010000 " * 12}}
    text = dump(doc)  # as inspect writes it: escaped, over two lines
    assert "\\U00010000" in text and format_text(text, "e.yaml") == text
    value = "0000\x1f\x06" + "\U00010000" * 4 + "0"  # one line here, two lines there
    doc = {"namespace": "n", "properties": {"0": value},
           "views": {"a": {"properties": {"0\x1f\x1f" + "\U00010000" * 3: value}}}}
    text = dump(doc)
    assert format_text(text, "e.yaml") == text


def test_fmt_never_moves_a_key_ahead_of_the_anchor_it_aliases() -> None:
    text = ("namespace: n\ntables:\n  t:\n    columns: &cols\n    - name: id\n      type: int\n"
            "    comment: x\n  u:\n    properties: {}\n    comment: *cols\n")
    formatted = format_text(text, "a.yaml")
    assert formatted.index("&cols") < formatted.index("*cols")
    assert format_text(formatted, "a.yaml") == formatted


@st.composite
def messy_specs(draw: st.DrawFn) -> dict[str, str]:
    """Generated specs (as the plan properties make them) written in any key order,
    indentation and flow style, with comment lines and end-of-line comments scattered."""
    docs = to_docs(draw(namespaces))
    rnd = draw(st.randoms(use_true_random=False))

    def shuffled(value: Any) -> Any:
        if isinstance(value, dict):
            keys = list(value)
            rnd.shuffle(keys)
            return {k: shuffled(value[k]) for k in keys}
        return [shuffled(v) for v in value] if isinstance(value, list) else value

    out = {}
    for name, doc in docs.items():
        text = yaml.dump(shuffled(doc), Dumper=CoreDumper, sort_keys=False, allow_unicode=True,
                         indent=rnd.choice([2, 3, 4]), width=1000,
                         default_flow_style=rnd.choice([False, None]))
        lines = text.split("\n")
        for _ in range(rnd.randint(0, 4)):
            i = rnd.randrange(len(lines))
            if lines[i].rstrip().endswith(":"):
                lines[i] += "   # about this"
            else:
                indent = len(lines[i]) - len(lines[i].lstrip())
                lines.insert(i, " " * indent + "# a note")
        out[f"{name}.yaml"] = "\n".join(lines)
    return out


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files=messy_specs(), first=namespaces)
def test_formatting_any_spec_is_idempotent_and_plans_the_same(
        tmp_path: Path, files: dict[str, str], first: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        catalog = memory_catalog()  # holds another spec: the plans have changes of all kinds
        apply_plan(catalog, plan_for(catalog, write_spec(Path(tmp) / "first", to_docs(first))))
        original, formatted = Path(tmp) / "original", Path(tmp) / "formatted"
        original.mkdir()
        formatted.mkdir()
        for name, text in files.items():
            (original / name).write_text(text, "utf-8")
            try:
                once = format_text(text, name)
            except SpecError:
                assume(False)  # a scattered comment made the file invalid
                raise
            assert format_text(once, name) == once
            (formatted / name).write_text(once, "utf-8")
        assert planned(catalog, original) == planned(catalog, formatted)


def planned(catalog: Catalog, spec: Path) -> Any:
    """What planning ``spec`` gives: its changes and warnings, or its errors' messages
    (file:line:col aside: formatting moves lines)."""
    try:
        plan = plan_for(catalog, spec)
    except SpecError as exc:
        return sorted(re.sub(r"^.*?:\d+:\d+: ", "", p) for p in exc.problems)
    return ([{k: v for k, v in c.to_dict().items() if k != "source"} for c in plan.changes],
            plan.warnings)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=namespaces)
def test_inspect_output_of_any_catalog_is_formatted(tmp_path: Path, spec: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        catalog = memory_catalog()
        apply_plan(catalog, plan_for(catalog, write_spec(Path(tmp) / "a", to_docs(spec))))
        for path in inspect(catalog, Path(tmp) / "out"):
            text = path.read_text("utf-8")
            assert format_text(text, str(path)) == text


def test_fmt_keeps_a_file_of_comments_alone_and_reports_what_it_cannot_read(
        tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    notes = write_text(spec, "notes.yaml", "# nothing declared yet  \n\n\n# more\n")
    tab = write_text(spec, "tab.yaml", "namespace: a\ncomment:\tx\n")
    out = run(tmp_path, "fmt", str(spec))
    assert out.exit_code == 3
    assert out.output.splitlines() == [  # libyaml reads a tab there, ruamel.yaml does not
        f"Error: {tab}:2:9: cannot be formatted: found character '\\t' that cannot start "
        "any token"]
    assert notes.read_text() == "# nothing declared yet  \n\n\n# more\n"  # nothing written
    tab.unlink()
    big = write_text(spec, "big.yaml", "namespace: a\ncomment: " + "x" * MAX_FORMAT_CHARS + "\n")
    out = run(tmp_path, "fmt", "--check", str(spec))
    assert out.exit_code == 3 and f"{big}: {len(big.read_text()):,} characters" in out.output
    big.unlink()
    assert run(tmp_path, "fmt", str(spec)).exit_code == 0
    assert notes.read_text() == "# nothing declared yet\n\n# more\n"
