"""Commits that threads of one process make at the same time through one catalog object.
Coalesced (olympia/catalog/coalesce.py: CommitOptions.coalesce,
Catalog.open(..., coalesce_commits=True)), they go through the object's queue: first come
first landed, disjoint ones together in one version, each caller learning its own
outcome. By default there is no queue: each runs the protocol in its own thread, racing
the others as separate writers do. Real threads on real storage; counts are asserted,
never times."""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import Location
from iceberg_helpers import SCHEMA, local_properties, rows

from olympia import Catalog
from olympia._proto import actions_pb2 as apb
from olympia.catalog import coalesce as coalesce_module
from olympia.catalog.coalesce import CommitGroup, Member, commit_group, disjoint
from olympia.catalog.commit import Change, CommitOptions
from olympia.catalog.keys import path_version
from olympia.exceptions import CatalogError, CommitConflict, CommitOutcomeUnknown
from olympia.iceberg import OlympiaCatalog
from olympia.storage import Backend, FileInfo

COLUMNS = [{"name": "id", "type": "int8"}]


class _Gate(Backend):
    """Forwards every call to the real backend; the first look at a root once a commit has
    started (``started()``: a creation, or the check that the version is free) waits until
    ``ready()`` (every caller has submitted its commit), so the batches are known. Roots
    are published by the contract's default (files, then the root's exclusive create),
    so every root created is counted."""

    def __init__(self, inner: Backend, root: str, started: Callable[[], bool],
                 ready: Callable[[], bool]) -> None:
        self.inner, self.root, self.started, self.ready = inner, root, started, ready
        self.remote = inner.remote
        self.roots_created = 0
        self._opened = False

    def _hold(self, path: str) -> bool:
        """Whether ``path`` is a root; the first look at one waits for the callers."""
        if path_version(path.removeprefix(self.root)) is None:
            return False
        for _ in range(6000):  # a bounded wait, not a timing assertion
            if self._opened or self.ready():
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the other callers never submitted their commits")
        self._opened = True
        return True

    def create_exclusive(self, path: str, data: bytes) -> None:
        if self._hold(path):
            self.roots_created += 1
        self.inner.create_exclusive(path, data)

    def read(self, path: str) -> bytes:
        return self.inner.read(path)

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self.inner.write(path, data, durable)

    def exists(self, path: str) -> bool:
        if self.started():
            self._hold(path)
        return self.inner.exists(path)

    def list(self, prefix: str) -> list[FileInfo]:
        return self.inner.list(prefix)

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        return self.inner.delete_many(paths)

    def place(self, root: str) -> Hashable:
        return self.inner.place(root)


def _gated_catalog(location: Location, callers: int, coalesce: bool = True
                  ) -> tuple[Catalog, _Gate]:
    Catalog.create(location.uri, location.storage_options).create_namespace("s")
    catalog = Catalog.open(location.uri, location.storage_options, coalesce_commits=coalesce)
    group = commit_group(catalog.files)
    gate = _Gate(catalog.storage.backend, catalog.storage.root,
                 lambda: group.submitted > 0, lambda: group.submitted == callers)
    catalog.storage.backend = gate
    return catalog, gate


def _commit_in_threads(catalog: Catalog, stage: list[Callable[[Any], None]]
                       ) -> list[int | CommitConflict]:
    """Each function stages one transaction in a thread of its own; all commit at once.
    Returns each caller's version or its CommitConflict."""
    start = threading.Barrier(len(stage))
    outcomes: list[int | CommitConflict] = [0] * len(stage)

    def run(i: int) -> None:
        txn = catalog.transaction()
        stage[i](txn)
        start.wait()
        try:
            outcomes[i] = txn.commit()
        except CommitConflict as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(stage))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return outcomes


def _create(name: str, columns: list[dict[str, str]] = COLUMNS) -> Callable[[Any], None]:
    return lambda txn: txn.create_table("s", name, columns=columns)


def test_disjoint_concurrent_commits_share_versions(location: Location) -> None:
    callers = 6
    catalog, gate = _gated_catalog(location, callers)
    outcomes = _commit_in_threads(catalog, [_create(f"t{i}") for i in range(callers)])
    final = Catalog.open(location.uri, location.storage_options)
    # the first leader's batch, then everything that queued while it committed
    assert gate.roots_created == final.version - 1 <= 2 < callers
    assert all(isinstance(v, int) and 2 <= v <= final.version for v in outcomes)
    assert final.list_tables("s") == [f"t{i}" for i in range(callers)]
    for i, version in enumerate(outcomes):  # each caller's change is in the version it got
        assert isinstance(version, int)
        assert f"t{i}" in final.at_version(version).list_tables("s")
        assert f"t{i}" not in final.at_version(version - 1).list_tables("s")
    assert catalog.version == final.version  # the catalog object heard of the commits
    history = final.at_version(final.version).root.node.actions
    assert len(history) == callers - sum(v == final.version - 1 for v in outcomes)


class _RootCreateGate(_Gate):
    """A :class:`_Gate` holding only the first root's create: an Iceberg commit stages in
    the call that commits it, and its staging looks at roots while others are queued."""

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)


def test_iceberg_commits_to_different_tables_share_versions(tmp_path: Path) -> None:
    """Appends through pyiceberg to different tables at the same moment, coalesced (as
    ``olympia serve`` commits): they share versions, each member's new metadata file is
    written in the shared batch, and every version from the first on loads every table
    with the appends its caller was told landed."""
    callers = 4
    properties = local_properties(tmp_path)
    setup = OlympiaCatalog("setup", **properties)
    setup.create_namespace("ns")
    for i in range(callers):
        setup.create_table(f"ns.t{i}", SCHEMA)
    store = Catalog.open(properties["uri"], coalesce_commits=True)
    group = commit_group(store.files)
    gate = _RootCreateGate(store.storage.backend, store.storage.root,
                           lambda: group.submitted > 0, lambda: group.submitted == callers)
    store.storage.backend = gate
    catalog = OlympiaCatalog.over(store)
    before = store.version
    tables = [catalog.load_table(f"ns.t{i}") for i in range(callers)]
    start, failures = threading.Barrier(callers), []

    def append(i: int) -> None:
        start.wait()
        try:
            tables[i].append(rows(10 * i))
        except Exception as exc:  # reported below, with the others
            failures.append(exc)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == [] and not any(thread.is_alive() for thread in threads)
    latest = OlympiaCatalog("check", **properties)
    assert gate.roots_created == latest.olympia.version - before <= 2 < callers
    for i, table in enumerate(tables):  # each caller's table as its commit answered it
        landed = latest.load_table(f"ns.t{i}")
        assert landed.metadata_location == table.metadata_location
        assert landed.scan().to_arrow().column("id").to_pylist() == [10 * i + k
                                                                       for k in range(3)]
    for v in range(before, latest.olympia.version + 1):  # every version loads every table
        pinned = latest.at_version(v)
        assert all(pinned.load_table(f"ns.t{i}").scan().to_arrow().num_rows in (0, 3)
                   for i in range(callers))


def test_default_commits_from_threads_race_as_separate_writers(location: Location) -> None:
    """Not coalesced, threads through one catalog object have no queue: each commits in
    its own thread, losers rebase on the winners, and each caller gets a version of its
    own holding its change and those before it."""
    callers = 6
    Catalog.create(location.uri, location.storage_options).create_namespace("s")
    catalog = Catalog.open(location.uri, location.storage_options)
    gate = _Gate(catalog.storage.backend, catalog.storage.root, lambda: False, lambda: True)
    catalog.storage.backend = gate
    outcomes = _commit_in_threads(catalog, [_create(f"t{i}") for i in range(callers)])
    assert sorted(outcomes) == list(range(2, 2 + callers))  # type: ignore[type-var]
    assert gate.roots_created >= callers  # one each, and one per lost create
    final = Catalog.open(location.uri, location.storage_options)
    for version in outcomes:
        assert isinstance(version, int)
        assert final.at_version(version).list_tables("s") == sorted(
            f"t{j}" for j, other in enumerate(outcomes) if other <= version)  # type: ignore[operator]
    assert catalog.version == final.version == 1 + callers
    assert coalesce_module._GROUPS.get(catalog.files) is None  # no queue was made


def _member(name: str, joins: bool) -> Member:
    actions = [apb.ActionDef(type=apb.TABLE_CREATE,
                             object=apb.ObjectRef(type=apb.TABLE, namespace="s", name=name))]
    return Member(None, Change({f"s.{name}": "def"}, actions, (), {}),  # type: ignore[arg-type]
                   CommitOptions(coalesce=joins))


def test_turns_are_taken_in_order_and_only_joining_changes_share_one() -> None:
    a, b, c = (_member(name, joins=False) for name in "abc")
    assert disjoint([a, b, c]) == ([a], [b, c])  # first come, alone
    x, y, z = (_member(name, joins=True) for name in "xyz")
    assert disjoint([x, a, y, z]) == ([x, y, z], [a])  # the joining ones together
    assert disjoint([a, x, y]) == ([a], [x, y])  # a change that does not join goes alone
    x2 = _member("x", joins=True)
    assert disjoint([x, x2, y]) == ([x, y], [x2])  # the same object waits for the next


def test_an_interrupted_leader_withdraws_its_own_change(monkeypatch: pytest.MonkeyPatch,
                                                        ) -> None:
    """The leading thread is interrupted (KeyboardInterrupt, SystemExit) while landing a
    batch its own change was left out of (it touches the object of an older one): that
    change goes with the interrupt and is never landed by a later batch; the member of
    the batch learns that its outcome is unknown."""
    group = CommitGroup()
    older, ours = _member("x", joins=True), _member("x", joins=True)
    group._waiting.append(older)  # queued by another caller, waiting for its turn

    def interrupted(*_args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(coalesce_module, "_land_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        group.submit(None, ours)  # type: ignore[arg-type]
    assert group.submitted == 0  # nothing left for the next leader to land
    assert isinstance(ours.error, KeyboardInterrupt)
    assert isinstance(older.error, CatalogError) and "interrupted" in str(older.error)


def test_conflicting_concurrent_commits_one_wins(location: Location) -> None:
    catalog, gate = _gated_catalog(location, 3)
    outcomes = _commit_in_threads(catalog, [
        _create("orders", [{"name": "a", "type": "int4"}]),
        _create("orders", [{"name": "b", "type": "varchar"}]),
        _create("other"),
    ])
    conflicts = [o for o in outcomes[:2] if isinstance(o, CommitConflict)]
    won = [o for o in outcomes[:2] if isinstance(o, int)]
    assert len(conflicts) == 1 and len(won) == 1  # exactly one of the pair
    assert isinstance(outcomes[2], int)  # the disjoint caller is not affected
    assert conflicts[0].version == won[0] and "s.orders" in str(conflicts[0])
    final = Catalog.open(location.uri, location.storage_options)
    assert final.version == gate.roots_created + 1 <= 3
    winner = outcomes.index(won[0])
    assert final.load_table("s.orders").columns[0].name == ("a", "b")[winner]
    assert final.list_tables("s") == ["orders", "other"]


def test_conflict_with_another_writer_takes_out_only_its_caller(location: Location) -> None:
    """Another writer (its own catalog object) creates ``s.x`` after both threads began:
    the thread creating ``s.x`` gets the conflict naming that version, the other commits.
    """
    catalog, gate = _gated_catalog(location, 2)
    other = Catalog.open(location.uri, location.elsewhere().storage_options)

    def create_x(txn: Any) -> None:
        txn.create_table("s", "x", columns=COLUMNS)
        if not other.table_exists("s", "x"):  # the first thread to stage lets it win
            other.create_table("s", "x", columns=[{"name": "theirs", "type": "int4"}])

    outcomes = _commit_in_threads(catalog, [create_x, _create("y")])
    assert isinstance(outcomes[0], CommitConflict) and outcomes[0].version == 2
    assert outcomes[1] == 3
    final = Catalog.open(location.uri, location.storage_options)
    assert final.version == 3 and final.list_tables("s") == ["x", "y"]
    assert final.load_table("s.x").columns[0].name == "theirs"
    assert gate.roots_created <= 2  # at most one publication lost to the other writer


def test_commits_one_after_another_are_not_held_back() -> None:
    catalog = Catalog.create("memory://coalesce-sequential", coalesce_commits=True)
    for name in ("s", "t", "u"):
        catalog.create_namespace(name)
    assert catalog.version == 3 and commit_group(catalog.files).submitted == 0


def test_serializable_commits_are_not_coalesced() -> None:
    """A SERIALIZABLE transaction's reads are checked against every version after its base
    alone; it never shares a version."""
    catalog = Catalog.create("memory://coalesce-serializable", coalesce_commits=True)
    catalog.create_namespace("s")
    txn = catalog.transaction("SERIALIZABLE")
    txn.list_tables("s")
    txn.create_table("s", "a", columns=COLUMNS)
    assert txn.commit() == 2 and commit_group(catalog.files).submitted == 0


@pytest.mark.parametrize("coalesce", [False, True])
def test_coalesce_setting(coalesce: bool) -> None:
    uri = f"memory://coalesce-setting-{coalesce}"
    Catalog.create(uri)
    assert Catalog.open(uri, coalesce_commits=coalesce).commit_options.coalesce is coalesce


def test_a_dropped_catalog_leaves_no_group_behind() -> None:
    """Groups are weakly keyed by the catalog's files, and nothing a group holds refers to
    them: once the catalog object is gone, so is its group."""
    import gc
    import weakref

    catalog = Catalog.create("memory://coalesce-weak", coalesce_commits=True)
    catalog.create_namespace("s")
    group = weakref.ref(commit_group(catalog.files))
    files = weakref.ref(catalog.files)
    del catalog
    gc.collect()
    assert files() is None and group() is None


class TaskTimeout(Exception):
    """What a task runner raises in the thread it interrupts (Airflow's task timeout)."""


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def relayed(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Location]:
    """A catalog location on local disk, or on S3 behind a slow relay (each request
    delayed, as a distant server's are)."""
    if request.param == "local":
        yield Location(str(tmp_path / "warehouse"), {}, "local")
        return
    from s3server import FaultProxy

    server = request.getfixturevalue("s3_server")
    with FaultProxy(server.endpoint_url) as relay:
        relay.delay_s = 0.02
        yield Location(f"s3://{server.bucket}/{uuid.uuid4().hex[:12]}",
                       relay.storage_options(server.storage_options), "s3")


class _Held:
    """``catalog``'s root publications wait, the ``n``-th one until ``release(n)``."""

    def __init__(self, catalog: Catalog) -> None:
        self.publish = catalog.storage.publish
        self.entered = [threading.Event() for _ in range(3)]
        self.released = [threading.Event() for _ in range(3)]
        self.count = 0
        catalog.storage.publish = self  # type: ignore[method-assign]

    def __call__(self, files: dict[str, bytes], path: str, data: bytes, *rest: Any,
                 **named: Any) -> None:
        n, self.count = self.count, self.count + 1
        self.entered[n].set()
        deadline = time.monotonic() + 120  # a bounded wait, not a timing assertion
        while not self.released[n].wait(0.05):  # in slices: see coalesce._WAIT_SLICE_S
            assert time.monotonic() < deadline
        self.publish(files, path, data, *rest, **named)


@contextlib.contextmanager
def _interrupted_once(when: Callable[[], bool]) -> Iterator[None]:
    """Within the block, once ``when()`` holds, interrupt the main thread (the test's) with
    TaskTimeout: a signal whose handler raises it, as a task runner's timeout does. Should
    ``when()`` not hold, or the main thread not leave the block after the signal, within a
    minute (bounded waits, not timing assertions), every thread's stack goes to stderr
    (the main thread is interrupted all the same) and the test fails saying so."""
    stuck = threading.Event()
    left = threading.Event()

    def handler(_signum: int, _frame: Any) -> None:
        raise TaskTimeout("the task timed out")

    def within_a_minute(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not done():
            if time.monotonic() > deadline:
                faulthandler.dump_traceback(all_threads=True)  # where the main thread is
                stuck.set()
                return
            time.sleep(0.005)

    def run() -> None:
        within_a_minute(when)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
        within_a_minute(left.is_set)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        threading.Thread(target=run, daemon=True).start()
        yield
    finally:
        left.set()
        signal.signal(signal.SIGUSR1, previous)
        assert not stuck.is_set(), ("the state to interrupt in, or the main thread's exit "
                                    "after the signal, never came within a minute: every "
                                    "thread's stack is in the captured stderr")


def _held_catalog(location: Location, coalesce: bool) -> tuple[Catalog, _Held]:
    """A catalog with table ``s.t1``, opened again (coalescing or not) with its root
    publications held."""
    catalog = Catalog.create(location.uri, location.storage_options)
    catalog.create_namespace("s")
    catalog.create_table("s", "t1", columns=COLUMNS)
    catalog = Catalog.open(location.uri, location.storage_options, coalesce_commits=coalesce)
    return catalog, _Held(catalog)


def _tables_by_version(location: Location) -> dict[int, list[str]]:
    """The tables of namespace ``s`` in every version from 2 (which created ``t1``)."""
    latest = Catalog.open(location.uri, location.storage_options)
    return {v: latest.at_version(v).list_tables("s") for v in range(2, latest.version + 1)}


def test_an_interrupted_queued_commit_is_withdrawn(relayed: Location) -> None:
    """A drop queued behind another thread's commit through the same coalescing catalog
    object is interrupted (TaskTimeout): its caller gets the interrupt, and the drop never
    lands, though the same object goes on committing."""
    catalog, held = _held_catalog(relayed, True)
    group = commit_group(catalog.files)
    first = threading.Thread(target=catalog.create_table, args=("s", "first"),
                             kwargs={"columns": COLUMNS})
    first.start()
    assert held.entered[0].wait(120)
    with _interrupted_once(lambda: group.submitted == 2), pytest.raises(TaskTimeout):
        catalog.drop_table("s", "t1")
    assert group.submitted == 1  # the drop left the queue with its caller
    for n in range(3):
        held.released[n].set()
    first.join(120)
    catalog.create_table("s", "after", columns=COLUMNS)
    tables = _tables_by_version(relayed)
    assert tables[max(tables)] == ["after", "first", "t1"]
    assert all("t1" in names for names in tables.values())


def test_an_interrupted_commit_in_the_batch_under_way_is_outcome_unknown(
        relayed: Location) -> None:
    """Coalesced, a drop and another thread's create are taken into one batch together;
    the drop's caller (or, if it leads, its landing) is interrupted while the batch's
    root waits to be published: the caller gets CommitOutcomeUnknown, never a failure,
    and the drop lands in that batch's version or never."""
    catalog, held = _held_catalog(relayed, True)
    group = commit_group(catalog.files)
    outcomes: dict[str, object] = {}

    def create(name: str) -> None:
        try:
            outcomes[name] = catalog.create_table("s", name, columns=COLUMNS)
        except Exception as exc:  # every outcome is recorded and checked
            outcomes[name] = exc

    first = threading.Thread(target=create, args=("first",))
    first.start()
    assert held.entered[0].wait(120)
    second = threading.Thread(target=create, args=("second",))

    def queued() -> bool:  # the drop, then the second create, wait behind the first
        if group.submitted == 2 and not second.is_alive():
            second.start()
        if group.submitted == 3 and not held.released[0].is_set():
            held.released[0].set()  # the next batch takes the drop and the create
        return held.entered[1].is_set()

    with _interrupted_once(queued), pytest.raises(CommitOutcomeUnknown) as info:
        catalog.drop_table("s", "t1")
    assert isinstance(info.value.__cause__, TaskTimeout)
    held.released[1].set()
    held.released[2].set()
    first.join(120)
    second.join(120)
    catalog.create_table("s", "after", columns=COLUMNS)
    tables = _tables_by_version(relayed)
    dropped = [v for v, names in tables.items() if "t1" not in names]
    landed = outcomes["second"]
    assert not isinstance(landed, Exception) or isinstance(landed, CommitOutcomeUnknown)
    if dropped:  # with the second create, in that batch's version, and after it
        assert "second" in tables[dropped[0]] and "second" not in tables[dropped[0] - 1]
        assert dropped == list(range(dropped[0], max(tables) + 1))
    assert "after" in tables[max(tables)]


def test_an_interrupted_default_commit_is_outcome_unknown_and_never_lands_later(
        relayed: Location) -> None:
    """Not coalesced, the caller's own thread lands its change: a drop whose caller is
    interrupted (TaskTimeout, from a signal handler) while its root's publication waits
    is told CommitOutcomeUnknown (the interrupt is its cause), never a failure; that
    publication never ran, so the drop never lands, and the object goes on committing."""
    catalog, held = _held_catalog(relayed, False)
    with _interrupted_once(held.entered[0].is_set), pytest.raises(CommitOutcomeUnknown) as info:
        catalog.drop_table("s", "t1")
    assert isinstance(info.value.__cause__, TaskTimeout)
    for n in range(3):
        held.released[n].set()
    catalog.create_table("s", "after", columns=COLUMNS)
    tables = _tables_by_version(relayed)
    assert tables[max(tables)] == ["after", "t1"]
    assert all("t1" in names for names in tables.values())
