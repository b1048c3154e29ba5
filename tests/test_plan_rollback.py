"""Rollback as a plan: the previewed changes, the gates (protected, destructive), the
re-check of the latest version, and the command line (dry run, confirmation, JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_helpers import memory_catalog
from test_plan_cli import Cli

from olympia import Catalog, versions
from olympia.exceptions import CommitConflict, DestructiveChangeError, ProtectedDropError
from olympia.plan.rollback import apply_rollback, plan_rollback

COLS = [{"name": "id", "type": "int8"}]


def build(catalog: Catalog) -> None:
    """v1: ns a; v2: a.t; v3: a.t gets a column; v4: a.t widened; v5: ns p with a protected
    table."""
    catalog.create_namespace("a")
    catalog.create_table("a", "t", columns=[{"name": "id", "type": "int4"}])
    catalog.alter_table("a.t", add_columns=[{"name": "note", "type": "varchar"}])
    catalog.alter_table("a.t", update_columns={"id": {"name": "id", "type": "int8"}})
    with catalog.transaction() as txn:
        txn.create_namespace("p")
        txn.create_table("p", "keep", columns=COLS, protected=True)


def test_the_changes_are_object_level_with_details_and_classified() -> None:
    catalog = memory_catalog()
    build(catalog)
    preview = plan_rollback(catalog, 3)
    assert (preview.latest, preview.target) == (5, 3)
    got = {(c.action, c.kind, c.name): c for c in preview.changes}
    assert list(got) == [("update", "table", "a.t"), ("drop", "table", "p.keep"),
                         ("drop", "namespace", "p")]
    table = got[("update", "table", "a.t")]
    assert table.details == [{"attr": "column id", "before": "int8", "after": "int4",
                              "text": True, "incompatible": True}]
    assert table.reasons == ["changes column id incompatibly (int8 -> int4)"]
    assert got[("drop", "table", "p.keep")].blocked.startswith("table p.keep is protected")
    assert got[("drop", "namespace", "p")].blocked == "namespace p holds protected objects"
    text = preview.render_text(color=False)
    assert text.startswith("Olympia rollback of memory://")
    assert "from version 5 to version 3." in text
    assert "~ column id: int8 -> int4  [incompatible]" in text
    assert "! refused: table p.keep is protected" in text
    data = json.loads(json.dumps(preview.to_dict()))
    assert data["summary"]["blocked"] == 2 and "ops" not in data["changes"][0]
    with pytest.raises(ProtectedDropError, match="p.keep"):
        apply_rollback(catalog, preview, allow_destructive=True)
    assert catalog.refresh() == 5


def test_destructive_rollbacks_need_allow_destructive() -> None:
    catalog = memory_catalog()
    build(catalog)
    catalog.alter_table("p.keep", protected=False)  # v6
    preview = plan_rollback(catalog, "previous")
    assert [(c.action, c.name, c.reasons) for c in preview.changes] == [
        ("update", "p.keep", [])]  # protecting again is safe
    assert not preview.destructive
    preview = plan_rollback(catalog, 2)
    with pytest.raises(DestructiveChangeError, match=r"roll back with --allow-destructive"):
        apply_rollback(catalog, preview)
    assert catalog.refresh() == 6
    new = apply_rollback(catalog, preview, allow_destructive=True)
    assert new == 7 and catalog.list_namespaces() == ["a"]
    assert [c.name for c in catalog.load_table("a.t").columns] == ["id"]
    (entry,) = versions.history(catalog, limit=1)
    assert entry.is_rollback and entry.rollback == (6, 2)


def test_a_protected_table_is_not_changed_incompatibly() -> None:
    catalog = memory_catalog()
    catalog.create_namespace("a")
    catalog.create_table("a", "t", columns=[{"name": "id", "type": "int4"}], protected=True)
    catalog.alter_table("a.t", update_columns={"id": {"name": "id", "type": "int8"}})
    preview = plan_rollback(catalog, 2)
    (change,) = preview.changes
    assert change.blocked == ("table a.t is protected at the latest version; the rollback "
                              "changes column id incompatibly (int8 -> int4)")
    with pytest.raises(ProtectedDropError):
        apply_rollback(catalog, preview, allow_destructive=True)


def test_a_commit_after_the_preview_fails_the_rollback() -> None:
    catalog = memory_catalog()
    catalog.create_namespace("a")
    catalog.create_namespace("b")
    preview = plan_rollback(catalog, 1)
    other = Catalog.open(catalog.uri)
    other.create_namespace("late")
    with pytest.raises(CommitConflict, match="moved from version 2 to 3 since the rollback"):
        apply_rollback(catalog, preview, allow_destructive=True)
    assert catalog.refresh() == 3 and catalog.list_namespaces() == ["a", "b", "late"]


def test_nothing_to_change() -> None:
    catalog = memory_catalog()
    catalog.create_namespace("a")
    catalog.alter_namespace("a", set_properties={"k": "v"})
    catalog.alter_namespace("a", unset_properties=["k"])
    preview = plan_rollback(catalog, 1)
    assert not preview.has_changes
    assert preview.render_text(color=False).endswith(
        "No changes: version 1 holds the same objects as version 3.")


def test_the_rollback_command(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    assert cli("init").exit_code == 0
    catalog = Catalog.open(cli.warehouse)
    build(catalog)
    # the case: a namespace holding a protected table is never dropped
    out = cli("rollback", "--to", "1", "--auto-approve", "--allow-destructive")
    assert out.exit_code == 5 and "the rollback drops objects protected" in out.output
    assert "p.keep" in out.output and catalog.refresh() == 5
    catalog.alter_table("p.keep", protected=False)  # v6
    # a dry run shows and commits nothing, also as JSON
    out = cli("rollback", "--to", "4", "--dry-run")
    assert out.exit_code == 0 and "- namespace p  [destructive]" in out.output
    assert out.output.rstrip().endswith("Plan: 0 to create, 0 to change, 0 to replace, 2 to "
                                        "drop (2 destructive).")
    out = cli("rollback", "--to", "4", "--dry-run", "--json")
    data = json.loads(out.output)
    assert data["to_version"] == 4 and data["latest_version"] == 6 and data["destructive"]
    # destructive: refused without --allow-destructive, before asking
    out = cli("rollback", "--to", "4")
    assert out.exit_code == 5 and "roll back with --allow-destructive" in out.output
    # the prompt: anything but yes cancels
    out = cli("rollback", "--to", "4", "--allow-destructive", input="no\n")
    assert out.exit_code == 1 and "rollback cancelled; nothing was changed" in out.output
    assert catalog.refresh() == 6
    out = cli("rollback", "--to", "4", "--allow-destructive", input="yes\n")
    assert out.exit_code == 0, out.output
    assert "Rolled back to version 4: version 7 (was 6)" in out.output
    assert catalog.refresh() == 7 and catalog.list_namespaces() == ["a"]
    out = cli("rollback", "--to", "previous", "--json", "--auto-approve")
    result = json.loads(out.output)
    assert result["version"] == 8 and result["rolled_back_from"] == 7 and result["to"] == 6
    assert [(c["action"], c["name"]) for c in result["changes"]] == [
        ("create", "p"), ("create", "p.keep")]
    out = cli("rollback", "--to", "nine")
    assert out.exit_code == 1 and "rollback target must be a version" in out.output
