"""Catalog-version time travel through OlympiaCatalog: pinned read-only views, multi-table
commits seen atomically, and `olympia rollback` bringing every table back."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows, sales_catalog, sorted_rows
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.types import StringType

from olympia import versions
from olympia.cli import main
from olympia.exceptions import (
    CommitConflict,
    NoSuchExportError,
    NoSuchTransactionError,
    NoSuchVersionError,
    ReadOnlyError,
)
from olympia.iceberg import OlympiaCatalog


@pytest.fixture
def ice(tmp_path: Path) -> OlympiaCatalog:
    return sales_catalog(tmp_path)


def cli(catalog: OlympiaCatalog, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "-c", catalog.olympia.uri])
    assert result.exit_code == 0, result.output
    return result.output


def data(catalog: OlympiaCatalog, name: str) -> list[int]:
    return sorted(catalog.load_table(("sales", name)).scan().to_arrow()["id"].to_pylist())


def test_snapshot_before_a_multi_table_commit_sees_neither_change(ice: OlympiaCatalog) -> None:
    before = ice.at_version(ice.olympia.refresh())
    with ice.transaction() as tx:
        tx.load_table("sales.a").append(rows(100))
        tx.load_table("sales.b").append(rows(200))
        assert data(tx, "a") == [0, 1, 2, 100, 101, 102]  # the transaction reads its writes
        assert data(ice, "a") == [0, 1, 2]  # nobody else does yet
    multi = ice.olympia.refresh()
    assert multi == before.version + 1  # both tables in ONE version
    assert data(before, "a") == data(before, "b") == [0, 1, 2]
    assert data(ice, "a") == [0, 1, 2, 100, 101, 102]
    assert data(ice, "b") == [0, 1, 2, 200, 201, 202]
    ice.load_table("sales.a").append(rows(300))  # a later single-table commit

    out = cli(ice, "rollback", "--to", str(before.version), "--auto-approve")
    assert f"version {multi + 2}" in out
    assert data(ice, "a") == data(ice, "b") == [0, 1, 2]
    for name in ("a", "b"):
        assert ice.olympia.load_table("sales", name).location == \
            before.load_table(("sales", name)).metadata_location
    assert "OK: version" in cli(ice, "verify")
    # pyiceberg tables loaded before the rollback are stale; their next commit retries on
    # a refresh and lands on the rolled-back metadata
    ice.load_table("sales.b").append(rows(400))
    assert data(ice, "b") == [0, 1, 2, 400, 401, 402]


def test_pinned_views_read_each_table_as_it_was(ice: OlympiaCatalog) -> None:
    version = ice.olympia.refresh()
    when = ice.olympia.snapshot.created_at_millis
    ice.load_table("sales.a").append(rows(10))
    ice.load_table("sales.b").overwrite(rows(20))
    for view in (ice.at_version(version), ice.as_of(when),
                 ice.as_of(datetime.fromtimestamp(when / 1000, UTC)),
                 ice.as_of(datetime.fromtimestamp(when / 1000, UTC).replace(tzinfo=None)),
                 ice.as_of(datetime.fromtimestamp(when / 1000, UTC).isoformat())):
        assert view.read_only and view.version == version
        assert data(view, "a") == data(view, "b") == [0, 1, 2]
        table = view.load_table("sales.a")
        assert sorted_rows(table.refresh().scan().to_arrow()) == rows(0)  # stays pinned
    versions.export(ice.olympia, "before-load", str(Path(ice.olympia.uri[7:]).parent / "exp"),
                    mode="minimal", version=version)
    exported = ice.at_export("before-load")
    assert exported.version == version and data(exported, "b") == [0, 1, 2]
    assert data(ice, "b") == [20, 21, 22]
    with pytest.raises(NoSuchVersionError):
        ice.at_version(10_000)
    with pytest.raises(NoSuchExportError):
        ice.at_export("nope")


def test_pinned_views_refuse_writes(ice: OlympiaCatalog) -> None:
    view = ice.at_version(1)
    latest = ice.olympia.refresh()
    past = ice.at_version(latest)
    table = past.load_table("sales.a")
    for write in (lambda: view.create_namespace("x"), lambda: view.drop_table("sales.a"),
                  lambda: past.create_table("sales.c", SCHEMA), lambda: table.append(rows(5)),
                  lambda: past.rename_table("sales.a", "sales.z"),
                  lambda: past.purge_table("sales.a"), lambda: past.transaction().__enter__(),
                  lambda: past.update_namespace_properties("sales", updates={"a": "b"})):
        with pytest.raises(ReadOnlyError, match="read-only"):
            write()
    assert ice.olympia.refresh() == latest


def test_transaction_conflicting_with_a_rollback_fails(ice: OlympiaCatalog) -> None:
    version = ice.olympia.refresh()
    ice.load_table("sales.a").append(rows(10))
    with pytest.raises(CommitFailedException, match="rollback"), ice.transaction() as tx:
        tx.load_table("sales.b").append(rows(20))
        versions.rollback(ice.olympia, version)
    assert data(ice, "a") == data(ice, "b") == [0, 1, 2]


def test_bound_to_an_olympia_transaction(ice: OlympiaCatalog) -> None:
    """What `olympia apply` needs: Iceberg tables created and evolved inside the Olympia
    transaction it commits, everything in its one version (or nothing)."""
    start = ice.olympia.refresh()
    txn = ice.olympia.transaction()
    txn.create_namespace("hr", {"owner": "people"})
    bound = ice.bound_to(txn)
    people = bound.create_table("hr.people", SCHEMA)
    with people.update_schema() as update:
        update.add_column("team", StringType())
    txn.alter_table("hr", "people", comment="from the spec")
    bound.load_table("sales.a").append(rows(50))
    assert ice.olympia.refresh() == start  # nothing visible before the commit
    assert txn.commit() == start + 1
    definition = ice.olympia.load_table("hr", "people")
    assert [c.name for c in definition.columns] == ["id", "name", "team"]
    assert definition.comment == "from the spec"
    assert data(ice, "a") == [0, 1, 2, 50, 51, 52]

    aborted = ice.olympia.transaction()
    staged = ice.bound_to(aborted).create_table("hr.temp", SCHEMA).metadata_location
    aborted.abort()
    assert not Path(staged[len("file://"):]).exists() and not ice.table_exists("hr.temp")


def test_appends_from_two_catalogs_in_one_distributed_transaction(
        ice: OlympiaCatalog, tmp_path: Path) -> None:
    began = ice.olympia.refresh()
    ice.olympia.begin_transaction("wap", info={"dag_run": "r7"})
    first = ice.in_transaction("wap")
    first.load_table("sales.a").append(rows(100))
    first.create_table(("sales", "c"), SCHEMA).append(rows(50))
    # another process's catalog, opened by property, sees the first one's writes
    second = open_catalog({**local_properties(tmp_path), "olympia.transaction": "wap"})
    assert data(second, "a") == [0, 1, 2, 100, 101, 102]
    second.load_table("sales.b").append(rows(200))
    assert data(first, "b") == [0, 1, 2, 200, 201, 202]
    outside = open_catalog(local_properties(tmp_path))
    assert data(outside, "a") == data(outside, "b") == [0, 1, 2]
    assert not outside.table_exists(("sales", "c"))
    assert outside.olympia.refresh() == began and first.version == began

    version = outside.olympia.distributed_transaction("wap").commit()
    assert version == began + 1  # every table in ONE version
    assert data(outside, "a") == [0, 1, 2, 100, 101, 102]
    assert data(outside, "b") == [0, 1, 2, 200, 201, 202]
    assert data(outside, "c") == [50, 51, 52]
    (entry,) = versions.history(outside.olympia, limit=1)
    assert entry.info["dag_run"] == "r7" and entry.info["transaction"] == "wap"
    assert "OK: version" in cli(ice, "verify")


def test_a_write_outside_makes_the_distributed_commit_fail(ice: OlympiaCatalog) -> None:
    ice.olympia.begin_transaction("late")
    inside = ice.in_transaction("late")
    inside.load_table("sales.a").append(rows(100))
    inside.load_table("sales.b").append(rows(200))
    ice.load_table("sales.a").append(rows(300))  # the same table, after the transaction began
    latest = ice.olympia.refresh()
    with pytest.raises(CommitConflict, match="sales.a"):
        ice.olympia.distributed_transaction("late").commit()
    assert ice.olympia.refresh() == latest
    assert data(ice, "a") == [0, 1, 2, 300, 301, 302]
    assert data(ice, "b") == [0, 1, 2]
    with pytest.raises(NoSuchTransactionError):
        ice.in_transaction("late")


def test_a_stale_append_inside_a_distributed_transaction_is_retried(ice: OlympiaCatalog) -> None:
    """Iceberg's requirements are checked against the transaction's view: a table loaded
    before another statement appended to it retries on a refresh, as outside one."""
    ice.olympia.begin_transaction("stale")
    one, two = ice.in_transaction("stale"), ice.in_transaction("stale")
    table = one.load_table("sales.a")
    two.load_table("sales.a").append(rows(10))
    table.append(rows(20))
    assert data(two, "a") == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    ice.olympia.distributed_transaction("stale").abort()
    assert data(ice, "a") == [0, 1, 2]
