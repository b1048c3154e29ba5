"""Inspect: the catalog (or any version) written back as spec files that plan to nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Location
from plan_helpers import EXAMPLE, EXAMPLE_VARS, converge, memory_catalog, plan_for, state

from olympia import Catalog
from olympia.exceptions import InvalidArgumentError
from olympia.plan import inspect
from olympia.plan.inspect import EMPTY_FILE, file_names
from olympia.spec import SCHEMA_FILE_NAME, load_spec, schema


def hand_made(catalog: Catalog) -> None:
    """Objects made through the API with everything a spec might trip over."""
    catalog.create_namespace("api.made", {"on": "yes", "n": "012", "x": "${var.not_one}"},
                             comment="made by hand\nsecond line")
    catalog.create_namespace(".hidden", protected=True)
    catalog.create_namespace("Ünïcödé")
    catalog.create_table("api.made", "null", columns=[
        {"name": "on", "type": "int4", "nullable": False, "comment": "flag: yes"},
        {"name": "m", "type": "map", "key": {"type": "varchar", "nullable": False},
         "value": {"type": "list", "element": {"type": "struct", "fields": [
             {"name": "a", "type": "decimal(38,10)", "properties": {"p": "1"}}]}}}],
        format="hudi", table_type="managed", location="s3://x/y",
        format_properties={"hoodie.table.type": "MERGE_ON_READ"}, protected=True)
    catalog.create_view("api.made", "v", sql="  SELECT '${var.x}' AS a\n  FROM t  ",
                        dialect="trino", columns=[{"name": "a", "type": "varchar"}],
                        referenced_objects=[("api.made", "null")], default_namespace="api.made",
                        properties={"1": "true"}, comment="")
    catalog.create_table("Ünïcödé", "ß", comment="multi\nline\n")


def test_round_trip_of_the_example_and_hand_made_objects(location: Location,
                                                         tmp_path: Path) -> None:
    catalog = Catalog.create(location.uri, location.storage_options)
    converge(catalog, EXAMPLE, **EXAMPLE_VARS)
    hand_made(catalog)
    files = inspect(catalog, tmp_path / "out")
    assert sorted(p.name for p in files) == [
        "%2Ehidden.yaml", "%C3%9Cn%C3%AFc%C3%B6d%C3%A9.yaml", "api.made.yaml", "finance.yaml",
        "marketing.yaml", "reporting.yaml", "sales.yaml"]
    assert files[0].read_text().startswith(
        f"# yaml-language-server: $schema={SCHEMA_FILE_NAME}\n")
    assert (tmp_path / "out" / SCHEMA_FILE_NAME).read_text() and schema()
    assert not plan_for(catalog, tmp_path / "out").has_changes
    fresh = memory_catalog()
    converge(fresh, tmp_path / "out")
    assert state(fresh) == state(catalog)  # the files hold everything, not just "no diff"


def test_any_version_can_be_inspected(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, EXAMPLE, **EXAMPLE_VARS)
    catalog.drop_view("reporting.country_ranking")
    inspect(catalog.at_version(1), tmp_path / "v1")
    assert load_spec(tmp_path / "v1").views.keys() == load_spec(
        EXAMPLE, EXAMPLE_VARS).views.keys()
    (change,) = plan_for(catalog, tmp_path / "v1").changes  # restoring v1 is one create
    assert (change.action, change.name) == ("create", "reporting.country_ranking")
    inspect(catalog.at_version(0), tmp_path / "v0")
    assert sorted(p.name for p in (tmp_path / "v0").iterdir()) == [EMPTY_FILE,
                                                                   SCHEMA_FILE_NAME]


def test_a_version_without_namespaces_round_trips(tmp_path: Path) -> None:
    """Its files declare nothing: planning them shows no changes, whatever the catalog holds,
    and inspecting a later version into the same folder replaces them."""
    catalog = memory_catalog()
    (empty,) = inspect(catalog, tmp_path)
    assert empty.name == EMPTY_FILE
    assert not plan_for(catalog, tmp_path).has_changes
    converge(catalog, EXAMPLE, **EXAMPLE_VARS)
    assert not plan_for(catalog, tmp_path).has_changes
    files = inspect(catalog, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.yaml")) == sorted(p.name for p in files)
    assert EMPTY_FILE not in {p.name for p in files}


def test_output_is_deterministic_and_other_files_are_not_merged(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, EXAMPLE, **EXAMPLE_VARS)
    out = tmp_path / "out"
    first = {p.name: p.read_text() for p in inspect(catalog, out)}
    assert {p.name: p.read_text() for p in inspect(catalog, out)} == first
    (out / "stray.yaml").write_text("namespace: stray\n")
    with pytest.raises(InvalidArgumentError, match="stray.yaml"):
        inspect(catalog, out)
    inspect(catalog, out, clean=True, schema_ref="https://example.invalid/schema.json")
    assert not (out / "stray.yaml").exists()
    assert (out / "sales.yaml").read_text().startswith(
        "# yaml-language-server: $schema=https://example.invalid/schema.json\n")


def test_file_names_stay_distinct_on_case_insensitive_file_systems() -> None:
    assert file_names(["Sales", "sales", "a/b", ".x"]) == {
        ".x": "%2Ex.yaml", "Sales": "Sales.yaml", "a/b": "a%2Fb.yaml", "sales": "sales~2.yaml"}
