"""The commit protocol (olympia/catalog/commit.py): a lost race is rebased at once on the
root that won, retries are bounded by a time budget, a rebase keeps the node files whose
content did not change. Counts are asserted, never times (the clock is injected)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import Location

from olympia import Catalog
from olympia.catalog import commit as commit_module
from olympia.catalog.commit import CommitOptions
from olympia.catalog.keys import version_path
from olympia.exceptions import CommitConflict, InvalidArgumentError
from olympia.storage import host
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
    times ``ours`` tries to create a root: after its node files are written, so those
    attempts lose the race."""
    create = ours.storage.create_exclusive
    done: list[bool] = []

    def racing(path: str, data: bytes) -> None:
        if path.startswith("vn/") and len(done) < times:
            done.append(True)
            rival()
        create(path, data)

    ours.storage.create_exclusive = racing  # type: ignore[method-assign]


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
    # the winning root; the version after it is seen absent for free (memory storage)
    assert stats["reads"] == 1 and stats["misses"] == 0
    assert stats["exists"] == 0  # no discovery from the hints
    assert slept == []  # no pause before the retry
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
    assert stats["reads"] == 3 and stats["misses"] == 0  # roots 2, 3, 4
    assert stats["writes"] == 1 + 1 + 1  # def, one root, vn/latest
    assert Catalog.open(ours.uri).list_tables("s") == ["a", "b", "c", "mine"]


def test_version_taken_while_replaying_is_seen_before_encoding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where taking a version is visible for free (memory, local disk), an attempt looks
    again after replaying its change onto the tree and after encoding the nodes: a version
    won meanwhile costs no root encoding and no write."""
    ours, theirs = _two_writers()
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    replay = commit_module.apply_changes
    encoded: list[int] = []
    encode = commit_module.encode_node
    rivals = iter([lambda: theirs.create_table("s", "theirs", columns=COLUMNS)])

    def replaying(*args: object, **kwargs: object) -> btree.FlushResult:
        flushed = replay(*args, **kwargs)  # type: ignore[arg-type]
        rival = next(rivals, None)
        if rival is not None:  # the rival wins version 2 during our first replay
            rival()
            encoded.clear()  # (its own root)
        return flushed

    monkeypatch.setattr(commit_module, "apply_changes", replaying)
    monkeypatch.setattr(commit_module, "encode_node",
                        lambda node, order: encoded.append(1) or encode(node, order))
    ours.storage.stats.reset()
    assert txn.commit() == 3
    assert len(encoded) == 1  # the root of version 3 only
    assert ours.storage.stats.snapshot()["failures"] == 0  # nothing published onto 2


def test_loser_reads_absent_roots_only_where_asking_costs_a_request(
        location: Location) -> None:
    """After a lost race the winner's root is read with the next (read ahead, so that
    learning the newest costs no extra round trip on S3). Where the storage tells for free
    that a version is absent (local disk, memory), that next root is not read. (On S3 the
    winner writes from another host: this host has no copy of its root.)"""
    ours = Catalog.create(location.uri, location.storage_options)
    ours.create_namespace("s")
    theirs = Catalog.open(location.uri, location.elsewhere().storage_options)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    theirs.create_table("s", "theirs", columns=COLUMNS)  # wins version 2
    read: list[str] = []
    real = ours.storage.read
    ours.storage.read = lambda path: read.append(path) or real(path)  # type: ignore[method-assign]
    assert txn.commit() == 3
    roots = [path for path in read if path.startswith("vn/")]
    expected = [version_path(2), version_path(3)] if location.kind == "s3" else [version_path(2)]
    assert roots == expected


def test_conflict_in_a_version_read_ahead() -> None:
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

    def sleep(seconds: float) -> None:  # another writer wins while this one pauses
        slept.append(seconds)
        now[0] += seconds
        theirs.create_table("s", f"theirs{len(slept)}", columns=COLUMNS)

    ours.commit_options = CommitOptions(
        timeout_s=1.0, immediate_retries=0, backoff_s=0.1, max_backoff_s=0.4,
        clock=lambda: now[0], sleep=sleep, jitter=lambda bound: bound)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    theirs.create_table("s", "theirs0", columns=COLUMNS)
    ours.storage.stats.reset()
    with pytest.raises(CommitConflict, match="gave up after 1 s and 4 attempts"):
        txn.commit()
    assert slept == [0.1, 0.2, 0.4]  # doubling, capped; the fourth would pass the budget
    assert ours.storage.stats.snapshot()["writes"] == 0  # each version was seen taken
    assert txn.state == "aborted"
    assert "mine" not in Catalog.open(ours.uri).list_tables("s")


def test_pause_grows_after_the_immediate_retries() -> None:
    options = CommitOptions(immediate_retries=2, backoff_s=0.01, max_backoff_s=0.05)
    assert [options.pause(n) for n in range(1, 7)] == [0.0, 0.0, 0.01, 0.02, 0.04, 0.05]
    defaults = CommitOptions()  # a rebase is retried at once; pauses only break lock-step
    assert [defaults.pause(n) for n in (1, 2, 3, 4, 7, 9, 20)] == [
        0.0, 0.0, 0.001, 0.002, 0.016, 0.064, 0.064]
    assert defaults.pause(20, remote=True) == 0.0


@pytest.mark.parametrize("remote", [False, True])
def test_a_writer_pauses_after_many_losses_only_on_local_storage(remote: bool) -> None:
    ours, theirs = _two_writers()
    ours.storage.backend.remote = remote  # what an S3 backend says of itself
    slept: list[float] = []
    ours.commit_options = replace(ours.commit_options, sleep=slept.append,
                                  jitter=lambda bound: bound)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    rivals = iter(range(12))
    _wins_before_our_root(
        ours, lambda: theirs.create_table("s", f"theirs{next(rivals)}", columns=COLUMNS), 12)
    assert txn.commit() == 14  # after 12 lost races
    # on local storage: the first 2 losses retried at once, then pauses up to 64 ms
    assert slept == ([] if remote else [0.001, 0.002, 0.004, 0.008, 0.016, 0.032]
                     + [0.064] * 4)


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


def test_a_local_attempt_that_loses_in_its_turn_writes_no_file(tmp_path: Path) -> None:
    """On local disk an attempt whose version is taken by the time its turn to sync and
    name files comes discards them: the rebase writes the commit's files once, and no
    file is left that no version refers to."""
    uri = str(tmp_path / "c")
    Catalog.create(uri).create_namespace("s")
    ours, theirs = Catalog.open(uri), Catalog.open(uri)
    backend = ours.storage.backend
    turn, rivals = backend.turn, []  # type: ignore[attr-defined]

    def late(path: str) -> Any:
        if path.endswith(version_path(2)) and not rivals:
            rivals.append(theirs.create_table("s", "theirs", columns=COLUMNS))  # wins v2
        return turn(path)

    backend.turn = late  # type: ignore[attr-defined]
    ours.storage.stats.reset()
    ours.create_table("s", "mine", columns=COLUMNS)
    assert rivals and ours.version == 3 and ours.list_tables("s") == ["mine", "theirs"]
    # our definition and root (the tree is one node), then vn/latest: the losing
    # attempt's files never reached the disk
    assert ours.storage.stats.snapshot()["writes"] == 3
    referred = set()
    for version in range(4):
        snap = ours.at_version(version)
        referred |= set(btree.node_paths(snap.nodes, snap.root.node))
    assert _node_files(ours) == referred
    assert len(ours.storage.list("def/table/")) == 2


def test_an_overdue_local_commit_holds_the_turn_catches_up_and_lands(tmp_path: Path) -> None:
    """A local commit still losing after ``priority_after_s`` holds the writers' turn for
    its next attempt: it catches up inside it on a version landed while it waited for the
    turn, and lands while no other writer can name a file."""
    import fcntl
    import os

    uri = str(tmp_path / "c")
    Catalog.create(uri).create_namespace("s")
    ours, theirs = Catalog.open(uri), Catalog.open(uri)
    now = [0.0]
    ours.commit_options = replace(ours.commit_options, clock=lambda: now[0])
    storage, backend = ours.storage, ours.storage.backend
    turn, hold_turn = backend.turn, storage.hold_turn  # type: ignore[attr-defined]
    others_could_name: list[bool] = []

    def racing(path: str) -> Any:
        if path.endswith(version_path(2)):  # our first attempt loses v2, and time passes
            theirs.create_table("s", "a", columns=COLUMNS)
            now[0] += ours.commit_options.priority_after_s
        else:
            fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                others_could_name.append(True)
            except BlockingIOError:
                others_could_name.append(False)
            finally:
                os.close(fd)
        return turn(path)

    held: list[str] = []

    def holding(path: str, scope: str = "") -> Any:
        held.append(path)
        theirs.create_table("s", "b", columns=COLUMNS)  # v3, while we wait for the turn
        return hold_turn(path, scope)

    backend.turn = racing  # type: ignore[attr-defined]
    storage.hold_turn = holding  # type: ignore[method-assign]
    ours.create_table("s", "mine", columns=COLUMNS)
    assert held == [version_path(3)] and others_could_name == [False]
    assert ours.version == 4 and ours.list_tables("s") == ["a", "b", "mine"]


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


@pytest.mark.s3
def test_writers_on_one_host_take_turns_and_catch_up_from_its_copies(
        s3_server: Any, tmp_path: Path) -> None:
    """On S3, writers of one catalog on one host take turns: a writer whose base is old
    learns the versions its neighbours landed from this host's copies, and their actions
    from the notes they left there (only the newest root is read, from its copy), then
    lands at its first try: no lost race, no root read from the store. The refresh that
    finds them asks the store only about the version after them."""
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    options = {**s3_server.storage_options, "host_dir": str(tmp_path / "host")}
    ours = Catalog.create(uri, options)
    ours.create_namespace("s")
    theirs = Catalog.open(uri, options)
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    for name in ("a", "b"):
        theirs.create_table("s", name, columns=COLUMNS)  # versions 2 and 3
    ours.storage.stats.reset()
    attempts = _root_attempts(ours)
    assert txn.commit() == 4 and attempts == [version_path(4)]
    stats = ours.storage.stats.snapshot()
    assert stats["reads"] == 0 and stats["host_reads"] == 1  # the root of 3 (2: its note)
    theirs.create_table("s", "c", columns=COLUMNS)  # version 5
    ours.storage.stats.reset()
    assert ours.refresh() == 5
    stats = ours.storage.stats.snapshot()
    assert stats["exists"] == 1 and stats["reads"] == 2  # the hints; version 6 asked
    assert ours.list_tables("s") == ["a", "b", "c", "mine"]


@pytest.mark.parametrize("notes", ["left", "removed", "torn"])
def test_a_writer_checks_its_neighbours_versions_against_their_notes(
        tmp_path: Path, notes: str) -> None:
    """On local disk a writer whose base is old learns from the notes its neighbours left
    on this host what the versions in between did, and reads only the newest root; a
    conflict is found in a noted version as in its root. Without the notes (removed, or
    torn: their digests do not match) it reads every root, with the same outcome."""
    uri = str(tmp_path / "c")
    options = {"host_dir": str(tmp_path / "host")}
    ours = Catalog.create(uri, options)
    with ours.transaction() as txn:
        txn.create_namespace("s")
        txn.create_table("s", "x", columns=COLUMNS)
    theirs = Catalog.open(uri, options)
    kept, doomed = ours.transaction(), ours.transaction()
    kept.create_table("s", "mine", columns=COLUMNS)
    doomed.drop_table("s", "x")
    theirs.create_table("s", "a", columns=COLUMNS)  # version 2
    theirs.drop_table("s", "x")  # version 3: conflicts with ``doomed``
    theirs.create_table("s", "b", columns=COLUMNS)  # version 4
    folder = ours.storage.host_folder(ours.catalog_def.id)
    assert folder is not None
    for entry in os.scandir(folder.folder):
        if entry.name.startswith("n-") and notes == "removed":
            os.unlink(entry.path)
        elif entry.name.startswith("n-") and notes == "torn":
            data, at = bytearray(Path(entry.path).read_bytes()), 0
            while at < len(data):  # every record's digest spoilt
                _, length = host._NOTE_HEAD.unpack_from(data, at)
                at += host._NOTE_HEAD.size + length + 32
                data[at - 1] ^= 0xFF
            Path(entry.path).write_bytes(bytes(data))
    read: list[str] = []
    reading = ours.storage.read

    def recording(path: str) -> bytes:
        read.append(path)
        return reading(path)

    ours.storage.read = recording  # type: ignore[method-assign]
    assert kept.commit() == 5
    noted = notes == "left"
    assert [p for p in read if p.startswith("vn/")] == (
        [version_path(4)] if noted else [version_path(v) for v in (2, 3, 4)])
    read.clear()
    with pytest.raises(CommitConflict) as caught:
        doomed.commit()
    assert caught.value.version == 3 and caught.value.object_name.endswith("x")
    assert ours.list_tables("s") == ["a", "b", "mine"]


@pytest.mark.s3
def test_a_catalog_created_again_at_one_place_never_meets_the_copies_before(
        s3_server: Any, tmp_path: Path) -> None:
    """Host copies belong to one catalog (its id): after a catalog is deleted and another
    created at the same place, versions its writers land follow on from its own, not from
    what the copies of the first knew."""
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    options = {**s3_server.storage_options, "host_dir": str(tmp_path / "host")}
    first = Catalog.create(uri, options)
    first.create_namespace("s")
    for name in ("a", "b", "c"):
        first.create_table("s", name, columns=COLUMNS)
    first.storage.delete_many([f.path for f in first.storage.list("")])
    again = Catalog.create(uri, options)
    again.create_namespace("t")
    writer = Catalog.open(uri, options)
    writer.create_table("t", "x", columns=COLUMNS)
    fresh = Catalog.open(uri, s3_server.storage_options)
    assert fresh.version == writer.version == 2 and fresh.list_tables("t") == ["x"]
    assert [n for n in fresh.list_namespaces()] == ["t"]


def _root_attempts(catalog: Catalog) -> list[str]:
    """The roots ``catalog`` tries to create from now on (each a request on S3)."""
    tried: list[str] = []
    create = catalog.storage.create_exclusive

    def recording(path: str, data: bytes) -> None:
        if path.startswith("vn/"):
            tried.append(path)
        create(path, data)

    catalog.storage.create_exclusive = recording  # type: ignore[method-assign]
    return tried
