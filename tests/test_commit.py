"""The commit protocol (olympia/catalog/commit.py): a lost race is rebased at once on the
root that won, retries are bounded by a time budget, a rebase keeps the node files whose
content did not change. Counts are asserted, never times (the clock is injected)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import Location

from benchmarks.common import recording
from olympia import Catalog
from olympia.catalog import coalesce as coalesce_module
from olympia.catalog import commit as commit_module
from olympia.catalog.commit import CommitOptions
from olympia.catalog.files import LATEST
from olympia.catalog.keys import version_path
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import Transaction
from olympia.exceptions import (
    CatalogError,
    CommitConflict,
    CommitOutcomeUnknown,
    InvalidArgumentError,
    NoSuchTransactionError,
    StorageError,
)
from olympia.tree import btree

COLUMNS = [{"name": "id", "type": "int8"}]


def _two_writers(order: int = 128, tables: int = 0) -> tuple[Catalog, Catalog]:
    """Two Catalog objects (separate storage clients and caches) on one memory catalog."""
    uri = f"memory://commit-{uuid.uuid4().hex}"
    first = Catalog.create(uri, order=order)
    with first.transaction() as txn:
        txn.create_namespace("s")
        for i in range(tables):
            txn.create_table("s", f"t{i:02d}", columns=COLUMNS)
    return first, Catalog.open(uri)


def _node_files(catalog: Catalog) -> set[str]:
    return {f.path for f in catalog.storage.list("node/")}


def _wins_before_our_root(ours: Catalog, rival: Callable[[], object], times: int = 1) -> None:
    """Run ``rival`` (another writer's commit) right before each of the first ``times``
    times ``ours`` publishes a version: after its staged change was replayed and encoded,
    so those attempts lose the race (having written their files)."""
    publish = ours.storage.publish
    done: list[bool] = []

    def racing(files: dict[str, bytes], path: str, data: bytes, *rest: Any,
               **named: Any) -> None:
        if path.startswith("vn/") and len(done) < times:
            done.append(True)
            rival()
        publish(files, path, data, *rest, **named)

    ours.storage.publish = racing  # type: ignore[method-assign]


def test_lost_race_rebases_on_the_winner_at_once() -> None:
    ours, theirs = _two_writers()
    slept: list[float] = []
    ours.commit_options = replace(ours.commit_options, sleep=slept.append)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    theirs.create_table("s", "theirs", columns=COLUMNS)  # wins version 2
    ours.storage.stats.reset()
    assert txn.commit() == 3
    stats = ours.storage.stats.snapshot()
    # vn/2 is seen taken before anything is written; then our def, root at vn/3, vn/latest
    assert stats["writes"] == 3 and stats["failures"] == 0
    # after the pause our base's root (still the one we read? the first attempt, seen
    # lost before writing, never read it) and the winning root; the version after it is
    # seen absent for free (memory storage)
    assert stats["reads"] == 2 and stats["misses"] == 0
    assert stats["exists"] == 0  # no discovery from the hints
    assert len(slept) == 1 and slept[0] <= 0.001  # one short jittered pause
    assert ours.version == 3  # the catalog heard of its commit through the callback
    assert ours.list_tables("s") == ["mine", "theirs"]
    assert ours.at_version(3).root.node.previous_root == version_path(2)


def test_loser_rebases_on_the_newest_version_with_one_lost_race() -> None:
    """Versions won while ours was staged: the loser reads them (the one after the newest
    is seen absent without a read) and publishes once more, on the newest."""
    ours, theirs = _two_writers()
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    for name in ("a", "b", "c"):
        theirs.create_table("s", name, columns=COLUMNS)  # versions 2, 3, 4
    ours.storage.stats.reset()
    assert txn.commit() == 5
    stats = ours.storage.stats.snapshot()
    assert stats["failures"] == 0  # vn/2 seen taken; nothing published onto 2, 3 or 4
    # roots 1 (our base), 2, 3, 4 after the pause
    assert stats["reads"] == 4 and stats["misses"] == 0
    assert stats["writes"] == 1 + 1 + 1  # def, one root, vn/latest
    assert Catalog.open(ours.uri).list_tables("s") == ["a", "b", "c", "mine"]


def test_version_taken_while_building_is_seen_before_writing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where taking a version is visible for free (memory, local disk), an attempt looks
    once, after replaying its change onto the tree and encoding the files and the root,
    before writing: a version won meanwhile costs no write."""
    ours, theirs = _two_writers()
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    replay = commit_module.apply_changes
    rivals = iter([lambda: theirs.create_table("s", "theirs", columns=COLUMNS)])

    def replaying(*args: object, **kwargs: object) -> btree.FlushResult:
        flushed = replay(*args, **kwargs)  # type: ignore[arg-type]
        rival = next(rivals, None)
        if rival is not None:  # the rival wins version 2 during our first replay
            rival()
        return flushed

    monkeypatch.setattr(commit_module, "apply_changes", replaying)
    ours.storage.stats.reset()
    assert txn.commit() == 3
    stats = ours.storage.stats.snapshot()
    assert stats["failures"] == 0  # nothing published onto 2
    assert stats["writes"] == 3  # our def, the root of version 3, vn/latest


@pytest.mark.parametrize("tables", [0, 40])
def test_one_uncontended_commit_makes_exactly_these_storage_operations(
        tmp_path: Path, tables: int) -> None:
    """Counted at the backend on local disk (every call, free looks included), a commit
    that no other writer races: its base's root read again, one look whether the next
    version is taken, the definition file and one node file per level below the root, the
    root's exclusive create and the vn/latest hint; nothing else (no queue, no lock, no
    other look at the root)."""
    uri = str(tmp_path / "c")
    catalog = Catalog.create(uri, order=4)
    with catalog.transaction() as txn:
        txn.create_namespace("s")
        for i in range(tables):
            txn.create_table("s", f"t{i:02d}", columns=COLUMNS)
    catalog = Catalog.open(uri)
    depth = catalog.snapshot.depth()
    txn = catalog.transaction()
    txn.create_table("s", "t00a", columns=COLUMNS)
    with recording(catalog.storage) as log:
        assert txn.commit() == 2
    expected = {("read", "root"): 1, ("exists", "root"): 1, ("write", "def"): 1,
                ("create_exclusive", "root"): 1, ("write", "hint"): 1}
    if depth > 1:
        expected["write", "node"] = depth - 1
    assert dict(log.counts) == expected
    assert (depth > 1) is (tables > 0)


def test_the_latest_hint_is_written_by_whom_the_options_name_once_the_root_landed() -> None:
    """``CommitOptions.write_hint`` runs the hint's write (``olympia serve`` on a worker):
    the commit is answered with its root created and the hint not yet written, and
    discovery meanwhile still finds the version; the job writes the hint."""
    ours, theirs = _two_writers()
    jobs: list[Callable[[], None]] = []
    ours.commit_options = replace(ours.commit_options, write_hint=jobs.append)
    ours.create_namespace("later")
    assert ours.version == 2 and len(jobs) == 1
    assert ours.files.read_hint(LATEST) == 1
    assert theirs.refresh() == 2 and Catalog.open(ours.uri).version == 2
    jobs[0]()
    assert ours.files.read_hint(LATEST) == 2


def test_a_hint_that_cannot_be_written_is_logged_and_the_commit_stands(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The store refuses the write of vn/latest once the root landed: the commit is
    answered as landed, a warning names the version, and discovery finds it all the
    same (probing past the older hint)."""
    ours, theirs = _two_writers()

    def refused(path: str, version: int) -> None:
        raise StorageError("access denied", f"memory://x/{path}")

    monkeypatch.setattr(ours.files, "write_hint", refused)
    with caplog.at_level("WARNING", logger="olympia.catalog.commit"):
        ours.create_namespace("later")
    assert ours.version == 2 and ours.files.read_hint(LATEST) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "version 2 landed, but its vn/latest hint was not written (access denied: "
        "memory://x/vn/latest): discovery probes past the older hint"]
    assert theirs.refresh() == 2 and "later" in theirs.list_namespaces()


class TaskTimeout(Exception):
    """What a task runner raises in the thread it interrupts (Airflow's task timeout)."""


def test_an_interrupt_during_the_pause_is_raised_as_it_is_and_nothing_lands() -> None:
    """The commit loses the race and its caller is interrupted while it pauses: nothing of
    it was created and no other thread lands it, so the interrupt reaches the caller as it
    is and the change never appears, though the same object goes on committing."""
    ours, theirs = _two_writers()

    def interrupted(_seconds: float) -> None:
        raise TaskTimeout("the task timed out")

    ours.commit_options = replace(ours.commit_options, sleep=interrupted)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    _wins_before_our_root(ours, lambda: theirs.create_table("s", "theirs", columns=COLUMNS))
    with pytest.raises(TaskTimeout):
        txn.commit()
    ours.commit_options = replace(ours.commit_options, sleep=lambda _s: None)
    ours.create_table("s", "after", columns=COLUMNS)
    latest = Catalog.open(ours.uri)
    assert latest.version == 3
    for version in range(1, latest.version + 1):
        assert "mine" not in latest.at_version(version).list_tables("s")


@pytest.mark.parametrize("when", ["during the create", "after the create"])
def test_an_interrupt_once_the_root_may_be_created_is_outcome_unknown(when: str) -> None:
    """An interrupt raised inside the root's publication (before it ran: nothing lands)
    or once the root was created (it landed): either way the caller is told
    CommitOutcomeUnknown, with the interrupt as its cause, never a failure."""
    ours, _ = _two_writers()
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    publish = ours.storage.publish

    def interrupted(*args: object, **kwargs: object) -> None:
        if when == "after the create":
            publish(*args, **kwargs)  # type: ignore[arg-type]
        raise TaskTimeout("the task timed out")

    ours.storage.publish = interrupted  # type: ignore[method-assign]
    with pytest.raises(CommitOutcomeUnknown, match="whether it landed is unknown") as info:
        txn.commit()
    assert isinstance(info.value.__cause__, TaskTimeout)
    latest = Catalog.open(ours.uri)
    assert ("mine" in latest.list_tables("s")) is (when == "after the create")


def test_loser_reads_absent_roots_only_where_asking_costs_a_request(
        location: Location) -> None:
    """A commit's first attempt reads its base's root again (is it still the one it
    read?) with the writes of its files; where the storage tells for free that the next
    version is taken (local disk, memory), that attempt writes and reads nothing. After
    the lost race it reads its base's root once more (the retry builds only on what it
    read after its pause) with the winner's and the next (read ahead, so that learning
    the newest costs no extra round trip on S3), and the retry reads none again. Where a
    version's absence is free to tell, that next root is not read. (On S3 the winner
    writes from another host: this host has no copy of its root.)"""
    ours = Catalog.create(location.uri, location.storage_options)
    ours.create_namespace("s")
    theirs = Catalog.open(location.uri, location.elsewhere().storage_options)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    theirs.create_table("s", "theirs", columns=COLUMNS)  # wins version 2
    with recording(ours.storage) as log:  # every read, conditional ones (roots) too
        assert txn.commit() == 3
    roots = [path for op, path in log.calls if op == "read" and path.startswith("vn/")]
    expected = [version_path(1), version_path(2)] if location.kind != "s3" else [
        version_path(1), version_path(1), version_path(2), version_path(3)]
    assert roots == expected


def test_conflict_in_a_version_after_the_winner() -> None:
    ours, theirs = _two_writers()
    txn = ours.transaction()
    txn.create_table("s", "orders", columns=COLUMNS)
    theirs.create_table("s", "other", columns=COLUMNS)  # version 2: no conflict
    theirs.create_table("s", "orders", columns=COLUMNS)  # version 3: the same table
    with pytest.raises(CommitConflict, match="s.orders.*version 3") as info:
        txn.commit()
    assert info.value.version == 3 and txn.state == "aborted"


def test_lost_race_on_the_same_object_is_a_conflict() -> None:
    ours, theirs = _two_writers()
    txn = ours.transaction()
    txn.create_table("s", "orders", columns=COLUMNS)
    theirs.create_table("s", "orders", columns=[{"name": "other", "type": "int4"}])
    with pytest.raises(CommitConflict, match="s.orders.*version 2") as info:
        txn.commit()
    assert info.value.version == 2
    assert txn.state == "aborted"
    assert Catalog.open(ours.uri).load_table("s.orders").columns[0].name == "other"


def test_commit_gives_up_when_its_time_budget_is_spent() -> None:
    ours, theirs = _two_writers()
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    ours.commit_options = CommitOptions(
        timeout_s=1.0, backoff_s=0.1, max_backoff_s=0.4,
        clock=lambda: now[0], sleep=sleep, jitter=lambda bound: bound)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    rivals = iter(range(10))  # another writer wins right before each of our roots
    _wins_before_our_root(
        ours, lambda: theirs.create_table("s", f"theirs{next(rivals)}", columns=COLUMNS), 10)
    with pytest.raises(CommitConflict, match="gave up after 1 s and 4 attempts"):
        txn.commit()
    assert slept == [0.1, 0.2, 0.4]  # doubling, capped; the fourth would pass the budget
    assert txn.state == "aborted"
    assert "mine" not in Catalog.open(ours.uri).list_tables("s")


def test_pause_grows_from_the_first_loss() -> None:
    """One jittered exponential backoff, on every storage: the bound starts at
    ``backoff_s``, doubles per loss in a row and is capped."""
    options = CommitOptions(backoff_s=0.01, max_backoff_s=0.05)
    assert [options.pause(n) for n in range(1, 6)] == [0.01, 0.02, 0.04, 0.05, 0.05]
    defaults = CommitOptions()
    assert [defaults.pause(n) for n in (1, 2, 5, 7, 9, 40)] == [
        0.001, 0.002, 0.016, 0.064, 0.25, 0.25]


def test_a_writer_pauses_a_jittered_bound_after_each_loss() -> None:
    ours, theirs = _two_writers()
    slept: list[float] = []
    ours.commit_options = replace(ours.commit_options, sleep=slept.append,
                                  clock=lambda: 0.0, jitter=lambda bound: bound / 2)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    rivals = iter(range(8))
    _wins_before_our_root(
        ours, lambda: theirs.create_table("s", f"theirs{next(rivals)}", columns=COLUMNS), 8)
    assert txn.commit() == 10  # after 8 lost races
    assert slept == [0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064]


def test_commit_timeout_is_set_per_catalog() -> None:
    uri = f"memory://commit-{uuid.uuid4().hex}"
    assert Catalog.create(uri, commit_timeout=5).commit_options.timeout_s == 5
    assert Catalog.open(uri).commit_options.timeout_s == 30
    assert Catalog.open(uri, commit_timeout=0.5).commit_options.timeout_s == 0.5
    with pytest.raises(InvalidArgumentError, match="commit_timeout"):
        Catalog.open(uri, commit_timeout=0)


def test_disjoint_rebase_keeps_the_node_files_already_written() -> None:
    ours, theirs = _two_writers(order=4, tables=40)
    depth = ours.snapshot.depth()
    assert depth >= 3
    txn = ours.transaction()
    txn.create_table("s", "t00a", columns=COLUMNS)  # first leaf
    # last leaf, another subtree
    _wins_before_our_root(ours, lambda: theirs.create_table("s", "t39a", columns=COLUMNS))
    before = _node_files(ours)
    ours.storage.stats.reset()
    assert txn.commit() == 3
    won = ours.at_version(2)
    theirs_nodes = set(btree.node_paths(won.nodes, won.root.node))
    new_nodes = _node_files(ours) - before - theirs_nodes
    assert len(new_nodes) == depth - 1  # one per level below the root, written once
    # our def, the nodes, the lost and the won root, vn/latest: nothing rewritten
    assert ours.storage.stats.snapshot()["writes"] == 1 + (depth - 1) + 2 + 1
    snap = Catalog.open(ours.uri).snapshot
    assert set(btree.node_paths(snap.nodes, snap.root.node)) >= new_nodes
    assert btree.validate(snap.nodes, snap.root.node, 4) == 1 + 42
    assert {"t00a", "t39a"} <= set(snap.list_tables("s"))


def test_rebase_rewrites_the_nodes_the_winner_changed() -> None:
    ours, theirs = _two_writers(order=4, tables=40)
    txn = ours.transaction()
    txn.create_table("s", "t20a", columns=COLUMNS)
    # the same leaf
    _wins_before_our_root(ours, lambda: theirs.create_table("s", "t20b", columns=COLUMNS))
    before = _node_files(ours)
    assert txn.commit() == 3
    snap = Catalog.open(ours.uri).snapshot
    assert btree.validate(snap.nodes, snap.root.node, 4) == 1 + 42
    assert {"t20a", "t20b"} <= set(snap.list_tables("s"))
    # the leaf holding both was written again on the new base; the first attempt's copy
    # of it is an orphan (not reachable from the committed root)
    reachable = set(btree.node_paths(snap.nodes, snap.root.node))
    assert (_node_files(ours) - before) - reachable


def test_transaction_on_a_given_snapshot() -> None:
    ours, theirs = _two_writers()
    old = ours.snapshot
    ours.create_table("s", "later", columns=COLUMNS)
    txn = ours.transaction(base=old)
    assert txn.base is old and not txn.table_exists("s", "later")  # reads see the snapshot
    txn.create_table("s", "mine", columns=COLUMNS)
    assert txn.commit() == 3  # after the version committed since
    assert ours.version == 3 and ours.list_tables("s") == ["later", "mine"]
    with pytest.raises(InvalidArgumentError, match="snapshot of this catalog"):
        ours.transaction(base=theirs.snapshot)


# --- a change's check, re-run on every version a rebase passes -----------------------------

def _checked(txn: Transaction, refuse_at: int | None = None) -> list[tuple[int, int]]:
    """Require of ``txn`` a check recording the versions it is called with and refusing
    the version ``refuse_at``."""
    seen: list[tuple[int, int]] = []

    def check(before: Snapshot, after: Snapshot) -> None:
        seen.append((before.version, after.version))
        if after.version == refuse_at:
            raise CatalogError(f"refused: version {after.version} took what it needs")

    txn.require(check)
    return seen


def test_a_check_sees_each_version_landed_since_and_lands_on_the_newest() -> None:
    ours, theirs = _two_writers()
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    seen = _checked(txn)
    for name in ("a", "b", "c"):
        theirs.create_table("s", name, columns=COLUMNS)  # versions 2, 3, 4
    assert txn.commit() == 5
    assert seen == [(1, 2), (2, 3), (3, 4)]  # each version once, in order
    uncontended = ours.transaction()
    uncontended.create_table("s", "alone", columns=COLUMNS)
    assert not _checked(uncontended) and uncontended.commit() == 6  # (never called)


def test_a_check_refusing_a_version_ends_the_commit_before_it_writes() -> None:
    ours, theirs = _two_writers()
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    seen = _checked(txn, refuse_at=3)
    for name in ("a", "b", "c"):
        theirs.create_table("s", name, columns=COLUMNS)  # versions 2, 3, 4
    ours.storage.stats.reset()
    with pytest.raises(CatalogError, match="refused: version 3"):
        txn.commit()
    assert seen == [(1, 2), (2, 3)] and txn.state == "aborted"
    assert ours.storage.stats.snapshot()["writes"] == 0  # vn/2 seen taken: nothing written
    final = Catalog.open(ours.uri)
    assert final.version == 4 and final.list_tables("s") == ["a", "b", "c"]


def test_a_change_with_a_check_does_not_join_the_queue() -> None:
    ours, theirs = _two_writers()
    queued = Catalog.open(ours.uri, coalesce_commits=True)
    txn = queued.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    seen = _checked(txn)
    assert not txn.change().coalescible
    theirs.create_table("s", "a", columns=COLUMNS)
    assert txn.commit() == 3 and seen == [(1, 2)]
    assert coalesce_module._GROUPS.get(queued.files) is None  # no queue was made


def test_a_statement_is_checked_against_the_statements_added_since_it_read() -> None:
    ours, _ = _two_writers()
    name = ours.begin_transaction().id
    statement = ours.transaction(name=name)
    statement.create_table("s", "mine", columns=COLUMNS)
    seen: list[tuple[list[str], list[str]]] = []

    def check(before: Snapshot, after: Snapshot) -> None:
        seen.append((before.list_tables("s"), after.list_tables("s")))
        raise CatalogError("refused: a statement took what it needs")

    statement.require(check)
    with ours.transaction(name=name) as other:  # same running view, added first
        other.create_table("s", "a", columns=COLUMNS)
    with pytest.raises(CatalogError, match="refused: a statement"):
        statement.commit()
    assert seen == [([], ["a"])]  # once, with the view it read and the newer one
    assert statement.state == "aborted" and statement.refusal is not None
    assert ours.distributed_transaction(name).view().list_tables("s") == ["a"]


def test_a_landing_requirement_sees_every_version_since_the_beginning() -> None:
    """A rule the catalog object holds landings to checks each version landed since the
    distributed transaction began; refusing one aborts it with the rule's error."""
    ours, theirs = _two_writers()
    dtx = ours.begin_transaction()
    with ours.transaction(name=dtx.id) as statement:
        statement.create_table("s", "mine", columns=COLUMNS)
    for name in ("a", "b"):
        theirs.create_table("s", name, columns=COLUMNS)  # versions 2, 3
    seen: list[list[tuple[int, int]]] = []
    ours.require_on_landing(lambda txn: seen.append(_checked(txn, refuse_at=3)))
    with pytest.raises(CatalogError, match="refused: version 3"):
        ours.distributed_transaction(dtx.id).commit()
    assert seen == [[(1, 2), (2, 3)]]
    with pytest.raises(NoSuchTransactionError):
        ours.distributed_transaction(dtx.id)  # aborted: its record is gone
    final = Catalog.open(ours.uri)
    assert final.version == 3 and final.list_tables("s") == ["a", "b"]
