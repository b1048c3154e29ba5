"""Expiry on Spark local[2] (local disk and the real S3 server): never a live file lost."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import Location

from olympia import Catalog, versions
from olympia.cli import main
from olympia.exceptions import InvalidArgumentError, NotFoundError
from olympia.expire import ExpirePolicy, expire_local, expire_with_spark, parse_duration
from olympia.expire import spark as spark_job
from olympia.tree import btree

pytestmark = pytest.mark.spark
COLS = [{"name": "id", "type": "int8"}]
OLD = 4.0  # seconds files must age before they count as old
GRACE_MS = 3000


def state(reader: Any) -> Any:
    namespaces, tables, views = reader.load_all()
    return namespaces, tables, views


def build(location: Location) -> tuple[Catalog, dict[int, Any]]:
    catalog = Catalog.create(location.uri, location.storage_options, order=3)
    catalog.create_namespace("s")
    for i in range(12):
        catalog.create_table("s", f"t{i:02d}", columns=COLS)
    for i in range(4):
        catalog.alter_table(f"s.t{i:02d}", set_properties={"v": str(i)})
    return catalog, {v: state(catalog.at_version(v)) for v in range(catalog.version + 1)}


def policy(**overrides: Any) -> ExpirePolicy:
    values = {"keep_last": 4, "older_than_ms": 0, "grace_ms": GRACE_MS, "force": True}
    values.update(overrides)
    return ExpirePolicy(**values)


def run(spark: Any, catalog: Catalog, dry_run: bool = False, now_ms: int | None = None,
        **overrides: Any) -> Any:
    return expire_with_spark(spark, catalog.uri, catalog.storage.options, policy(**overrides),
                             dry_run, settle_seconds=0, now_ms=now_ms)


def test_expiry_keeps_every_live_file(spark: Any, shared_location: Location) -> None:
    catalog, before = build(shared_location)
    old_export = catalog.version - 8
    versions.export(catalog, "audit", shared_location.sub("exp").uri, "minimal",
                    target_storage_options=shared_location.storage_options, version=old_export)
    txn = catalog.transaction()
    txn.create_table("s", "pending", columns=COLS)
    txn_id = versions.save_transaction(txn)
    catalog.storage.write("node/00000000-0000-4000-8000-000000000000.arrow", b"crashed commit")
    time.sleep(OLD)
    files_before = {f.path for f in catalog.storage.list()}

    dry = run(spark, catalog, dry_run=True)
    assert {f.path for f in catalog.storage.list()} == files_before  # dry run deletes nothing
    local = expire_local(catalog, policy(), dry_run=True, settle_seconds=0)
    assert {k: (v.listed, v.reachable, v.candidates) for k, v in dry.folders.items()} == {
        k: (v.listed, v.reachable, v.candidates) for k, v in local.folders.items()}

    latest = catalog.refresh()
    young = "node/ffffffff-0000-4000-8000-000000000000.arrow"
    catalog.storage.write(young, b"in-flight commit")
    # pin the job's clock to "just after the young file": listing S3 on Spark takes seconds
    result = run(spark, catalog, now_ms=int(time.time() * 1000) + 500)
    assert result.new_oldest_version == latest - 3 and result.files_failed == 0
    assert result.folders["vn"].deleted == result.versions_expired - 1  # the export's root stays
    assert result.folders["node"].deleted >= 1
    fresh = Catalog.open(shared_location.uri, shared_location.storage_options)
    for v in range(latest - 3, latest + 1):  # every retained version reads as before
        snap = fresh.at_version(v)
        btree.validate(snap.nodes, snap.root.node, 3)
        if v in before:
            assert state(snap) == before[v]
    with pytest.raises(NotFoundError, match="expired"):
        fresh.at_version(latest - 4)
    assert state(versions.at_export(fresh, "audit")) == before[old_export]
    remaining = {f.path for f in fresh.storage.list()}
    assert "node/00000000-0000-4000-8000-000000000000.arrow" not in remaining
    assert young in remaining  # younger than grace
    resumed = versions.resume_transaction(fresh, txn_id)
    resumed.commit()
    assert "pending" in fresh.list_tables("s")
    run(spark, fresh)  # the resumed commit made one more version expirable
    again = run(spark, fresh)  # idempotent: a run right after a run finds nothing
    assert again.files_deleted == 0


def test_rollback_committed_during_expiry_is_kept(spark: Any, shared_location: Location,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, before = build(shared_location)
    target = catalog.version - 10  # will be expired by keep_last=4
    real_advance = spark_job.advance_oldest

    def rollback_then_advance(cat: Catalog, retention: Any) -> None:
        # a rollback to an expiring version lands after the job decided, before vn/oldest moves
        versions.rollback(Catalog.open(cat.uri, cat.storage.options), target)
        real_advance(cat, retention)

    monkeypatch.setattr(spark_job, "advance_oldest", rollback_then_advance)
    time.sleep(OLD)
    run(spark, catalog)
    fresh = Catalog.open(shared_location.uri, shared_location.storage_options)
    snap = fresh.snapshot
    btree.validate(snap.nodes, snap.root.node, 3)
    assert state(snap) == before[target]  # the rolled-back tree survived


def test_crash_after_oldest_moved_then_rerun(spark: Any, shared_location: Location,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, before = build(shared_location)
    time.sleep(OLD)

    def crash(*_: Any) -> set[str]:
        raise RuntimeError("driver died")

    monkeypatch.setattr(spark_job, "late_arrivals", crash)
    with pytest.raises(RuntimeError, match="driver died"):
        run(spark, catalog)
    assert catalog.files.oldest_version() == catalog.version - 3  # step 2 happened
    monkeypatch.undo()
    result = run(spark, catalog)
    assert result.files_deleted > 0
    fresh = Catalog.open(shared_location.uri, shared_location.storage_options)
    assert state(fresh) == before[fresh.version]


def test_unreadable_node_aborts_before_any_change(spark: Any, shared_location: Location,
                                                  ) -> None:
    catalog, _ = build(shared_location)
    snap = catalog.snapshot
    victim = list(btree.node_paths(snap.nodes, snap.root.node))[-1]
    catalog.storage.write(victim, b"garbage")
    files_before = {f.path for f in catalog.storage.list()}
    with pytest.raises(Exception, match=victim.split("/")[-1]):
        run(spark, catalog)
    assert {f.path for f in catalog.storage.list()} == files_before
    assert catalog.files.oldest_version() == 0


def test_policy_safety() -> None:
    assert parse_duration("36h") == 36 * 3600 * 1000 and parse_duration("0s") == 0
    with pytest.raises(InvalidArgumentError, match="invalid duration"):
        parse_duration("3 days")
    with pytest.raises(InvalidArgumentError, match="safety minimum"):
        ExpirePolicy(grace_ms=0).validate()
    ExpirePolicy(grace_ms=0, force=True).validate()
    resolved = ExpirePolicy().resolved({"olympia.expire.keep-last": "5",
                                        "olympia.expire.grace": "2d"})
    assert (resolved.keep_last, resolved.grace_ms) == (5, 2 * 86_400_000)


def test_cli_expire(spark: Any, tmp_path: Any) -> None:
    catalog, _ = build(Location(str(tmp_path / "wh"), {}, "local"))
    runner = CliRunner()
    env = {"OLYMPIA_CATALOG": catalog.uri}
    out = runner.invoke(main, ["expire", "--grace", "0s"], env=env)
    assert out.exit_code == 1 and "safety minimum" in out.output
    out = runner.invoke(main, ["expire", "--keep-last", "2", "--older-than", "0s", "--grace",
                               "0s", "--force", "--dry-run", "--json"], env=env)
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["dry_run"] and data["versions_expired"] == catalog.version - 1
    assert Catalog.open(catalog.uri).files.oldest_version() == 0




def test_spark_submit_entry_point(tmp_path: Any) -> None:
    """The job as a cluster runs it: spark-submit of olympia/expire/__main__.py."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import olympia.expire

    catalog, _ = build(Location(str(tmp_path / "wh"), {}, "local"))
    script = Path(olympia.expire.__file__).with_name("__main__.py")
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(script),
         "--catalog", catalog.uri, "--keep-last", "2", "--older-than", "0s", "--grace", "0s",
         "--force", "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["engine"] == "spark" and result["versions_expired"] == catalog.version - 1
    assert Catalog.open(catalog.uri).files.oldest_version() == catalog.version - 1
