"""Regressions of the commit path (issue 33, "Why"): every fact a commit builds on is read
from the store in that attempt, so a prefix restored from an earlier copy loses no update
and is never built on versions it no longer holds; a writer killed before its commit
completed, or told its commit gave up, never has its change land; a create whose answer
was lost is never reported as a conflict; and a default commit writes nothing outside the
catalog prefix.

Each scenario runs on local disk and on the real S3 server (``shared_location``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from conftest import Location

from olympia import Catalog
from olympia.catalog.keys import version_path
from olympia.catalog.reader import Snapshot
from olympia.exceptions import CommitConflict, TransientStorageError
from olympia.storage import Storage
from olympia.storage.backends import Backend, Job, RunAll, run_in_turn
from olympia.tree import btree

COLUMNS = [{"name": "id", "type": "int8"}]


def snapshot_prefix(storage: Storage) -> dict[str, bytes]:
    """Every file under the prefix (a backup of the catalog)."""
    return {f.path: storage.read(f.path) for f in storage.list()}


def restore_prefix(storage: Storage, files: dict[str, bytes]) -> None:
    """Put the prefix back as ``files`` had it: what is not in the copy is removed."""
    storage.delete_many([f.path for f in storage.list() if f.path not in files])
    for path, data in files.items():
        storage.write(path, data)


def verified(catalog: Catalog, version: int) -> Snapshot:
    """The snapshot of ``version``, after checking it as ``olympia verify`` does: every
    node and definition file readable and matching its checksum, every tree invariant."""
    snap = catalog.at_version(version)
    btree.validate(snap.nodes, snap.root.node, snap.catalog_def.order)
    snap.load_all()
    return snap


def _catalog(location: Location) -> Catalog:
    catalog = Catalog.create(location.uri, location.storage_options)
    with catalog.transaction() as txn:
        txn.create_namespace("s")
        txn.create_table("s", "t1", columns=COLUMNS)
        txn.create_table("s", "t2", columns=COLUMNS)
    return catalog


def test_a_restored_catalog_loses_no_update(shared_location: Location) -> None:
    """Restore a copy in place after two more versions: writer B lands a change of t1 and
    then another version on the restored catalog, and writer A, which began on the
    restored version and changes t1 too, gets CommitConflict; B's change stays."""
    options = shared_location.storage_options
    catalog = _catalog(shared_location)
    backup = snapshot_prefix(catalog.storage)
    for value in ("x", "y"):  # versions 2 and 3 change t2
        catalog.alter_table("s", "t2", set_properties={"k": value})
    restore_prefix(catalog.storage, backup)

    a = Catalog.open(shared_location.uri, options)
    assert a.version == 1
    txn = a.transaction()
    txn.alter_table("s", "t1", set_properties={"owner": "a"})
    b = Catalog.open(shared_location.uri, options)
    b.alter_table("s", "t1", set_properties={"owner": "b"})
    b.create_table("s", "t3", columns=COLUMNS)
    assert b.version == 3
    with pytest.raises(CommitConflict):
        txn.commit()
    latest = Catalog.open(shared_location.uri, options)
    assert latest.version == 3
    assert latest.load_table("s", "t1").properties["owner"] == "b"
    verified(latest, 3)


def test_a_commit_after_a_restore_builds_on_the_restored_version(
        shared_location: Location) -> None:
    """Versions 2 and 3 land, the prefix is restored to version 1: the next commit, from
    this process and from a catalog object that had loaded version 3, is version 2 built
    on version 1, every table still loads and every version verifies."""
    options = shared_location.storage_options
    catalog = _catalog(shared_location)
    backup = snapshot_prefix(catalog.storage)
    catalog.create_table("s", "t3", columns=COLUMNS)
    catalog.create_table("s", "t4", columns=COLUMNS)
    assert catalog.version == 3
    restore_prefix(catalog.storage, backup)

    fresh = Catalog.open(shared_location.uri, options)
    fresh.create_table("s", "t5", columns=COLUMNS)
    assert fresh.version == 2
    root = fresh.at_version(2).root.node
    assert root.previous_root == version_path(1)
    assert not fresh.storage.exists(version_path(3))
    for version in (1, 2):
        verified(fresh, version)
    assert fresh.list_tables("s") == ["t1", "t2", "t5"]
    assert fresh.load_table("s", "t1").name == "t1"

    catalog.create_table("s", "t6", columns=COLUMNS)  # had loaded version 3
    latest = Catalog.open(shared_location.uri, options)
    assert latest.version == 3 and latest.list_tables("s") == ["t1", "t2", "t5", "t6"]
    for version in (1, 2, 3):
        verified(latest, version)


@pytest.mark.parametrize("landed_again", [2, 1])
def test_a_transaction_open_across_a_restore_never_builds_on_its_replaced_base(
        shared_location: Location, landed_again: int) -> None:
    """A transaction begins on version 3; the prefix is restored to version 1 and another
    writer lands ``landed_again`` versions on it (version 3 again under the same name, or
    only version 2): the transaction's commit gets CommitConflict instead of landing
    version 4 on the old version 3, which would lose the new versions or leave a gap."""
    options = shared_location.storage_options
    catalog = _catalog(shared_location)
    backup = snapshot_prefix(catalog.storage)
    catalog.create_table("s", "t3", columns=COLUMNS)
    catalog.create_table("s", "t4", columns=COLUMNS)
    txn = catalog.transaction()
    assert txn.base.version == 3
    txn.alter_table("s", "t1", set_properties={"owner": "a"})
    restore_prefix(catalog.storage, backup)
    other = Catalog.open(shared_location.uri, options)
    for i in range(landed_again):
        other.create_table("s", f"new{i}", columns=COLUMNS)

    with pytest.raises(CommitConflict, match="no longer in the store as it was read"):
        txn.commit()
    latest = Catalog.open(shared_location.uri, options)
    assert latest.version == 1 + landed_again
    assert not latest.storage.exists(version_path(latest.version + 1))
    assert "owner" not in latest.load_table("s", "t1").properties
    assert latest.list_tables("s") == [f"new{i}" for i in range(landed_again)] + ["t1", "t2"]
    for version in range(1, latest.version + 1):
        verified(latest, version)


KILLED_WRITER = textwrap.dedent("""
    import json, os, sys, time
    from olympia import Catalog

    uri, options, marker = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    catalog = Catalog.open(uri, options, coalesce_commits=True)
    create = catalog.storage.create_exclusive
    publish = catalog.storage.publish

    def stalled() -> None:  # the writer is killed before its root is created
        open(marker, "w").close()
        time.sleep(120)

    catalog.storage.create_exclusive = lambda path, data: (
        stalled() if path.startswith("vn/") else create(path, data))
    catalog.storage.publish = lambda files, path, data, *rest, **named: (
        stalled() if path.startswith("vn/") else publish(files, path, data, *rest, **named))
    open(marker + ".ready", "w").close()
    catalog.drop_table("s", "t1")
""")


def test_a_killed_coalescing_writer_never_has_its_change_land(
        shared_location: Location, tmp_path: Path) -> None:
    """A coalescing writer process drops a table and is killed before its commit completes
    (while another process on this host holds the lock of ``vn/`` as earlier releases'
    writers did): writers committing afterwards on this host never land its drop."""
    import fcntl

    options = shared_location.storage_options
    _catalog(shared_location)
    marker = str(tmp_path / "stalled")
    folder = os.path.join(str(shared_location.uri), "vn")
    lock = os.open(folder, os.O_RDONLY | os.O_DIRECTORY) if shared_location.kind == "local" \
        else None
    if lock is not None:
        fcntl.flock(lock, fcntl.LOCK_EX)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, shared_location.uri, json.dumps(options),
         marker], env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(marker + ".ready") and time.monotonic() < deadline:
            time.sleep(0.01)
        deadline = time.monotonic() + 3  # its commit stalls, or it waits for the lock
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if lock is not None:
            os.close(lock)
    other = Catalog.open(shared_location.uri, options, coalesce_commits=True)
    for i in range(3):
        other.create_table("s", f"after{i}", columns=COLUMNS)
    time.sleep(0.2)
    other.create_table("s", "last", columns=COLUMNS)
    latest = Catalog.open(shared_location.uri, options)
    for version in range(1, latest.version + 1):
        assert "t1" in verified(latest, version).list_tables("s")


class _LostAnswer:
    """A backend around a real one whose root creates succeed and then answer with a
    transient error, and whose next read of that root fails transiently too: the writer
    cannot learn the outcome in that attempt."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.remote = inner.remote
        self.unreadable: set[str] = set()
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self.inner.create_exclusive(path, data)
        if "/vn/" in path and not path.endswith(("latest", "oldest")):
            with self.lock:
                self.unreadable.add(path)
            raise TimeoutError("the answer to the create was lost")

    def publish(self, files: dict[str, bytes], path: str, data: bytes,
                run_all: RunAll = run_in_turn, present: Sequence[str] = (),
                unchanged: Mapping[str, str] | None = None, alongside: Sequence[Job] = (),
                ) -> None:
        """The contract's publish (its batch through the real backend), ending with this
        backend's create."""
        Backend.publish(cast(Backend, self), files, path, data, run_in_turn, present,
                        unchanged, alongside)

    def read(self, path: str) -> bytes:
        with self.lock:
            if path in self.unreadable:
                self.unreadable.discard(path)
                raise TimeoutError("the store did not answer")
        data: bytes = self.inner.read(path)
        return data


def test_a_lost_answer_to_a_create_is_never_a_conflict(shared_location: Location) -> None:
    """Threads commit disjoint changes through one coalescing catalog while every root
    create succeeds and then answers with an error: each caller is told committed, or
    that the outcome is unknown (TransientStorageError), never CommitConflict; every
    change reported committed is in the history exactly once."""
    options = {**shared_location.storage_options, "retry_attempts": 1}
    _catalog(shared_location)
    catalog = Catalog.open(shared_location.uri, options, coalesce_commits=True)
    wrapper = _LostAnswer(catalog.storage.backend)
    catalog.storage.backend = wrapper
    outcomes: dict[str, object] = {}

    def commit(name: str) -> None:
        try:
            catalog.create_table("s", name, columns=COLUMNS)
            outcomes[name] = "committed"
        except Exception as exc:  # every outcome is recorded and checked
            outcomes[name] = exc

    threads = [threading.Thread(target=commit, args=(f"c{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not [o for o in outcomes.values() if isinstance(o, CommitConflict)], outcomes
    assert all(o == "committed" or isinstance(o, TransientStorageError)
               for o in outcomes.values()), outcomes
    latest = Catalog.open(shared_location.uri, shared_location.storage_options)
    created = [row for v in range(2, latest.version + 1)
               for row in verified(latest, v).root.node.actions]
    tables = latest.list_tables("s")
    for name, outcome in outcomes.items():
        if outcome == "committed":
            assert name in tables
            assert sum(name in key for key, _ in created) == 1


def test_a_default_commit_writes_nothing_outside_the_prefix(
        shared_location: Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the system's temporary folder pointed at an empty folder, creating a catalog,
    committing (alone, from threads coalesced, and after a lost race) leaves it empty."""
    empty = tmp_path / "tmp"
    empty.mkdir()
    monkeypatch.setenv("TMPDIR", str(empty))
    monkeypatch.setattr(tempfile, "tempdir", str(empty))
    options = shared_location.storage_options
    catalog = Catalog.create(shared_location.uri, options)
    catalog.create_namespace("s")
    other = Catalog.open(shared_location.uri, options, coalesce_commits=True)
    txn = catalog.transaction()
    txn.create_table("s", "mine", columns=COLUMNS)
    other.create_table("s", "theirs", columns=COLUMNS)
    txn.commit()  # lost the race for version 2
    threads = [threading.Thread(target=other.create_table, args=("s", f"t{i}"),
                                kwargs={"columns": COLUMNS}) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(Catalog.open(shared_location.uri, options).list_tables("s")) == 6
    assert list(empty.iterdir()) == []


def test_a_commit_that_gave_up_never_lands_later(shared_location: Location) -> None:
    """A coalescing writer's drop gives up (its time budget is spent while another writer
    keeps winning) and is told CommitConflict; the same catalog object and another writer
    go on committing: the drop never appears."""
    options = shared_location.storage_options
    _catalog(shared_location)
    ours = Catalog.open(shared_location.uri, options, coalesce_commits=True)
    theirs = Catalog.open(shared_location.uri, options)
    now = [0.0]

    def later() -> float:  # every look at the clock finds the budget spent
        now[0] += 60.0
        return now[0]

    ours.commit_options = replace(ours.commit_options, timeout_s=30.0, clock=later)
    publish = ours.storage.publish
    rival = iter(range(1))

    def racing(files: dict[str, bytes], path: str, data: bytes, *rest: Any,
               **named: Any) -> None:
        if next(rival, None) is not None:  # another writer takes the version first
            theirs.create_table("s", "rival", columns=COLUMNS)
        publish(files, path, data, *rest, **named)

    ours.storage.publish = racing  # type: ignore[method-assign]
    with pytest.raises(CommitConflict, match="gave up"):
        ours.drop_table("s", "t1")
    ours.commit_options = replace(ours.commit_options, clock=time.monotonic)
    for i in range(3):
        ours.create_table("s", f"ours{i}", columns=COLUMNS)
        theirs.create_table("s", f"theirs{i}", columns=COLUMNS)
    latest = Catalog.open(shared_location.uri, options)
    for version in range(1, latest.version + 1):
        assert "t1" in verified(latest, version).list_tables("s")


@pytest.mark.parametrize("copy", ["with the winner", "before the base"])
def test_a_restore_during_a_retrys_pause_never_lands_a_root_naming_missing_files(
        shared_location: Location, copy: str) -> None:
    """Our first attempt loses the race for version 3 after writing its files; during
    the pause that follows, the prefix is restored from a copy taken with the winner's
    version 3 (only our files go) or before our base, version 2 (the base goes too). The
    retry writes its files anew and lands version 4, which loads and verifies; or, its
    base gone, gets CommitConflict and nothing of it lands."""
    options = shared_location.storage_options
    catalog = _catalog(shared_location)
    copies = {"before the base": snapshot_prefix(catalog.storage)}
    catalog.create_table("s", "t3", columns=COLUMNS)  # version 2: our base
    ours = Catalog.open(shared_location.uri, options)
    theirs = Catalog.open(shared_location.uri, shared_location.elsewhere().storage_options)
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        if not pauses:
            restore_prefix(ours.storage, copies[copy])
        pauses.append(seconds)

    ours.commit_options = replace(ours.commit_options, sleep=pause)
    publish = ours.storage.publish

    def racing(files: dict[str, bytes], path: str, data: bytes, *rest: Any,
               **named: Any) -> None:
        if "with the winner" not in copies:  # another writer takes version 3 first
            theirs.create_table("s", "theirs", columns=COLUMNS)
            copies["with the winner"] = snapshot_prefix(ours.storage)
        publish(files, path, data, *rest, **named)

    ours.storage.publish = racing  # type: ignore[method-assign]
    txn = ours.transaction()
    txn.create_table("s", "mine", columns=COLUMNS, properties={"k": "v"})
    if copy == "before the base":
        with pytest.raises(CommitConflict, match="no longer in the store as it was read"):
            txn.commit()
        latest = Catalog.open(shared_location.uri, options)
        assert latest.version == 1 and latest.list_tables("s") == ["t1", "t2"]
    else:
        assert txn.commit() == 4
        latest = Catalog.open(shared_location.uri, options)
        assert latest.version == 4
        assert latest.list_tables("s") == ["mine", "t1", "t2", "t3", "theirs"]
        assert latest.load_table("s", "mine").properties == {"k": "v"}
    assert pauses
    for version in range(latest.version + 1):
        verified(latest, version)


def test_a_folder_at_vn_latest_is_ignored(shared_location: Location) -> None:
    """A folder where vn/latest belongs (a file inside it on S3) is a hint that cannot be
    read: the catalog opens at its latest version, commits, and readers find them."""
    options = shared_location.storage_options
    catalog = _catalog(shared_location)
    catalog.storage.delete("vn/latest")
    if shared_location.kind == "local":
        os.mkdir(os.path.join(shared_location.uri, "vn", "latest"))
    catalog.storage.write("vn/latest/0", b"5\n")
    opened = Catalog.open(shared_location.uri, options)
    assert opened.version == 1
    opened.create_table("s", "t3", columns=COLUMNS)
    again = Catalog.open(shared_location.uri, options)
    assert again.version == 2 and again.list_tables("s") == ["t1", "t2", "t3"]
    with catalog.transaction() as txn:  # a catalog object that had loaded version 1
        txn.create_table("s", "t4", columns=COLUMNS)
    assert Catalog.open(shared_location.uri, options).version == 3
