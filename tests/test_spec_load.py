"""Spec loading: the schema, YAML semantics, variables, merging, digests, packaging."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from plan_helpers import EXAMPLE, EXAMPLE_VARS, ROOT, write_text

from olympia.catalog import objects
from olympia.catalog.objects import TYPE_NAMES, canonical_type
from olympia.exceptions import InvalidArgumentError
from olympia.spec import load_spec, read_var_file, schema, schema_path, yamlpos
from olympia.spec.schema import MAX_TYPE_PARAMETER
from olympia.spec.variables import collect, escape


def test_schema_is_draft_2020_12_strict_with_a_stable_id() -> None:
    Draft202012Validator.check_schema(schema())
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema()["$id"] == "urn:olympia:catalog-spec:v1"

    def closed(node: object) -> None:  # every object schema with properties is closed
        if isinstance(node, dict):
            if "properties" in node and node.get("type") == "object":
                assert node.get("additionalProperties") is False, node
            for value in node.values():
                closed(value)

    closed({k: v for k, v in schema().items() if k != "$defs"} | {
        "d": {k: v for k, v in schema()["$defs"].items() if k != "type_parts"}})


def _anycase(word: str) -> str:
    return "".join(f"[{c}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _upto(top: int, low: int = 0) -> str:
    """A regex of the decimal numbers ``low`` (0 or 1) to ``top``, no leading zeros."""
    digits = str(top)
    parts = []
    for i, d in enumerate(digits):  # as long as top, below it from digit i on
        rest = len(digits) - i - 1
        first = 1 if i == 0 else 0
        if int(d) > first:
            high = int(d) - 1
            cls = str(first) if first == high else f"[{first}-{high}]"
            parts.append(digits[:i] + cls + ("" if not rest else "[0-9]" if rest == 1
                                             else f"[0-9]{{{rest}}}"))
    parts.append(digits)
    for n in range(len(digits) - 1, 0, -1):  # shorter
        parts.append("[1-9]" + ("" if n == 1 else "[0-9]" if n == 2 else f"[0-9]{{{n - 1}}}"))
    return "(?:" + "|".join(parts + (["0"] if low == 0 else [])) + ")"


def type_pattern() -> str:
    """The schema's type pattern, built from the library's type names and aliases: every
    name in any case; decimal/numeric with precision 1-38 and scale 0 to the precision;
    char/fixed/varchar with a length from 1 to MAX_TYPE_PARAMETER."""
    simple = sorted({*objects._SIMPLE, *objects._ALIASES, "varchar"},
                    key=lambda n: (-len(n), n))
    length = r"\s*\(\s*" + _upto(MAX_TYPE_PARAMETER, 1) + r"\s*\)"
    decimal = "|".join(f"{p}(?:\\s*,\\s*{_upto(p)})?" for p in range(38, 0, -1))
    return ("^\\s*(?:" + "|".join(_anycase(n) for n in simple)
            + f"|(?:{_anycase('decimal')}|{_anycase('numeric')})"
            + f"(?:\\s*\\(\\s*(?:{decimal})\\s*\\))?"
            + f"|(?:{_anycase('char')}|{_anycase('fixed')}|{_anycase('varchar')}){length}"
            + ")\\s*$")


def _reads(spelling: str) -> bool:
    """Whether the loader reads ``spelling`` as a type (varchar(0) and leading zeros are
    refused by the spec although the library reads them)."""
    try:
        canonical_type(spelling)
    except InvalidArgumentError:
        return False
    return not re.search(r"\(\s*0|[(,]\s*0[0-9]", spelling)


def test_the_schema_accepts_exactly_the_type_spellings_the_library_reads() -> None:
    """Editors flag what validate refuses (issue 15, finding 6): the schema's type pattern is
    built from the library's names, and agrees with the loader on names, aliases, cases,
    spacing and every parameter range."""
    assert schema()["$defs"]["type"]["pattern"] == type_pattern()
    pattern = re.compile(type_pattern())
    names = [n.replace("P", "12").replace("S", "2").replace("N", "5") for n in TYPE_NAMES]
    spellings = [*names, *objects._ALIASES, "numeric", "numeric(10)", "Decimal( 12 , 3 )",
                 " BIGINT ", "varchar(0)", "timestamp", "strct", "timestamp(3)", "char",
                 "fixed", "char(0)", "decimal(0)", "decimal(39)", "decimal(12,13)",
                 "decimal(38,38)", "varchar(007)", "list<int>", "map<string, int>",
                 "decimal(12,2", "varchar()", "decimal(,2)", "int8;", "8int", "array[int]",
                 "big int", "", "int 4", "decimal (10, 2)", "TimeStampTZ9", "time(6)"]
    params = [*range(0, 45), 99, 100, MAX_TYPE_PARAMETER - 1, MAX_TYPE_PARAMETER,
              MAX_TYPE_PARAMETER + 1, 2**32, 10**9, 2 * 10**9, 1999999999, 10**12]
    spellings += [f"{base}({p})" for base in ("char", "varchar", "fixed", "decimal",
                                              "numeric", "time") for p in params]
    spellings += [f"decimal({p},{s})" for p in range(0, 41) for s in range(0, 41)]
    for spelling in spellings + [s.upper() for s in spellings]:
        assert bool(pattern.search(spelling)) == _reads(spelling), spelling


def test_the_package_reads_the_single_schema_in_specs() -> None:
    source = ROOT / "specs" / "olympia-spec.schema.json"
    assert schema_path().resolve() == source.resolve()
    assert schema() == json.loads(source.read_text())


def test_a_built_wheel_ships_the_schema_as_a_regular_file(tmp_path: Path) -> None:
    """A non-editable install has the schema: the wheel holds it as package data."""
    tree = tmp_path / "src"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    for name in ("olympia", "olympia_provider", "specs"):
        shutil.copytree(ROOT / name, tree / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path / "d")],
                          cwd=tree, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "d").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = z.read("olympia/spec/schema.json")
    assert json.loads(shipped) == schema()


def test_example_catalog_loads_with_nested_types() -> None:
    spec = load_spec(EXAMPLE, EXAMPLE_VARS)
    assert sorted(spec.namespaces) == ["finance", "marketing", "reporting", "sales"]
    items = spec.tables[("sales", "orders")].table.column("items")
    assert items is not None and items.type == "list" and items.element is not None
    assert [f.name for f in items.element.fields] == ["sku", "quantity", "unit_price"]
    assert spec.namespaces["finance"].namespace.properties["retention"] == "7y"
    view = spec.views[("marketing", "campaign_revenue")]
    assert ("sales", "orders") in view.view.referenced_objects
    assert spec.tables[("finance", "ledger")].table.protected
    assert str(spec.tables[("sales", "orders")].position).endswith("sales.yaml:8:3")


@pytest.fixture(params=["libyaml", "python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both parsers: libyaml's (used when PyYAML has it) and PyYAML's own."""
    if request.param == "python":
        monkeypatch.setattr(yamlpos, "_LOADER", yamlpos.CoreLoader)
    else:
        assert yamlpos._LOADER is not yamlpos.CoreLoader  # this environment has libyaml


@pytest.mark.usefixtures("parser")
def test_yaml_1_2_scalars_and_names_as_written(tmp_path: Path) -> None:
    """No YAML 1.1 surprises: NO/on/yes stay text, 012 stays text, keys are names."""
    write_text(tmp_path, "a.yaml", """
        namespace: "on"
        comment: 2024-01-01
        properties: {country: NO, enabled: yes, code: 012, ratio: 1.10, big: 1e3, flag: true,
                     time: "1:20"}
        tables:
          on: {columns: [{name: "null", type: int}]}
          "123": {}
    """)
    spec = load_spec(tmp_path)
    ns = spec.namespaces["on"].namespace
    assert ns.comment == "2024-01-01"
    assert ns.properties == {"country": "NO", "enabled": "yes", "code": "012", "ratio": "1.10",
                             "big": "1e3", "flag": "true", "time": "1:20"}
    assert set(spec.tables) == {("on", "on"), ("on", "123")}
    assert spec.tables[("on", "on")].table.columns[0].name == "null"


def test_anchors_and_aliases_reuse_values(tmp_path: Path) -> None:
    write_text(tmp_path, "a.yaml", """
        namespace: s
        tables:
          a: {columns: &cols [{name: id, type: bigint}, {name: v, type: string}]}
          b: {columns: *cols}
    """)
    spec = load_spec(tmp_path)
    assert spec.tables[("s", "a")].table.columns == spec.tables[("s", "b")].table.columns


def test_a_directory_merges_every_yaml_outside_hidden_folders(tmp_path: Path) -> None:
    write_text(tmp_path, "sales.yaml", "namespace: sales\n")
    write_text(tmp_path / "teams", "hr.yml", "namespace: hr\n---\nmanage: [tmp_*]\n")
    write_text(tmp_path / ".git", "x.yaml", "namespace: hidden\n")
    write_text(tmp_path, "notes.txt", "not yaml")
    write_text(tmp_path, "empty.yaml", "# only a comment\n")
    spec = load_spec(tmp_path)
    assert sorted(spec.namespaces) == ["hr", "sales"]
    assert spec.manage == ["tmp_*"] and spec.manages("tmp_x") and not spec.manages("other")
    assert [Path(f).name for f in spec.files] == ["empty.yaml", "sales.yaml", "hr.yml"]
    single = load_spec(tmp_path / "sales.yaml")
    assert list(single.namespaces) == ["sales"]


@pytest.mark.usefixtures("parser")
def test_variables_from_environment_files_and_explicit_values(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_text(tmp_path / "spec", "a.yaml", """
        namespace: ${var.env}_sales
        protected: ${var.protect}
        properties:
          owner: ${var.owner}
          literal: "$${var.owner}"
          days: ${var.days}
        views:
          v: {sql: "SELECT '${var.env}'", dialect: spark}
    """)
    monkeypatch.setenv("OLYMPIA_VAR_owner", "env-owner")
    monkeypatch.setenv("OLYMPIA_VAR_env", "dev")
    vars_file = write_text(tmp_path, "vars.yaml", "env: prod\nprotect: true\ndays: 030\n")
    values = collect({"owner": "cli-owner"}, [vars_file])
    assert values["env"] == "prod" and values["owner"] == "cli-owner"
    spec = load_spec(tmp_path / "spec", values)
    ns = spec.namespaces["prod_sales"].namespace
    assert ns.protected is True  # a whole plain value takes the type of its text
    assert ns.properties == {"owner": "cli-owner", "literal": "${var.owner}", "days": "030"}
    assert spec.views[("prod_sales", "v")].view.sql == "SELECT 'prod'"
    assert load_spec(tmp_path / "spec", {"protect": "false", "days": "1"}).namespaces[
        "dev_sales"].namespace.properties["owner"] == "env-owner"


def test_escaping_is_the_inverse_of_expansion(tmp_path: Path) -> None:
    for text in ["${var.x}", "$${var.x}", "a ${var.y} b $ {var.z} ${other}", "$$$"]:
        write_text(tmp_path, "a.yaml", f"namespace: n\ncomment: {json.dumps(escape(text))}\n")
        assert load_spec(tmp_path).namespaces["n"].namespace.comment == text


def test_vars_file_problems_have_positions(tmp_path: Path) -> None:
    bad = write_text(tmp_path, "vars.yaml", "ok: 1\n9bad: x\nnested: {a: 1}\n")
    with pytest.raises(Exception) as err:
        read_var_file(bad)
    assert str(err.value).splitlines() == [
        f"{bad}:2:1: '9bad' is not a variable name (letters, digits and _, not starting "
        "with a digit)",
        f"{bad}:3:9: variable nested needs a scalar value"]


def test_digest_covers_files_and_variable_values(tmp_path: Path) -> None:
    write_text(tmp_path, "a.yaml", "namespace: n\ncomment: ${var.c}\n")
    first = load_spec(tmp_path, {"c": "1"}).digest
    assert load_spec(tmp_path, {"c": "1", "unused": "x"}).digest == first
    assert load_spec(tmp_path, {"c": "2"}).digest != first
    write_text(tmp_path, "a.yaml", "namespace: n\ncomment: ${var.c}  # edited\n")
    assert load_spec(tmp_path, {"c": "1"}).digest != first
