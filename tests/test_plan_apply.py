"""Applying plans: one transaction and one version, saved plans and their staleness, what
is recorded with the version, progress, races with other writers, real S3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Location
from plan_helpers import (
    EXAMPLE,
    EXAMPLE_VARS,
    converge,
    memory_catalog,
    plan_for,
    state,
    write_spec,
)

from olympia import Catalog
from olympia.catalog.actions import type_name
from olympia.exceptions import (
    CommitConflict,
    InvalidArgumentError,
    NotFoundError,
    StalePlanError,
)
from olympia.plan import Change, Plan, apply_plan, make_plan
from olympia.plan.ops import RenameTable
from olympia.spec import load_spec
from olympia.versions import history


def docs(**extra: Any) -> dict[str, Any]:
    return {"sales": {"namespace": "sales", "tables": {"orders": {"columns": [
        {"name": "id", "type": "int8"}]}}}, **extra}


def test_example_applies_as_one_version_everywhere(location: Location) -> None:
    catalog = Catalog.create(location.uri, location.storage_options)
    plan = plan_for(catalog, EXAMPLE, **EXAMPLE_VARS)
    result = apply_plan(catalog, plan, info={"git_commit": "abc123"})
    assert (result.version, result.base_version) == (1, 0)
    reopened = Catalog.open(location.uri, location.storage_options)
    assert reopened.version == 1
    recorded = reopened.at_version(1).actions()
    assert [type_name(a) for a in recorded] == [
        *(a for c in plan.changes for a in c.actions), "TRANSACTION_INFO"]
    info = dict(recorded[-1].info)
    assert info == {"tool": "olympia apply", "spec_digest": plan.spec_digest,
                    "plan_base_version": "0", "git_commit": "abc123"}
    assert not plan_for(reopened, EXAMPLE, **EXAMPLE_VARS).has_changes
    assert result.changes[0] == {"action": "create", "type": "namespace", "name": "finance"}
    assert "reporting.country_ranking" in result.changed_objects
    assert result.to_dict()["version"] == 1


def test_a_failing_change_leaves_the_catalog_unchanged(tmp_path: Path) -> None:
    catalog = memory_catalog()
    plan = plan_for(catalog, write_spec(tmp_path, docs(hr={"namespace": "hr"})))
    bad = Change("rename", "table", "hr.new", "hr.nope",
                 ops=[RenameTable(identifier=("hr", "nope"), new_name="new")])
    plan.changes.append(bad)  # fails after the plan's other changes were staged
    with pytest.raises(NotFoundError, match="hr.nope does not exist"):
        apply_plan(catalog, plan)
    assert catalog.refresh() == 0 and catalog.list_namespaces() == []


def test_saved_plans_apply_exactly_and_go_stale(tmp_path: Path) -> None:
    catalog = memory_catalog()
    spec = write_spec(tmp_path / "s", docs())
    converge(catalog, spec)
    write_spec(spec, docs(extra={"namespace": "extra", "properties": {"k": "v"}}))
    plan_file = tmp_path / "plan.json"
    plan_for(catalog, spec).save(plan_file)
    # unrelated changes: the saved plan applies on the new latest version
    catalog.create_namespace("unrelated")
    catalog.create_table("unrelated", "t")
    result = apply_plan(catalog, Plan.load(plan_file))
    assert result.base_version == 3 and result.version == 4 == catalog.version
    assert catalog.load_namespace("extra").properties == {"k": "v"}
    # applying the same saved plan again: what it manages changed (by itself) -> stale
    with pytest.raises(StalePlanError, match=r"plan is stale, re-plan: .* base version 1 "
                                             r"\(the catalog is at version 4\): namespace extra"):
        apply_plan(catalog, Plan.load(plan_file))
    # a managed object changed by someone else -> stale, and nothing is written
    write_spec(spec, docs(extra={"namespace": "extra", "properties": {"k": "w"}}))
    plan_for(catalog, spec).save(plan_file)
    catalog.alter_table("sales.orders", set_properties={"owner": "someone"})
    with pytest.raises(StalePlanError, match="namespace sales$"):
        apply_plan(catalog, Plan.load(plan_file))
    assert catalog.version == 5 and catalog.load_namespace("extra").properties == {"k": "v"}


def test_staleness_covers_patterns_and_outside_references(tmp_path: Path) -> None:
    catalog = memory_catalog()
    catalog.create_namespace("ext")
    catalog.create_table("ext", "src")
    spec = write_spec(tmp_path, docs(
        m={"manage": ["tmp_*"]},
        r={"namespace": "r", "views": {"v": {"sql": "SELECT 1", "references": ["ext.src"]}}}))
    plan = plan_for(catalog, spec)
    assert plan.scope.references == (("ext", "src"),)
    catalog.create_namespace("tmp_new")  # would have been planned as a drop
    with pytest.raises(StalePlanError, match=r"namespace tmp_new \(now matched by a manage "):
        apply_plan(catalog, plan)
    plan = plan_for(catalog, spec)
    catalog.alter_table("ext.src", set_properties={"a": "b"})  # still exists: fine
    catalog.drop_table("ext.src")
    with pytest.raises(StalePlanError, match="objects its views read outside the spec"):
        apply_plan(catalog, plan, allow_destructive=True)


def test_saved_plan_files_are_checked(tmp_path: Path) -> None:
    catalog = memory_catalog()
    plan_file = tmp_path / "plan.json"
    plan_for(catalog, write_spec(tmp_path / "s", docs())).save(plan_file)
    data = json.loads(plan_file.read_text())
    data["changes"][0]["ops"][0]["namespace"] = "evil"
    (tmp_path / "edited.json").write_text(json.dumps(data))
    with pytest.raises(InvalidArgumentError, match="modified after it was saved"):
        Plan.load(tmp_path / "edited.json")
    data = json.loads(plan_file.read_text()) | {"format_version": 99}
    (tmp_path / "future.json").write_text(json.dumps(data))
    with pytest.raises(InvalidArgumentError, match="format version 99 is not supported"):
        Plan.load(tmp_path / "future.json")
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(InvalidArgumentError, match="not a readable plan file"):
        Plan.load(tmp_path / "junk.json")
    other = memory_catalog()
    with pytest.raises(StalePlanError, match="made for another catalog"):
        apply_plan(other, Plan.load(plan_file))
    loaded = Plan.load(plan_file)
    assert loaded.to_dict()["changes"] == json.loads(plan_file.read_text())["changes"]


def test_a_plans_git_commit_is_recorded_unless_overridden(tmp_path: Path) -> None:
    catalog = memory_catalog()
    spec = write_spec(tmp_path / "s", docs())
    make_plan(catalog, load_spec(spec), git_commit="abc123").save(tmp_path / "plan.json")
    loaded = Plan.load(tmp_path / "plan.json")
    assert loaded.git_commit == "abc123"
    apply_plan(catalog, loaded)
    assert dict(catalog.at_version(1).actions()[-1].info)["git_commit"] == "abc123"
    write_spec(tmp_path / "s", docs(hr={"namespace": "hr"}))
    plan = make_plan(catalog, load_spec(spec), git_commit="abc123")
    apply_plan(catalog, plan, info={"git_commit": "def456"})
    assert dict(catalog.at_version(2).actions()[-1].info)["git_commit"] == "def456"


def test_nothing_to_do_returns_the_unchanged_version(tmp_path: Path) -> None:
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path, docs()))
    result = apply_plan(catalog, plan_for(catalog, tmp_path))
    assert (result.version, result.changes, result.changed_objects) == (1, [], [])
    assert catalog.refresh() == 1


def test_progress_is_reported_per_change(tmp_path: Path) -> None:
    catalog = memory_catalog()
    plan = plan_for(catalog, EXAMPLE, **EXAMPLE_VARS)
    seen: list[tuple[int, int, str]] = []
    apply_plan(catalog, plan, progress=lambda done, total, c: seen.append((done, total, c.name)))
    assert [s[0] for s in seen] == list(range(1, len(plan.changes) + 1))
    assert {s[1] for s in seen} == {len(plan.changes)} and seen[0][2] == "finance"


def test_a_racing_commit_to_managed_objects_fails_the_apply(tmp_path: Path) -> None:
    """Between the freshness check and the commit another writer changes a managed namespace:
    the SERIALIZABLE commit refuses instead of applying a stale plan."""
    catalog = memory_catalog()
    converge(catalog, write_spec(tmp_path, docs()))
    plan = plan_for(catalog, write_spec(tmp_path, docs(hr={"namespace": "hr"})))
    other = Catalog.open(catalog.uri)

    def racing(done: int, total: int, change: Change) -> None:
        other.create_table("sales", "sneaky")

    with pytest.raises(CommitConflict):
        apply_plan(catalog, plan, progress=racing)
    assert not catalog.namespace_exists("hr") and catalog.refresh() == 2


def test_a_racing_unrelated_commit_is_rebased_over(tmp_path: Path) -> None:
    catalog = memory_catalog()
    plan = plan_for(catalog, write_spec(tmp_path, docs()))
    other = Catalog.open(catalog.uri)
    result = apply_plan(catalog, plan, progress=lambda *_: other.create_namespace(
        f"elsewhere_{len(other.list_namespaces())}"))
    assert result.version == 3 and result.base_version == 0
    assert catalog.list_namespaces() == ["elsewhere_0", "elsewhere_1", "sales"]
    entries = history(catalog)
    assert entries[0].version == 3 and entries[0].info["spec_digest"] == plan.spec_digest


@pytest.mark.s3
def test_apply_on_real_s3_is_one_version_and_converges(s3_server: Any, tmp_path: Path) -> None:
    uri = f"s3://{s3_server.bucket}/plan-apply-{tmp_path.name}"
    options = dict(s3_server.storage_options)
    catalog = Catalog.create(uri, options)
    version = apply_plan(catalog, plan_for(catalog, EXAMPLE, **EXAMPLE_VARS)).version
    assert version == 1
    reopened = Catalog.open(uri, options)
    assert reopened.version == 1
    with pytest.raises(NotFoundError):
        reopened.at_version(2)
    assert not plan_for(reopened, EXAMPLE, **EXAMPLE_VARS).has_changes
    fresh = memory_catalog()
    apply_plan(fresh, plan_for(fresh, EXAMPLE, **EXAMPLE_VARS))
    assert state(reopened) == state(fresh)
