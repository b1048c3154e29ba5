"""Issue 15 finding 8 through the command line: ``olympia drift SPEC`` names the objects
changed outside the spec since its last apply, with the version, time and annotations of
each commit that changed them; exit 2 when there is drift, 0 when there is none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli
from conftest import Location
from plan_helpers import write_spec

from olympia import Catalog
from olympia.versions.timetravel import format_millis


def spec_docs(note: bool = False) -> dict[str, Any]:
    columns = [{"name": "id", "type": "int8"}, {"name": "amount", "type": "int4"}]
    if note:
        columns.append({"name": "note", "type": "varchar"})
    return {"sales": {"namespace": "sales", "tables": {
        "orders": {"format": "parquet", "columns": columns},
        "scratch": {"format": "parquet"}}},
        "core": {"namespace": "core", "tables": {"ledger": {"format": "parquet"}}}}


def cli_for(location: Location) -> Cli:
    return Cli({"OLYMPIA_CATALOG": location.uri, "NO_COLOR": "1",
                "OLYMPIA_STORAGE_OPTIONS": json.dumps(location.storage_options),
                "OLYMPIA_GIT_COMMIT": "c0ffee"})


@pytest.fixture
def setup(location: Location, tmp_path: Path) -> tuple[Cli, Catalog, Path]:
    if location.kind == "memory":
        pytest.skip("the CLI opens the catalog afresh; use disk or S3")
    catalog = Catalog.create(location.uri, location.storage_options)
    catalog.create_namespace("elsewhere")  # version 1: not managed by the spec
    cli = cli_for(location)
    spec = write_spec(tmp_path / "spec", spec_docs())
    out = cli("apply", str(spec), "--auto-approve")  # version 2
    assert out.exit_code == 0, out.output
    return cli, catalog, spec


def test_drift_is_attributed_to_the_commits_that_made_it(
        setup: tuple[Cli, Catalog, Path]) -> None:
    cli, catalog, spec = setup
    out = cli("drift", str(spec))
    assert out.exit_code == 0, out.output
    assert out.output.endswith("No drift: nothing the spec manages changed since.\n")
    assert "since version 2 (its last apply" in out.output and "git commit c0ffee" in out.output

    catalog.refresh()
    with catalog.transaction() as txn:  # version 3: a notebook adds a column
        txn.annotate(tool="notebook", user="alice")
        txn.alter_table("sales.orders", add_columns=[{"name": "note", "type": "varchar"}])
    with catalog.transaction() as txn:  # version 4: outside the spec's namespaces
        txn.annotate(tool="notebook", user="bob")
        txn.create_table("elsewhere", "x", columns=[{"name": "id", "type": "int8"}])
    with catalog.transaction() as txn:  # version 5: a rename and a drop
        txn.annotate(tool="admin-script", user="carol")
        txn.rename_table("sales.scratch", "scratch_old")
        txn.drop_table("core.ledger")
    catalog.alter_table("sales.orders", set_properties={"owner": "x"})  # 6: no annotations
    catalog.refresh()
    when = {v: format_millis(catalog.at_version(v).created_at_millis) for v in (3, 5, 6)}

    out = cli("drift", str(spec))
    assert out.exit_code == 2, out.output  # drift present: a scheduled check fails
    assert out.output == (
        f"Drift of {catalog.uri} since version 2 (its last apply, "
        f"{format_millis(catalog.at_version(2).created_at_millis)}, git commit c0ffee).\n"
        "\n"
        "  - table core.ledger\n"
        f"      changed in version 5 at {when[5]} by tool=admin-script, user=carol\n"
        "\n"
        "  ~ table sales.orders\n"
        "      + properties.owner: \"x\"\n"
        "      + column note: varchar\n"
        f"      changed in version 3 at {when[3]} by tool=notebook, user=alice\n"
        f"      changed in version 6 at {when[6]} (no annotations)\n"
        "\n"
        "  ~ table sales.scratch_old (renamed from sales.scratch)\n"
        "      ~ name: \"sales.scratch\" -> \"sales.scratch_old\"\n"
        f"      changed in version 5 at {when[5]} by tool=admin-script, user=carol\n"
        "\n"
        "3 managed objects changed outside the spec.\n")

    data = json.loads(cli("drift", str(spec), "--json").output)
    assert data["has_drift"] is True and data["latest_version"] == 6
    assert data["baseline"]["version"] == 2 and data["baseline"]["matched_by"] == "spec_digest"
    assert data["baseline"]["info"]["tool"] == "olympia apply"
    orders = next(o for o in data["objects"] if o["name"] == "sales.orders")
    assert [(v["version"], v["info"]) for v in orders["changed_in"]] == [
        (3, {"tool": "notebook", "user": "alice"}), (6, {})]
    assert {o["name"] for o in data["objects"]} == {"core.ledger", "sales.orders",
                                                     "sales.scratch_old"}

    # applying the spec again reverts the drift; that apply is the new baseline
    out = cli("apply", str(spec), "--auto-approve", "--allow-destructive")
    assert out.exit_code == 0, out.output
    out = cli("drift", str(spec))
    assert out.exit_code == 0 and "since version 7" in out.output


def test_an_edited_spec_falls_back_to_the_last_apply_of_its_namespaces(
        setup: tuple[Cli, Catalog, Path]) -> None:
    cli, catalog, spec = setup
    write_spec(spec, spec_docs(note=True))  # edited, not applied yet: a new digest
    catalog.refresh()
    catalog.drop_table("sales.scratch")
    out = cli("drift", str(spec), "--json")
    assert out.exit_code == 2, out.output
    data = json.loads(out.output)
    assert data["baseline"]["version"] == 2
    assert data["baseline"]["matched_by"] == "managed_namespaces"
    assert [(o["action"], o["name"]) for o in data["objects"]] == [("drop", "sales.scratch")]
    assert "the spec changed since" in cli("drift", str(spec)).output


def test_no_apply_of_the_spec_is_an_error(location: Location, tmp_path: Path) -> None:
    if location.kind == "memory":
        pytest.skip("the CLI opens the catalog afresh; use disk or S3")
    catalog = Catalog.create(location.uri, location.storage_options)
    catalog.create_namespace("sales")
    spec = write_spec(tmp_path / "spec", spec_docs())
    out = cli_for(location)("drift", str(spec))
    assert out.exit_code == 1
    assert out.output.startswith("Error: no version of ") and "apply it first" in out.output
