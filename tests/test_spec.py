"""Spec loading: every error class is reported as file:line:col, all at once."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from olympia.exceptions import SpecError
from olympia.spec import load_spec
from olympia.spec.loader import schema

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def problems(path: Path, **variables: str) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_spec(path, variables)
    return err.value.problems


def test_schema_is_valid_draft_2020_12_and_packaged() -> None:
    Draft202012Validator.check_schema(schema())
    on_disk = json.loads((ROOT / "specs" / "olympia-spec.schema.json").read_text())
    assert schema() == on_disk
    assert on_disk["$id"] and on_disk["additionalProperties"] is False


def test_example_catalog_loads() -> None:
    spec = load_spec(ROOT / "examples" / "catalog", {"finance_retention": "7y"})
    assert sorted(spec.namespaces) == ["finance", "marketing", "sales"]
    orders = spec.tables[("sales", "orders")].table
    items = orders.column("items")
    assert items is not None and items.element is not None
    assert [f.name for f in items.element.fields] == ["sku", "quantity", "unit_price"]
    assert spec.namespaces["finance"].namespace.properties["retention"] == "7y"


def test_schema_violations_name_file_line_and_path(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        namespace: sales
        tables:
          orders:
            colums:
              - {name: id, type: int8}
    """)
    (problem,) = problems(tmp_path)
    assert problem.startswith(f"{tmp_path / 'a.yaml'}:4:5: tables.orders: ")
    assert "'colums' was unexpected" in problem


def test_all_errors_at_once(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        namespace: sales
        tables:
          orders:
            columns:
              - {name: id, type: bigintt}
              - {name: id2, type: "decimal(50,2)"}
    """)
    write(tmp_path, "e.yaml", """
        namespace: hr2
        tables:
          "bad name":
            columns: []
    """)
    write(tmp_path, "b.yaml", """
        namespace: sales
    """)
    write(tmp_path, "c.yaml", """
        namespace: hr
        views:
          v:
            sql: SELECT 1
            references: [hr.missing]
    """)
    write(tmp_path, "d.yaml", "namespace: [unclosed\n")
    found = problems(tmp_path)
    text = "\n".join(found)
    assert len(found) == 6, text
    assert f"{tmp_path / 'a.yaml'}:5:26: column 'id': unknown type 'bigintt'" in text
    assert "decimal precision" in text
    assert f"{tmp_path / 'e.yaml'}:3:3: tables: 'bad name' contains characters" in text
    assert f"{tmp_path / 'b.yaml'}:1:12: namespace sales is already declared at " \
           f"{tmp_path / 'a.yaml'}:1:12" in text
    assert f"{tmp_path / 'c.yaml'}:5:18: view hr.v references hr.missing" in text
    assert f"{tmp_path / 'd.yaml'}:2:1: invalid YAML" in text


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        namespace: sales
        tables:
          orders: {columns: []}
          orders: {columns: []}
    """)
    assert problems(tmp_path) == [f"{tmp_path / 'a.yaml'}:4:3: duplicate key 'orders'"]


def test_duplicate_object_across_documents(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        namespace: sales
        tables:
          orders: {columns: []}
        views:
          orders: {sql: SELECT 1}
    """)
    (problem,) = problems(tmp_path)
    assert "sales.orders is already declared at" in problem and ":5:3:" in problem


def test_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "a.yaml", """
        namespace: ${var.env}_sales
        properties: {owner: "${var.owner}"}
    """)
    (problem,) = problems(tmp_path, env="prod")
    assert ":2:21: undefined variable 'owner'" in problem
    monkeypatch.setenv("OLYMPIA_VAR_owner", "team-a")
    spec = load_spec(tmp_path, {"env": "prod"})
    assert spec.namespaces["prod_sales"].namespace.properties == {"owner": "team-a"}


def test_flow_style_comma_hint(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        namespace: s
        tables:
          t:
            columns:
              - {name: x, type: decimal(10,2)}
    """)
    (problem,) = problems(tmp_path)
    assert 'quote it, e.g. type: "decimal(12,2)"' in problem


def test_missing_path_and_empty_dir(tmp_path: Path) -> None:
    assert "no such file" in problems(tmp_path / "nope")[0]
    assert "no .yaml or .yml files" in problems(tmp_path)[0]
