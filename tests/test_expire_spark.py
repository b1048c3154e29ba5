"""The expiry job on Spark local[2] against local disk and the real S3 server: nothing live
is ever lost — not with exports, distributed transactions, crashes or concurrent writers."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from conftest import Location
from expire_fixtures import (
    COLS,
    ORPHAN,
    STRANGERS,
    StalledCommit,
    build,
    check_kept,
    export_old,
    files,
    mark_old,
    policy,
    scenario,
    state,
)

from olympia import Catalog, versions
from olympia.catalog.keys import version_path
from olympia.exceptions import ExpiryAbortedError, NotFoundError
from olympia.expire import expire_local, expire_with_spark, job
from olympia.expire.spark import SparkEngine
from olympia.tree import btree

pytestmark = pytest.mark.spark


def run(spark: Any, catalog: Catalog, **kwargs: Any) -> Any:
    kwargs.setdefault("settle_ms", 0)
    return expire_with_spark(spark, catalog.uri, catalog.storage.options,
                             kwargs.pop("policy", policy()), kwargs.pop("dry_run", False),
                             **kwargs)


def test_spark_expiry_keeps_every_live_file(spark: Any, shared_location: Location) -> None:
    location = shared_location
    sc = scenario(location, order=3)
    catalog, before, old, now, young, listed = (sc.catalog, sc.before, sc.old, sc.now, sc.young,
                                                 sc.listed)
    live_id, dead_id, saved_tree = sc.live_id, sc.dead_id, sc.saved_tree

    dry = run(spark, catalog, dry_run=True, now_ms=now)
    assert files(catalog) == listed and catalog.files.oldest_version() == 0
    local = expire_local(catalog, policy(), dry_run=True, now_ms=now, settle_ms=0)
    counts = {k: (v.listed, v.reachable, v.candidates, v.candidate_bytes)
              for k, v in dry.folders.items()}
    assert counts == {k: (v.listed, v.reachable, v.candidates, v.candidate_bytes)
                      for k, v in local.folders.items()}  # one plan, two engines
    assert dry.sample == local.sample and dry.protected == local.protected

    # a commit whose node files are written before the listing but whose root lands only
    # after the job deleted everything: the grace period is what keeps its files
    late = StalledCommit(location, "late")
    latest = catalog.refresh()
    result = run(spark, catalog, now_ms=now)
    late.land()
    assert result.engine == "spark" and result.new_oldest_version == latest - 3
    assert result.files_failed == 0 and result.files_deleted == dry.files_candidates
    assert result.folders["node"].deleted >= 1 and result.bytes_deleted > 0
    assert result.folders["vn"].deleted == result.versions_expired - 2  # 2 exported roots
    snap = catalog.snapshot  # order 3: a deep tree, walked one level at a time
    assert result.walk_levels == btree.depth(snap.nodes, snap.root.node) > 2
    rows = {r["folder"]: r for r in
            (row.asDict() for row in result.to_dataframe(spark).collect())}
    assert rows["node"]["deleted"] == result.folders["node"].deleted

    kept = check_kept(location, before, latest - 3)
    assert kept.version == latest + 1 and "late" in kept.list_tables("s")  # in flight landed
    assert state(versions.at_export(kept, "audit")) == before[old]
    assert state(versions.at_export(kept, "snap")) == before[old + 1]
    remaining = files(catalog)
    assert ORPHAN not in remaining and young in remaining and set(STRANGERS) <= remaining
    assert f"dtxn/{dead_id}.binpb" not in remaining
    assert f"dtxn/{live_id}.binpb" in remaining
    resumed = versions.resume_transaction(kept, live_id)
    resumed.commit()
    assert "pending" in kept.list_tables("s")
    if location.kind == "local":  # idempotence does not depend on the storage
        # afterwards the only unreferenced files are the committed transaction's saved tree
        again = run(spark, kept, policy=policy(keep_last=100), now_ms=now)
        assert again.versions_expired == 0 and set(again.sample) == saved_tree
        assert again.files_deleted == len(saved_tree) and not saved_tree & files(catalog)


def test_concurrent_writers_lose_nothing(spark: Any, shared_location: Location) -> None:
    """A rollback and an export that checked vn/oldest before the job raised it, commits
    after every step and a writer committing throughout: afterwards every version from the
    new oldest one on reads correctly and nothing committed is missing."""
    location = shared_location
    catalog, before = build(location, order=3)
    now = mark_old(catalog)
    writer = Catalog.open(location.uri, location.storage_options)
    target = catalog.version - 8  # below what keep_last=4 keeps
    log: list[str] = []
    stop = threading.Event()

    def keep_committing() -> None:
        other = Catalog.open(location.uri, location.storage_options)
        for i in range(8):  # a busy writer that still leaves room for the others
            if stop.wait(0.3):
                return
            other.create_table("s", f"bg{i:03d}", columns=COLS)

    background = threading.Thread(target=keep_committing)

    def interleave(step: str, _info: dict[str, Any]) -> None:
        log.append(step)
        if step == "decided":  # these checked vn/oldest before the job raised it
            versions.rollback(writer, target)
            export_old(writer, location, "late-export", "minimal", target + 1)
            background.start()
        elif step == "oldest-advanced":
            with pytest.raises(NotFoundError):
                versions.rollback(writer, target)
        elif step in ("listed", "walked", "identified", "roots-deleted"):
            writer.create_table("s", f"during_{step.replace('-', '_')}", columns=COLS)

    try:
        result = run(spark, catalog, now_ms=now, on_step=interleave)
    finally:
        stop.set()
        if background.is_alive():
            background.join(60)
    assert log[:3] == ["decided", "oldest-advanced", "listed"] and result.files_failed == 0
    assert result.files_deleted > 0
    fresh = check_kept(location, before, result.new_oldest_version)
    assert fresh.catalog_def.exported_snapshots["late-export"] == version_path(target + 1)
    assert state(versions.at_export(fresh, "late-export")) == before[target + 1]
    rolled_back = fresh.at_version(result.latest_version + 1)
    assert state(rolled_back) == before[target]  # the rolled-back tree survived
    tables = set(fresh.list_tables("s"))
    assert {"during_listed", "during_walked", "during_identified",
            "during_roots_deleted"} <= tables
    assert {t.name for t in before[target][1]} <= tables
    for v in range(result.new_oldest_version, fresh.version + 1):
        state(fresh.at_version(v))  # every definition file of every kept version is there


def test_commit_landing_after_the_walk_stops_the_spark_job(spark: Any, tmp_path: Any,
                                                           ) -> None:
    """A commit stalled longer than the grace period lands between identification and the
    deletes: the job reads the latest version again, finds its files among the candidates
    and deletes nothing."""
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, before = build(location, order=3, tables=8, alters=0)
    late = StalledCommit(location, "late")
    now = mark_old(catalog)

    def land(step: str, _info: dict[str, Any]) -> None:
        if step == "identified":
            late.land()

    listed, landed = files(catalog), catalog.version + 1
    with pytest.raises(ExpiryAbortedError, match=rf"nothing deleted .*versions {landed}\.\."
                                                 rf"{landed}, committed after the walk"):
        run(spark, catalog, now_ms=now, on_step=land)
    assert files(catalog) - {"vn/oldest"} == listed - {"vn/oldest"} | {version_path(landed)}
    assert "late" in check_kept(location, before, catalog.files.oldest_version()).list_tables(
        "s")


def test_unreadable_node_aborts_the_spark_job(spark: Any, tmp_path: Any) -> None:
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, _ = build(location, order=3)
    snap = catalog.snapshot
    victim = list(btree.node_paths(snap.nodes, snap.root.node))[-1]
    catalog.storage.write(victim, b"garbage")
    listed = files(catalog)
    with pytest.raises(ExpiryAbortedError, match=f"nothing deleted.*corrupt file .*{victim}"):
        run(spark, catalog, policy=policy(grace_ms=0))
    assert files(catalog) - {"vn/oldest"} == listed


def test_crash_between_deletes_then_rerun(spark: Any, shared_location: Location) -> None:
    """The job dies after deleting the expired roots but before the other files; the
    catalog still reads as before, and the next run finishes the work."""
    location = shared_location
    catalog, before = build(location, order=4, tables=8, alters=2)
    catalog.storage.write(ORPHAN, b"orphan")
    now = mark_old(catalog)

    def die(step: str, _info: dict[str, Any]) -> None:
        if step == "roots-deleted":
            raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        run(spark, catalog, now_ms=now, on_step=die)
    first = catalog.files.oldest_version()
    assert first == catalog.version - 3 and ORPHAN in files(catalog)
    assert not {version_path(v) for v in range(first)} & files(catalog)  # roots went first
    check_kept(location, before, first)
    result = run(spark, catalog, now_ms=now)
    assert result.versions_expired == 0 and result.folders["vn"].candidates == 0
    assert result.files_deleted > 0 and result.files_failed == 0
    assert ORPHAN not in files(catalog)
    check_kept(location, before, first)
    leftover = expire_local(catalog, policy(), dry_run=True, now_ms=now, settle_ms=0)
    assert leftover.files_candidates == 0


@pytest.mark.parametrize("few", [True, False], ids=["on-driver", "on-executors"])
def test_spark_jobs_per_run(spark: Any, tmp_path: Any, few: bool) -> None:
    """A run's fixed cost is its Spark jobs: a small catalog's trees and transaction records
    are read and its few expired roots deleted on the driver, and every other step is one
    job (the sample comes with the classification); with nothing done on the driver, one
    job per tree level and one per delete. The caller's job group is put back and nothing
    stays cached."""
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, before = build(location, order=3)
    catalog.storage.write(ORPHAN, b"orphan")
    now = mark_old(catalog)
    sc = spark.sparkContext
    cached = sc._jsc.getPersistentRDDs().size()
    sc.setJobGroup("caller", "the caller's own jobs")
    try:
        engine = (SparkEngine(spark, catalog.uri, {}) if few else
                  SparkEngine(spark, catalog.uri, {}, driver_reads=0, driver_deletes=0))
        result = job.run(engine, catalog, policy(), now_ms=now, settle_ms=0)
        assert sc.getLocalProperty("spark.jobGroup.id") == "caller"
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert result.folders["vn"].deleted > 0 and result.folders["node"].deleted > 0
    assert result.files_failed == 0 and result.walk_levels > 2
    on_executors = {} if few else {"reading roots": 1,
                                   "walking the trees": result.walk_levels - 1}
    assert {what: jobs for what, (jobs, _) in engine.jobs.items()} == {
        "listing": 1, **on_executors, "finding unreferenced files": 1,
        "deleting": 1 if few else 2, "verifying deletes": 1}
    assert sc._jsc.getPersistentRDDs().size() == cached
    assert ORPHAN not in files(catalog)
    check_kept(location, before, result.new_oldest_version)


def test_spark_walk_on_executors_matches_the_local_engine(spark: Any,
                                                          shared_location: Location) -> None:
    """With every level and transaction record read by executors (as in large catalogs),
    one job per level and the same plan as the single-process engine."""
    sc = scenario(shared_location, order=3)
    engine = SparkEngine(spark, sc.catalog.uri, sc.catalog.storage.options, driver_reads=0)
    dry = job.run(engine, sc.catalog, policy(), True, now_ms=sc.now, settle_ms=0)
    local = expire_local(sc.catalog, policy(), dry_run=True, now_ms=sc.now, settle_ms=0)
    assert dry.folders == local.folders and dry.sample == local.sample
    assert dry.protected == local.protected and dry.walk_levels == local.walk_levels > 2
    jobs = {what: n for what, (n, _) in engine.jobs.items()}
    assert jobs == {"listing": 1, "reading distributed transactions": 1, "reading roots": 1,
                    "walking the trees": dry.walk_levels - 1,
                    "finding unreferenced files": 1}
