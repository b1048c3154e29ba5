"""The commit protocol under random interleavings (issue 33): a hypothesis state machine.

Several writers commit to one catalog (on local disk, or on gs:// or abfs://): a thread
with a catalog object of its own, two threads sharing one catalog object (no queue: they
race as separate writers do), three threads sharing one coalescing catalog object (its
queue: olympia/catalog/coalesce.py), and a writer in another process; so every example
runs both paths, the protocol alone (the default) and the queue (``coalesce_commits``),
against each other. Every storage operation of every writer, and every pause after a lost
race, passes through a gate (a wrapper around the real backend) that waits for the
machine's decision, so the machine chooses the interleaving one step at a time, and for
each storage operation whether it runs, fails transiently, runs and then loses its answer
(a create that succeeded is reported as a timeout), or crashes the writer there (that
operation and every later one of that writer never reach the store), and for a batch of
concurrent reads (a remote store's) the order they run in, one at a time; a pause may end,
be interrupted (an exception, as a task timeout raises) or crash its writer. Out of band,
the machine backs the prefix up and restores it in place, while transactions are open and while
every commit under way is pausing after a lost race (never mid-attempt: a copy is
whole; as a writer begins its pause, the others' operations run until they pause or end,
and in the teardown the newest copy comes back the first time a writer pauses), and
delivers an exception (a task timeout) to a caller waiting in the coalescing object's
queue.

After every run:

- every commit reported successful is in the history exactly once, at the reported
  version (unless a restore took the store back before it);
- nothing reported as a conflict or withdrawn by an interrupt (raised as it is: to a
  queued caller, or to a default commit pausing after a lost race) ever appears, and a commit
  whose outcome was unknown or whose writer crashed, absent from the history when that
  was reported (or, when an interrupted caller was told the outcome is unknown, when the
  batch holding its change ended), never appears;
- the history is a serial order of the commits it holds: each version's commits touched
  no object that a version after their base touched (no lost update), and each version's
  tables are the previous version's with its commits' changes applied;
- every version reads back and passes ``olympia verify``'s checks.

The machine runs over local disk (``TestCommitHistory``, the long run's subject) and over
the cloud schemes' emulators (``test_the_history_holds_on_a_cloud_scheme``: gs:// on
fake-gcs-server, abfs:// on Azurite, one emulator of each per test run, skipped only where
its binary is missing), with the same moves and checks; a copy of the prefix is taken and
put back with the file system on local disk, through the object API on a cloud store.

The suite runs a bounded number of derandomized examples (OLYMPIA_COMMIT_HISTORY_EXAMPLES
sets how many each run of the machine makes; unset, 40 on local disk and 8 on each cloud
scheme); a long run is ``benchmarks/commit_history.py``, whose ``--machine`` picks the
scheme.
"""

from __future__ import annotations

import builtins
import ctypes
import inspect
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from conftest import Location
from gates import (
    CLOUD_OPTIONS,
    OPTIONS,
    Crashed,
    Gate,
    Interrupted,
    gated_catalog,
    order_decision,
)
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from olympia import Catalog
from olympia.catalog.actions import A
from olympia.catalog.coalesce import commit_group
from olympia.catalog.reader import Snapshot
from olympia.exceptions import CommitConflict, CommitOutcomeUnknown, OlympiaError
from olympia.storage import Backend, FileInfo, Storage
from olympia.storage.backends import Job, RunAll, run_in_turn
from olympia.tree import btree

T = TypeVar("T")
R = TypeVar("R")
NAMES = ("a", "b", "c")
DECISIONS = ("go",) * 8 + ("fail", "lost-ack", "crash")
QUIET_S = 60.0  # a bounded wait for a writer to reach its next operation (not a timing)
_GIVEN = os.environ.get("OLYMPIA_COMMIT_HISTORY_EXAMPLES")  # examples per run of the machine
EXAMPLES = int(_GIVEN or "40")  # on local disk
CLOUD_EXAMPLES = int(_GIVEN or "8")  # on each cloud scheme
COALESCING = 2  # the writer whose threads share one coalescing catalog object
SHARED = (1, 4)  # the writers whose threads share one catalog object without a queue


def stage(catalog: Catalog, cid: str, picks: Sequence[tuple[str, bool]]) -> Any:
    """Begin a transaction and stage one change per picked table name, decided by the
    base: create a missing table, else alter it (or drop it, when ``drop``).
    Returns (the transaction, its base version, its changes as (kind, name))."""
    txn = catalog.transaction()
    existing = set(txn.list_tables("s"))
    ops = []
    for name, drop in picks:
        if name not in existing:
            txn.create_table("s", name, columns=[{"name": "id", "type": "int8"}],
                             properties={"by": cid})
            ops.append(("create", name))
        elif drop:
            txn.drop_table("s", name)
            ops.append(("drop", name))
        else:
            txn.alter_table("s", name, set_properties={"by": cid})
            ops.append(("alter", name))
    txn.annotate(commit=cid)
    return txn, txn.base.version, ops


def outcome_of(commit: Callable[[], int]) -> tuple[str, int]:
    """How a commit ended: committed (with its version), conflict, withdrawn (its caller
    got the interrupt delivered to it while queued, or its pause after a lost race was
    interrupted: the gate's TimeoutError, raised as it is by a default commit), unknown,
    unknown-interrupted (its batch may still be landing), crashed."""
    try:
        return "committed", commit()
    except Crashed:
        return "crashed", -1
    except CommitConflict:
        return "conflict", -1
    except (Interrupted, TimeoutError):
        return "withdrawn", -1
    except CommitOutcomeUnknown:
        return "unknown-interrupted", -1
    except OlympiaError:  # a storage error: outcome unknown
        return "unknown", -1


def process_writer(conn: Connection) -> None:
    """A writer in another process, driven by the machine over ``conn``."""
    catalog: Catalog | None = None
    gate: Gate | None = None
    txn: Any = None
    options: dict[str, Any] = {}

    def ask(what: str) -> str:
        conn.send(("op", what))
        decision: str = conn.recv()
        return decision

    while True:
        message = conn.recv()
        if message[0] == "stop":
            return
        if message[0] == "open":
            options = message[2]
            catalog, gate = gated_catalog(message[1], ask=ask, options=options)
            conn.send(("ok",))
        elif message[0] == "begin":
            assert catalog is not None and gate is not None
            if gate.crashed:  # the process was restarted: a new catalog object
                catalog, gate = gated_catalog(catalog.uri, ask=ask, options=options)
            txn, base, ops = stage(catalog, message[1], message[2])
            conn.send(("staged", base, ops))
        elif message[0] == "commit":
            assert gate is not None
            gate.open = False
            outcome = outcome_of(txn.commit)
            gate.open = True
            conn.send(("done", outcome))


_WORKERS: list[tuple[Any, Connection]] = []


def worker() -> tuple[Any, Connection]:
    """The writer process (started once, reused by every example)."""
    if not _WORKERS:
        context = multiprocessing.get_context("forkserver")
        ours, theirs = context.Pipe()
        proc = context.Process(target=process_writer, args=(theirs,), daemon=True)
        proc.start()
        _WORKERS.append((proc, ours))
    return _WORKERS[0]


class Threads(Backend):
    """The backend of one catalog object whose threads commit through it at once without
    a queue: each thread's operations and pauses wait at the gate of its own writer
    (:meth:`enter`); the machine's own (beginning, staging) go through the first gate,
    which lets them by."""

    def __init__(self, gates: Sequence[Gate]) -> None:
        self.gates = list(gates)
        self.remote = gates[0].remote
        self._local = threading.local()

    def enter(self, gate: Gate) -> None:
        """The calling thread's operations wait at ``gate`` from now on."""
        self._local.gate = gate

    @property
    def gate(self) -> Gate:
        gate: Gate = getattr(self._local, "gate", self.gates[0])
        return gate

    def pause(self, seconds: float) -> None:
        self.gate.pause(seconds)

    def read(self, path: str) -> bytes:
        return self.gate.read(path)

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        return self.gate.read_if_changed(path, tag)

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self.gate.write(path, data, durable)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self.gate.create_exclusive(path, data)

    def publish(self, files: Mapping[str, bytes], path: str, data: bytes,
                run_all: RunAll = run_in_turn, present: Sequence[str] = (),
                unchanged: Mapping[str, str] | None = None, alongside: Sequence[Job] = (),
                ) -> None:
        self.gate.publish(files, path, data, run_all, present, unchanged, alongside)

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        self.gate.replace(path, data, expected)

    def exists(self, path: str) -> bool:
        return self.gate.exists(path)

    def list(self, prefix: str) -> list[FileInfo]:
        return self.gate.list(prefix)

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        return self.gate.delete_many(paths)

    def place(self, root: str) -> Hashable:
        return self.gate.place(root)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> builtins.list[R]:
        return self.gate.map(fn, items)


def shared_catalog(uri: str, options: Mapping[str, Any]) -> tuple[Catalog, Gate, Gate]:
    """A catalog object (not coalescing) whose two committing threads each wait at a gate
    of their own."""
    catalog, first = gated_catalog(uri, options=options)
    second = Gate(first.inner)
    threads = Threads([first, second])
    catalog.storage.backend = threads
    catalog.storage.map = threads.map  # type: ignore[method-assign]
    catalog.commit_options = replace(catalog.commit_options, sleep=threads.pause)
    return catalog, first, second


@dataclass
class Txn:
    """A transaction the machine began: its commit id, base and changes."""

    cid: str
    base: int
    ops: list[tuple[str, str]]


@dataclass
class Slot:
    """Where a transaction runs: a writer's catalog object (threads), or the process."""

    writer: int
    txn: Txn | None = None
    committing: bool = False
    thread: threading.Thread | None = None
    outcome: tuple[str, int] | None = None
    handle: Any = None  # the staged transaction (threads)


@dataclass
class Backup:
    files: dict[str, bytes]
    expected: dict[str, int] = field(default_factory=dict)


class Folder:
    """The catalog in a folder of its own on local disk, copied and put back with the file
    system (the folder removed, the copy's files written again)."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="olympia-history-")
        self.uri = os.path.join(self.folder, "c")
        self.options: Mapping[str, Any] = OPTIONS

    def copy(self) -> dict[str, bytes]:
        files = {}
        for dirpath, _dirs, names in os.walk(self.uri):
            for name in names:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, self.uri)] = f.read()
        return files

    def put_back(self, files: Mapping[str, bytes]) -> None:
        shutil.rmtree(self.uri)
        for path, content in files.items():
            full = os.path.join(self.uri, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(content)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class Objects:
    """The catalog under a prefix of its own on a cloud store, copied and put back through
    the store's object API as a copy tool does (the objects the copy lacks deleted, each
    object of the copy written again)."""

    def __init__(self, location: Location) -> None:
        self.uri = f"{location.uri}/{uuid.uuid4().hex[:12]}"
        self.options: Mapping[str, Any] = {**CLOUD_OPTIONS, **location.storage_options}
        self.storage = Storage(self.uri, self.options)

    def copy(self) -> dict[str, bytes]:
        paths = [f.path for f in self.storage.list()]
        return dict(zip(paths, self.storage.read_many(paths), strict=True))

    def put_back(self, files: Mapping[str, bytes]) -> None:
        self.storage.delete_many([f.path for f in self.storage.list() if f.path not in files])
        self.storage.write_many(files)

    def remove(self) -> None:
        self.storage.delete_many([f.path for f in self.storage.list()])
        self.storage.close()


class CommitHistory(RuleBasedStateMachine):
    """Writer 0: a thread with a catalog object; writers 1 and 4: a thread each, sharing
    one catalog object (no queue); writer 2: three threads sharing one coalescing catalog
    object; writer 3: another process. The catalog is on local disk, or on the cloud
    store of ``location``."""

    def __init__(self, location: Location | None = None) -> None:
        super().__init__()
        self.prefix = Objects(location) if location else Folder()
        self.uri = self.prefix.uri
        self.catalogs: dict[int, tuple[Catalog, Gate]] = {}
        self.slots = [Slot(0), Slot(1), Slot(4), Slot(2), Slot(2), Slot(2), Slot(3)]
        self.txns: dict[str, Txn] = {}
        self.expected: dict[str, int] = {}  # reported committed -> version
        self.failed: set[str] = set()  # reported as a conflict, or withdrawn
        self.absent: set[str] = set()  # outcome unknown or crashed, absent when reported
        # told unknown by an interrupt while its batch may be landing: (writer, restores
        # when reported), until that writer's catalog object lands no batch
        self.landing: dict[str, tuple[int, int]] = {}
        self.restores = 0
        self.backups: list[Backup] = []
        self.process_pending: str | None = None
        self.count = 0

    @initialize()
    def create(self) -> None:
        catalog = Catalog.create(self.uri, self.prefix.options)
        catalog.create_namespace("s")
        for writer in (0, COALESCING):
            self.catalogs[writer] = gated_catalog(self.uri, coalesce=writer == COALESCING,
                                                  options=self.prefix.options)
        self._open_shared()
        _, conn = worker()
        conn.send(("open", self.uri, dict(self.prefix.options)))
        assert conn.recv() == ("ok",)
        self.backup()  # a copy to restore is always at hand

    # --- the writers ----------------------------------------------------------------

    def _no_attempt_under_way(self) -> bool:
        """Whether a copy of the prefix is whole: every commit under way is pausing after
        a lost race, or waiting in its catalog object's queue (transactions may be open:
        one open across a restore must not build on a version the restore replaced, and
        a retry after the pause must not name the files the restore removed)."""
        return all(self._pending_of(w).startswith("pause ") for w in self._pending_writers())

    @rule(data=st.data())
    def begin(self, data: st.DataObject) -> None:
        free = [i for i, s in enumerate(self.slots) if s.txn is None]
        if not free:
            return
        slot = self.slots[data.draw(st.sampled_from(free))]
        names = data.draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=2,
                                   unique=True))
        picks = [(name, data.draw(st.booleans())) for name in names]
        self.count += 1
        cid = f"c{self.count}"
        if slot.writer == 3:
            _, conn = worker()
            conn.send(("begin", cid, picks))
            _, base, ops = conn.recv()
            slot.txn = Txn(cid, base, [tuple(op) for op in ops])
        else:
            catalog, _ = self._catalog(slot.writer)
            slot.handle, base, ops = stage(catalog, cid, picks)
            slot.txn = Txn(cid, base, ops)
        self.txns[cid] = slot.txn

    def _catalog(self, writer: int) -> tuple[Catalog, Gate]:
        """The writer's catalog object: after a crash, a new one (the process restarted)
        once none of its commits is under way."""
        sharing = SHARED if writer in SHARED else (writer,)
        if self.catalogs[writer][1].crashed and not any(
                s.committing for s in self.slots if s.writer in sharing):
            if writer in SHARED:
                self._open_shared()
            else:
                self.catalogs[writer] = gated_catalog(self.uri,
                                                      coalesce=writer == COALESCING,
                                                      options=self.prefix.options)
        return self.catalogs[writer]

    def _open_shared(self) -> None:
        catalog, first, second = shared_catalog(self.uri, self.prefix.options)
        self.catalogs[SHARED[0]], self.catalogs[SHARED[1]] = (catalog, first), (catalog, second)

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        staged = [i for i, s in enumerate(self.slots) if s.txn and not s.committing]
        if not staged:
            return
        slot = self.slots[data.draw(st.sampled_from(staged))]
        if self._no_attempt_under_way() and data.draw(st.booleans()):
            self.backup()  # a copy with the commit's base and none of its files
        slot.committing = True
        if slot.writer == 3:
            _, conn = worker()
            conn.send(("commit",))
            self._process_next(slot)
            return
        catalog, gate = self.catalogs[slot.writer]
        txn = slot.handle

        def run() -> None:
            if isinstance(catalog.storage.backend, Threads):
                catalog.storage.backend.enter(gate)
            slot.outcome = outcome_of(txn.commit)

        before = self._held(slot.writer)
        thread = slot.thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._quiet(slot.writer, lambda: self._held(slot.writer) > before
                    or not thread.is_alive())
        self._collect()

    def _held(self, writer: int) -> int:
        """The writer's callers held by its catalog object's queue, or (no queue) its
        callers waiting at its gate."""
        catalog, gate = self.catalogs[writer]
        if writer == COALESCING:
            return _submitted(catalog.files)
        return int(gate.pending is not None)

    def _process_next(self, slot: Slot) -> None:
        _, conn = worker()
        message = conn.recv()
        if message[0] == "op":
            self.process_pending = message[1]
        else:
            self.process_pending = None
            slot.outcome = tuple(message[1])  # type: ignore[assignment]

    def _quiet(self, writer: int, started: Callable[[], bool] = lambda: True) -> None:
        """Wait until every committing thread of ``writer`` has finished or is blocked: at
        the gate, or held by its catalog object's queue. A thread that a batch just
        released is waited for until it ends, so what the machine draws next never depends
        on how threads were scheduled (hypothesis replays a prefix of choices and must be
        offered the same ones). Bounded: a hang fails the test."""
        _, gate = self.catalogs[writer]
        threads = [s.thread for s in self.slots if s.writer == writer and s.thread]

        def settled() -> bool:  # each caller is blocked in the queue or at the gate
            alive = sum(t.is_alive() for t in threads)
            return alive == 0 or (gate.pending is not None and (
                writer != COALESCING or alive == self._held(writer)))

        deadline = time.monotonic() + QUIET_S
        while not (started() and settled()):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"writer {writer} neither finished nor waited: {self._held(writer)} "
                    f"held, gate at {gate.pending!r}, threads:\n{_stacks(threads)}")
            time.sleep(0.0002)

    @precondition(lambda self: self._pending_writers())
    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        writer = data.draw(st.sampled_from(self._pending_writers()))
        pending = self._pending_of(writer)
        if pending.startswith("order "):  # a batch of concurrent reads (remote stores)
            self._step(writer, data.draw(order_decision(int(pending.split()[1]))))
        else:
            self._step(writer, data.draw(st.sampled_from(DECISIONS)))
        if self._pending_of(writer).startswith("pause ") and data.draw(st.booleans()):
            self._restore_while_pausing(data)  # as the writer begins its pause

    def _pending_writers(self) -> list[int]:
        writers = [w for w, (_, gate) in self.catalogs.items() if gate.pending is not None]
        return writers + ([3] if self.process_pending is not None else [])

    def _step(self, writer: int, decision: str) -> None:
        if writer == 3:
            _, conn = worker()
            conn.send(decision)
            slot = next(s for s in self.slots if s.writer == 3)
            self._process_next(slot)
        else:
            _, gate = self.catalogs[writer]
            gate.decide(decision)
            self._quiet(writer)
            if decision == "crash" and writer in SHARED:  # its process died: both threads
                other = SHARED[1] if writer == SHARED[0] else SHARED[0]
                _, sibling = self.catalogs[other]
                if sibling.pending is not None:
                    sibling.decide("crash")
                sibling.crashed = True
                self._quiet(other)
        self._collect()

    def _collect(self) -> None:
        """Record the outcomes of the commits that finished."""
        for slot in self.slots:
            if slot.committing and slot.outcome is not None and (
                    slot.thread is None or not slot.thread.is_alive()):
                assert slot.txn is not None
                kind, version = slot.outcome
                cid = slot.txn.cid
                event(f"outcome: {kind}")
                if kind == "committed":
                    self.expected[cid] = version
                elif kind in ("conflict", "withdrawn"):
                    self.failed.add(cid)
                elif kind == "unknown-interrupted":
                    self.landing[cid] = (slot.writer, self.restores)
                elif cid not in self._present():
                    self.absent.add(cid)
                slot.txn, slot.committing, slot.thread, slot.outcome = None, False, None, None
                slot.handle = None
        for cid, (writer, restores) in list(self.landing.items()):
            if writer != COALESCING or not commit_group(
                    self.catalogs[writer][0].files).landing:
                del self.landing[cid]  # its batch ended: it landed there or never will
                if restores == self.restores and cid not in self._present():
                    self.absent.add(cid)

    # --- out-of-band changes ------------------------------------------------------------

    @precondition(lambda self: self._no_attempt_under_way())
    @rule()
    def backup(self) -> None:
        self.backups.append(Backup(self.prefix.copy(), dict(self.expected)))

    @precondition(lambda self: self._no_attempt_under_way() and self.backups)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        self._restore(data)

    def _restore(self, data: st.DataObject | None) -> None:
        """Restore a drawn copy (without ``data``: the newest one)."""
        backup = data.draw(st.sampled_from(self.backups)) if data else self.backups[-1]
        self.prefix.put_back(backup.files)
        self.expected = dict(backup.expected)
        self.restores += 1
        event("restore: " + ("while a commit pauses" if self._pausing() else
                             "no commit pausing"))

    def _restore_while_pausing(self, data: st.DataObject | None) -> None:
        """A writer pauses after a lost race: every other commit under way goes on (each
        of its operations runs) until it pauses too or ends, and then a copy comes back
        (drawn; in the teardown, the newest)."""
        for _ in range(10_000):
            if self._no_attempt_under_way():
                break
            for writer in self._pending_writers():
                if not self._pending_of(writer).startswith("pause "):
                    self._step(writer, "go")
        else:
            raise AssertionError("the other writers never paused or ended")
        if self._pausing():
            self._restore(data)

    def _pausing(self) -> bool:
        return any(self._pending_of(w).startswith("pause ") for w in self._pending_writers())

    def _pending_of(self, writer: int) -> str:
        pending = self.process_pending if writer == 3 else self.catalogs[writer][1].pending
        return pending or ""

    @precondition(lambda self: self._queued_callers())
    @rule(data=st.data())
    def interrupt(self, data: st.DataObject) -> None:
        """Deliver an exception (a task timeout) to a caller waiting in the coalescing
        catalog object's queue, while the leader of that object's batch waits at the
        gate."""
        slot = self.slots[data.draw(st.sampled_from(self._queued_callers()))]
        thread = slot.thread
        assert thread is not None and thread.ident is not None
        catalog, _ = self.catalogs[slot.writer]
        group = commit_group(catalog.files)
        _await_waiting(thread)
        delivered = ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(Interrupted))
        assert delivered == 1
        with group._cond:  # wake it: the exception is raised once it runs again
            group._cond.notify_all()
        thread.join(QUIET_S)
        assert not thread.is_alive(), _stacks([thread])
        self._quiet(slot.writer)
        self._collect()

    def _queued_callers(self) -> list[int]:
        """The slots whose committing thread waits in the coalescing catalog object's
        queue (not at the gate) while that object's batch is being landed."""
        queued = []
        for i, slot in enumerate(self.slots):
            if slot.writer == COALESCING and slot.committing and slot.outcome is None:
                _, gate = self.catalogs[slot.writer]
                thread = slot.thread
                if (thread is not None and thread.is_alive() and gate.pending is not None
                        and thread.ident != gate.waiter):
                    queued.append(i)
        return queued

    # --- what must hold -----------------------------------------------------------------

    def _history(self) -> list[Snapshot]:
        reader = Catalog.open(self.uri, self.prefix.options)
        return [reader.at_version(v) for v in range(reader.version + 1)]

    def _present(self) -> set[str]:
        return {cid for snap in self._history() for cid in _commits(snap)}

    @invariant()
    def no_writer_hangs(self) -> None:
        for slot in self.slots:
            assert not (slot.committing and slot.thread is None and slot.writer != 3)

    def teardown(self) -> None:
        try:
            restored = False  # once, the first time a writer pauses
            for _ in range(10_000):  # every commit under way goes on to its end
                writers = self._pending_writers()
                if not writers and not any(s.committing for s in self.slots):
                    break
                if not restored and self._pausing():
                    self._restore_while_pausing(None)
                    restored = True
                    continue
                for writer in writers:
                    self._step(writer, "go")
            self._collect()
            assert not any(s.committing for s in self.slots)
            self._check()
        except BaseException:
            for proc, _ in _WORKERS:  # its state is unknown: the next example starts anew
                proc.kill()
            _WORKERS.clear()
            raise
        finally:
            self.prefix.remove()

    def _check(self) -> None:
        history = self._history()
        where: dict[str, list[int]] = {}
        for snap in history:
            for cid in _commits(snap):
                where.setdefault(cid, []).append(snap.version)
        for cid, version in self.expected.items():
            assert where.get(cid) == [version], (cid, version, where.get(cid))
        for cid in self.failed | self.absent:
            assert cid not in where, (cid, where[cid])
        assert all(len(versions) == 1 for versions in where.values()), where
        state: dict[str, str] = {}
        touched: dict[int, set[str]] = {}
        for snap in history:
            btree.validate(snap.nodes, snap.root.node, snap.catalog_def.order)
            snap.load_all()
            if snap.version < 2:
                continue
            members = [self.txns[cid] for cid in _commits(snap)]
            assert members, f"version {snap.version} records no commit of this test"
            names = [name for m in members for _, name in m.ops]
            assert len(names) == len(set(names)), f"version {snap.version}: {names}"
            for m in members:  # first committer wins: nothing it touched changed since
                for version in range(m.base + 1, snap.version):
                    assert not touched.get(version, set()) & {n for _, n in m.ops}, (
                        m.cid, version)
                for kind, name in m.ops:
                    if kind == "drop":
                        state.pop(name, None)
                    else:
                        state[name] = m.cid
            touched[snap.version] = set(names)
            stored = {t.name: t.properties.get("by", "") for t in (
                snap.load_table("s", name) for name in snap.list_tables("s"))}
            assert stored == state, (snap.version, stored, state)


def _commits(snap: Snapshot) -> list[str]:
    """The commit ids the version records (one TRANSACTION_INFO row per member)."""
    return [a.info["commit"] for a in snap.actions()
            if a.type == A.TRANSACTION_INFO and "commit" in a.info]


def _stacks(threads: Sequence[threading.Thread]) -> str:
    """Where each live thread is (for a failure message)."""
    frames = sys._current_frames()
    return "\n".join(
        f"{t.name}:\n{''.join(traceback.format_stack(frames[t.ident]))}"
        for t in threads if t.ident in frames)


def _submitted(files: Any) -> int:
    return commit_group(files).submitted


_WAIT_LINES = {  # where Condition.wait blocks until notified or its timeout passes
    inspect.getsourcelines(threading.Condition.wait)[1] + i
    for i, line in enumerate(inspect.getsourcelines(threading.Condition.wait)[0])
    if line.strip() == "gotit = waiter.acquire(True, timeout)"}


def _await_waiting(thread: threading.Thread) -> None:
    """Wait until ``thread`` is blocked in a Condition's wait (bounded: a hang fails)."""
    deadline = time.monotonic() + QUIET_S
    while True:
        frame = sys._current_frames().get(thread.ident or 0)
        if frame is not None and frame.f_code is threading.Condition.wait.__code__ and (
                frame.f_lineno in _WAIT_LINES):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the caller never waited:\n{_stacks([thread])}")
        time.sleep(0.0002)


CommitHistory.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestCommitHistory = CommitHistory.TestCase


def test_the_history_holds_on_a_cloud_scheme(cloud_location: Location) -> None:
    """The machine over gs:// (fake-gcs-server) and abfs:// (Azurite): the same writers,
    moves and checks as on local disk, a restore putting a copy of the prefix back
    through the object API."""
    class OnCloud(CommitHistory):
        def __init__(self) -> None:
            super().__init__(cloud_location)

    run_state_machine_as_test(OnCloud, settings=settings(CommitHistory.TestCase.settings,
                                                         max_examples=CLOUD_EXAMPLES))


def test_the_writer_process_stops(tmp_path: Any) -> None:
    """The writer process ends when asked (the suite leaves no process behind)."""
    if not _WORKERS:
        worker()
    proc, conn = _WORKERS.pop()
    conn.send(("stop",))
    proc.join(timeout=60)
    assert proc.exitcode == 0
