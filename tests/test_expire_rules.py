"""Expiry rules without Spark: policy and durations, the version decision, which files may
ever be deleted, and the single-process engine on memory and local disk."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from conftest import Location
from expire_fixtures import (
    COLS,
    GRACE_MS,
    ORPHAN,
    STRANGERS,
    StalledCommit,
    build,
    check_kept,
    export_old,
    files,
    frozen,
    mark_old,
    policy,
    scenario,
    state,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from olympia import Catalog, versions
from olympia.catalog.files import OLDEST
from olympia.catalog.keys import version_path
from olympia.exceptions import ExpiryAbortedError, InvalidArgumentError, NotFoundError
from olympia.expire import ExpirePolicy, expire_local, format_duration, parse_duration
from olympia.expire.reachability import effective_now, is_candidate, kind_of
from olympia.tree import btree
from olympia.versions.dtxn import load_transaction
from olympia.versions.policy import GRACE, KEEP_LAST, OLDER_THAN, decide, save_defaults

# the steps ExpireResult.timings reports, in the order they run
IDENTIFY_STEPS = ["decide", "raise_oldest", "list", "transactions", "walk", "classify",
                  "sample"]
DELETE_STEPS = ["recheck", "delete_roots", "delete_files", "verify"]


def test_durations() -> None:
    assert parse_duration("0s") == 0
    assert parse_duration("36h") == 36 * 3_600_000
    assert parse_duration("7d") == 7 * 86_400_000
    assert parse_duration("1d12h") == 36 * 3_600_000
    assert parse_duration("500ms") == 500 and parse_duration(" 2W ") == 14 * 86_400_000
    assert parse_duration(1234) == 1234
    for bad in ("3 days", "", "-1h", "h", "1.5h", "7x"):
        with pytest.raises(InvalidArgumentError, match="invalid duration"):
            parse_duration(bad)
    assert [format_duration(v) for v in (0, 1500, 90 * 60_000, 3 * 86_400_000)] == [
        "0s", "1500ms", "90m", "3d"]


def test_safety_minimum_needs_force() -> None:
    with pytest.raises(InvalidArgumentError, match="grace 0s is below the safety minimum 1h"):
        ExpirePolicy(grace_ms=0).validate()
    with pytest.raises(InvalidArgumentError, match="older-than 30m is below"):
        ExpirePolicy(older_than_ms=parse_duration("30m")).validate()
    ExpirePolicy(grace_ms=0, older_than_ms=0, force=True).validate()
    with pytest.raises(InvalidArgumentError, match="keep-last must be at least 1"):
        ExpirePolicy(keep_last=0, force=True).validate()
    defaults = ExpirePolicy().resolved({})
    assert (defaults.keep_last, defaults.older_than_ms, defaults.grace_ms) == (
        10, 7 * 86_400_000, 3 * 86_400_000)


def test_catalog_defaults(tmp_path: Any) -> None:
    catalog = Catalog.create(str(tmp_path / "c"), properties={
        KEEP_LAST: "5", OLDER_THAN: "36h", GRACE: "2d"})
    pol = ExpirePolicy.from_catalog(catalog)
    assert (pol.keep_last, pol.older_than_ms, pol.grace_ms) == (5, 36 * 3_600_000,
                                                                2 * 86_400_000)
    pol = ExpirePolicy.from_catalog(catalog, keep_last=2, grace="5h")
    assert (pol.keep_last, pol.grace_ms) == (2, 5 * 3_600_000)
    with pytest.raises(InvalidArgumentError, match="unknown expiry setting"):
        ExpirePolicy.from_catalog(catalog, keep=3)
    with pytest.raises(InvalidArgumentError, match="safety minimum"):
        save_defaults(catalog, ExpirePolicy(grace_ms=0))
    version = save_defaults(catalog, ExpirePolicy(grace_ms=parse_duration("12h")))
    assert version == 1 and catalog.properties[GRACE] == "12h"
    bad = Catalog.create(str(tmp_path / "bad"), properties={GRACE: "soon"})
    with pytest.raises(InvalidArgumentError, match="catalog property olympia.expire.grace"):
        ExpirePolicy.from_catalog(bad)
    unsafe = Catalog.create(str(tmp_path / "unsafe"), properties={GRACE: "1m"})
    with pytest.raises(InvalidArgumentError, match="safety minimum"):
        ExpirePolicy.from_catalog(unsafe)


def test_only_files_the_format_names_can_go() -> None:
    node = "node/0b2d4492-d5d0-40f8-9125-093e2d705bc4.arrow"
    assert kind_of(node) == "node" and kind_of(version_path(5)) == "root"
    assert kind_of("def/table/0b2d4492-d5d0-40f8-9125-093e2d705bc4-ns-t%2A.binpb") == "def"
    assert kind_of("dtxn/abc.binpb") == "dtxn"
    for stranger in [*STRANGERS, "vn/latest", "vn/oldest", "node/0b2d4492.arrow", node + "\n",
                     "node/x/0b2d4492-d5d0-40f8-9125-093e2d705bc4.arrow",
                     "def/table/0b2d4492-d5d0-40f8-9125-093e2d705bc4-*.binpb",
                     "def/other/0b2d4492-d5d0-40f8-9125-093e2d705bc4.binpb"]:
        assert kind_of(stranger) is None, stranger
        assert not is_candidate(stranger, 0.0, 10**6, 10**15)
    assert is_candidate(node, 99.0, 0, 100_000)  # modified 99 s < cutoff 100 s
    assert not is_candidate(node, 100.0, 0, 100_000)  # not strictly older: kept
    assert is_candidate(version_path(4), 10**12, 5, 0)  # roots: by version, not by age
    assert not is_candidate(version_path(5), 0.0, 5, 10**15)
    assert effective_now(10**15, clock=frozen(5000)) == 5000  # never later than the clock
    assert effective_now(4000, clock=frozen(5000)) == 4000
    assert effective_now(clock=frozen(5000)) == 5000


@settings(max_examples=40, deadline=None)
@given(versions_=st.integers(1, 12), keep=st.integers(1, 14), older=st.integers(0, 14),
       oldest=st.integers(0, 12))
def test_decision_matches_the_definition(versions_: int, keep: int, older: int,
                                         oldest: int) -> None:
    """v expires iff it is not among the last keep_last versions AND version v+1 was
    created at least older_than before now; vn/oldest never moves down."""
    catalog = _timeline(versions_)
    latest = catalog.version
    oldest = min(oldest, latest)
    catalog.files.write_hint("vn/oldest", oldest)
    created = [catalog.files.read_root(v).created_at_millis for v in range(latest + 1)]
    now = created[-1] + 5
    older_ms = now - created[min(older, latest)]  # pick thresholds at real creation times
    got = decide(catalog.files, policy(keep_last=keep, older_than_ms=older_ms).resolved({}),
                 now)
    expected = oldest
    while expected < latest - keep + 1 and created[expected + 1] <= now - older_ms:
        expected += 1
    assert got.new_oldest == max(oldest, expected)


_TIMELINES: dict[int, Catalog] = {}


def _timeline(n: int) -> Catalog:
    """A memory catalog with n+1 versions (cached: hypothesis calls this often)."""
    if n not in _TIMELINES:
        catalog = Catalog.create(f"memory://timeline-{n}-{time.time_ns()}")
        for i in range(n):
            catalog.create_namespace(f"n{i}")
        _TIMELINES[n] = catalog
    catalog = _TIMELINES[n]
    catalog.storage.delete("vn/oldest")
    return catalog


def test_local_engine_end_to_end(location: Location) -> None:
    """The single-process engine: exports, transactions, grace, strangers, idempotence."""
    sc = scenario(location, order=4)
    catalog, before, old, now, young, listed = (sc.catalog, sc.before, sc.old, sc.now, sc.young,
                                                 sc.listed)
    live_id, dead_id = sc.live_id, sc.dead_id

    dry = expire_local(catalog, policy(), dry_run=True, now_ms=now, settle_ms=0)
    assert files(catalog) == listed and catalog.files.oldest_version() == 0
    assert dry.dry_run and dry.files_deleted == 0 and dry.files_candidates > 0
    assert list(dry.timings) == IDENTIFY_STEPS
    assert sum(dry.timings.values()) == pytest.approx(dry.seconds_identifying)
    result = expire_local(catalog, policy(), now_ms=now, settle_ms=0)
    assert list(result.timings) == [*IDENTIFY_STEPS, *DELETE_STEPS]
    assert sum(result.timings[s] for s in DELETE_STEPS) == pytest.approx(
        result.seconds_deleting)
    assert sum(result.timings.values()) == pytest.approx(
        result.seconds_identifying + result.seconds_deleting)
    assert result.to_dict()["timings"] == result.timings
    latest = catalog.refresh()
    assert result.new_oldest_version == latest - 3 and result.files_failed == 0
    assert {k: v.candidates for k, v in result.folders.items()} == {
        k: v.candidates for k, v in dry.folders.items()}
    assert result.protected[version_path(old)] == "export audit"
    assert result.protected[version_path(old + 1)] == "export snap"
    kept = check_kept(location, before, latest - 3)
    assert state(versions.at_export(kept, "audit")) == before[old]
    assert state(versions.at_export(kept, "snap")) == before[old + 1]
    remaining = files(catalog)
    assert ORPHAN not in remaining and young in remaining
    assert set(STRANGERS) <= remaining
    assert f"dtxn/{dead_id}.binpb" not in remaining
    assert version_path(old) in remaining and version_path(old - 1) not in remaining
    assert result.folders["vn"].deleted == result.versions_expired - 2  # 2 exported roots
    resumed = versions.resume_transaction(kept, live_id)
    resumed.commit()
    assert "pending" in kept.list_tables("s")
    # the committed transaction's saved tree is now unreferenced; a second run finds nothing
    # both at the scenario's instant: the young file stays young however slow the storage
    expire_local(kept, policy(keep_last=100), settle_ms=0, clock=frozen(now))
    again = expire_local(kept, policy(keep_last=100), settle_ms=0, clock=frozen(now))
    assert young in files(kept)
    assert again.files_deleted == 0 and again.versions_expired == 0


def test_keep_last_and_older_than(tmp_path: Any) -> None:
    """A version is kept while it is among the last N or superseded recently enough."""
    catalog, _ = build(Location(str(tmp_path / "c"), {}, "local"), order=8, tables=6, alters=0)
    created = {v: catalog.files.read_root(v).created_at_millis
               for v in range(catalog.version + 1)}
    # 1 ms after version 4 was created, with older-than 1 ms: versions 0..3 were superseded
    # (by 1..4) at least 1 ms earlier; version 4 is superseded by 5, which does not exist yet
    result = expire_local(catalog, policy(keep_last=1, older_than_ms=1), dry_run=True,
                          now_ms=created[4] + 1, settle_ms=0)
    assert result.new_oldest_version == 4
    result = expire_local(catalog, policy(keep_last=1, older_than_ms=2), dry_run=True,
                          now_ms=created[4] + 1, settle_ms=0)
    assert result.new_oldest_version == 3
    # created_at may run ahead of the clock (ruling 9): evaluate after the last one
    result = expire_local(catalog, policy(keep_last=5, older_than_ms=0), settle_ms=0,
                          clock=frozen(created[catalog.version] + 1))
    assert result.new_oldest_version == catalog.version - 4
    with pytest.raises(NotFoundError, match="has expired"):
        catalog.at_version(0)


def test_crash_at_every_step_then_rerun(tmp_path: Any) -> None:
    """A run that dies after any step leaves a catalog that reads as before, and the next
    run finishes the job."""
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, before = build(location, order=3)
    catalog.storage.write(ORPHAN, b"orphan")
    now = mark_old(catalog)
    steps = ["decided", "oldest-advanced", "listed", "walked", "identified", "roots-deleted",
             "files-deleted"]
    seen = []
    for step in steps:
        def crash(name: str, _info: dict[str, Any], step: str = step) -> None:
            seen.append(name)
            if name == step:
                raise RuntimeError(f"killed after {name}")

        with pytest.raises(RuntimeError, match=f"killed after {step}"):
            expire_local(catalog, policy(), now_ms=now, settle_ms=0, on_step=crash)
        check_kept(location, before, catalog.files.oldest_version())
    assert set(steps) <= set(seen)
    final = expire_local(catalog, policy(), now_ms=now, settle_ms=0)
    assert final.files_failed == 0 and ORPHAN not in files(catalog)
    check_kept(location, before, catalog.version - 3)
    leftovers = [p for p in files(catalog) if p.startswith("vn/0") or p.startswith("vn/1")]
    assert len(leftovers) == 4  # only the kept roots: none left behind by crashed runs


def test_unreadable_or_missing_nodes_abort_before_any_delete(tmp_path: Any) -> None:
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, _ = build(location, order=3)
    snap = catalog.snapshot
    victim = list(btree.node_paths(snap.nodes, snap.root.node))[-1]
    good = catalog.storage.read(victim)
    catalog.storage.write(victim, b"garbage")
    listed = files(catalog)
    with pytest.raises(ExpiryAbortedError, match=f"nothing deleted .vn/oldest was already "
                                                  f"raised to .*{victim}"):
        expire_local(catalog, policy(grace_ms=0), settle_ms=0)
    assert files(catalog) - {"vn/oldest"} == listed  # the policy's decision stands, no delete
    catalog.storage.write(victim, good)
    catalog.storage.delete(version_path(catalog.version - 1))  # a kept root vanished
    with pytest.raises(ExpiryAbortedError, match="is missing although vn/oldest"):
        expire_local(catalog, policy(grace_ms=0), settle_ms=0)
    assert files(catalog) == listed - {version_path(catalog.version - 1)} | {"vn/oldest"}


def test_memory_catalog_cannot_go_to_spark() -> None:
    from olympia.expire import expire_with_spark

    with pytest.raises(InvalidArgumentError, match="expire_local"):
        expire_with_spark(None, "memory://x", None, policy())


def test_a_rollback_or_export_after_oldest_moved_is_refused(tmp_path: Any) -> None:
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, _ = build(location, order=4, tables=6, alters=0)
    expire_local(catalog, policy(keep_last=2, grace_ms=GRACE_MS), settle_ms=0)
    with pytest.raises(NotFoundError, match="oldest kept version"):
        versions.rollback(catalog, 1)
    with pytest.raises(NotFoundError, match="expired"):
        export_old(catalog, location, "late", "minimal", 1)


def test_overlapping_runs_never_lower_oldest(tmp_path: Any) -> None:
    """Run B reads vn/oldest; run A raises it higher; B's write of its lower value lands
    after A's, then A goes on to delete. vn/oldest must end at A's value (A puts it back
    before deleting) and both runs finish with every version from there on intact."""
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, before = build(location, order=3)
    now = mark_old(catalog)
    eager = Catalog.open(location.uri)  # run A: keeps 2 versions
    lazy = Catalog.open(location.uri)  # run B: keeps 6
    a_raised, b_wrote = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def run_a() -> None:
        def pause(step: str, _info: dict[str, Any]) -> None:
            if step == "oldest-advanced":
                a_raised.set()
                assert b_wrote.wait(60)

        results["a"] = expire_local(eager, policy(keep_last=2), now_ms=now, settle_ms=0,
                                    on_step=pause)

    write = lazy.storage.write

    def late_write(path: str, data: bytes, durable: bool = True) -> None:
        if path == OLDEST and not b_wrote.is_set():  # B has read vn/oldest already
            runner = threading.Thread(target=run_a)
            runner.start()
            assert a_raised.wait(60)
            write(path, data, durable)
            b_wrote.set()
            runner.join(120)
        else:
            write(path, data, durable)

    lazy.storage.write = late_write  # type: ignore[method-assign]
    results["b"] = expire_local(lazy, policy(keep_last=6), now_ms=now, settle_ms=0)
    a, b = results["a"], results["b"]
    assert a.new_oldest_version == catalog.version - 1 > b.new_oldest_version
    assert catalog.files.oldest_version() == a.new_oldest_version
    assert any("lowered" in w for w in a.warnings)
    assert any("expired by another run" in w for w in b.warnings)
    assert a.files_failed == b.files_failed == 0
    check_kept(location, before, a.new_oldest_version)


def test_commit_landing_after_the_walk_stops_the_deletes(tmp_path: Any) -> None:
    """A commit that stalled longer than the grace period between writing its files (before
    the listing) and its root (after the walk): its files look unreferenced and old. The
    latest version is read again right before deleting, so the run stops instead."""
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, before = build(location, order=3)
    late = StalledCommit(location, "late")
    now = mark_old(catalog)  # the stalled commit's files are now older than the grace period

    def land(step: str, _info: dict[str, Any]) -> None:
        if step == "identified":
            late.land()

    listed, landed = files(catalog), catalog.version + 1
    with pytest.raises(ExpiryAbortedError, match=rf"nothing deleted .*versions {landed}\.\."
                                                 rf"{landed}, committed after the walk, "
                                                 r"reference files about to be deleted .*node/"):
        expire_local(catalog, policy(), now_ms=now, settle_ms=0, on_step=land)
    assert files(catalog) - {OLDEST} == listed - {OLDEST} | {version_path(landed)}
    fresh = check_kept(location, before, catalog.files.oldest_version())
    assert "late" in fresh.list_tables("s")
    result = expire_local(catalog, policy(), now_ms=now, settle_ms=0)  # the next run is fine
    assert result.files_failed == 0 and result.files_deleted > 0
    assert "late" in check_kept(location, before, result.new_oldest_version).list_tables("s")


def test_missing_export_or_transaction_root_fails_closed(tmp_path: Any) -> None:
    """A root that an export or a live distributed transaction names, but that does not
    exist, leaves what it references unknown: the run deletes nothing and names it."""
    location = Location(str(tmp_path / "c"), {}, "local")
    catalog, _ = build(location, order=3)
    old = catalog.version - 8
    export_old(catalog, location, "audit", "minimal", old)
    txn = catalog.transaction()
    txn.create_table("s", "pending", columns=COLS)
    txn_id = versions.save_transaction(txn)
    running = load_transaction(catalog, txn_id).running_root_node_file_path
    for lost, why in ((version_path(old), "export audit"), (running, f"transaction {txn_id}")):
        data = catalog.storage.read(lost)
        catalog.storage.delete(lost)
        listed = files(catalog)
        with pytest.raises(ExpiryAbortedError,
                           match=rf"nothing deleted.*{lost} \({why}\) does not exist"):
            expire_local(catalog, policy(grace_ms=0), settle_ms=0)
        assert files(catalog) - {OLDEST} == listed - {OLDEST}
        catalog.storage.write(lost, data)
    result = expire_local(catalog, policy(grace_ms=0), settle_ms=0)
    assert result.protected[running] == f"transaction {txn_id}" and result.files_failed == 0
