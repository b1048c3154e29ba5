"""Distributed transactions under random interleavings (issue 45): a hypothesis state machine.

Three writers, each a thread with a catalog object of its own, add statements to named
transactions, commit them and abort them. They stand for processes: the record's
compare-and-swap on local disk is an ``flock`` of the record file, which separate open
files contend for exactly as separate processes do. The machine itself begins transactions,
commits changes outside them (which conflict with what the transactions changed) and
expires transactions out of band. Every record replace, exclusive create (a version's
root), delete and pause after a lost race of a writer waits at a gate (tests/gates.py) for
the machine's decision: run, fail transiently, run and lose the answer, or crash the writer
there. At the end every pending operation runs, and every transaction still recorded is
finished (committed again, or aborted): a crash never leaves one that can be neither.

After every run:

- a transaction lands at most once: at most one version carries its instance, and it is
  the version its commit reported, if one did;
- a transaction whose abort returned, or that expired before anyone began committing it,
  never lands;
- a landed transaction holds every statement it acknowledged, none it refused (a
  conflict, a closed or expired transaction), and each statement whose outcome was unknown
  whole or not at all; nothing of a statement appears outside its transaction's version;
- each landed transaction touched nothing that a version committed after its beginning
  touched (no lost update);
- every version reads back and passes ``olympia verify``'s checks.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gates import OPTIONS, Crashed, Gate, gated_catalog
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from olympia import Catalog
from olympia._proto import objects_pb2 as pb
from olympia.catalog.actions import A
from olympia.catalog.distributed import TRANSACTION_INSTANCE
from olympia.catalog.keys import dtxn_path
from olympia.catalog.reader import Snapshot
from olympia.exceptions import (
    CatalogError,
    CommitConflict,
    NoSuchTransactionError,
    OlympiaError,
    TransactionExpiredError,
)
from olympia.tree import btree

BASE = ("a", "b")  # tables that exist before any transaction: statements alter them
COLS = [{"name": "id", "type": "int8"}]
GATED = ("replace", "create", "delete", "pause")
DECISIONS = ("go",) * 6 + ("fail", "lost-ack", "crash")
WRITERS = 3
QUIET_S = 60.0  # a bounded wait for a writer to reach its next operation (not a timing)
EXAMPLES = int(os.environ.get("OLYMPIA_DTXN_HISTORY_EXAMPLES", "25"))


@dataclass(frozen=True)
class Statement:
    """One statement: tables it creates (names used once in the run) and base tables it
    alters (its id as their ``by`` property)."""

    sid: str
    creates: tuple[str, ...]
    alters: tuple[str, ...]


@dataclass
class Txn:
    """What the machine knows of a transaction: what callers were told."""

    id: str
    instance: str
    beginning: int
    acked: list[Statement] = field(default_factory=list)
    unknown: list[Statement] = field(default_factory=list)
    refused: list[Statement] = field(default_factory=list)
    committed: int | None = None  # the version a commit reported
    aborted: bool = False  # an abort returned
    expired: bool = False  # expired out of band before any commit began
    commit_began: bool = False


@dataclass
class Writer:
    """A thread with a catalog object of its own, running one call at a time."""

    catalog: Catalog
    gate: Gate
    thread: threading.Thread | None = None
    outcome: str | None = None
    call: str = ""  # what it runs: statement, commit or abort
    after: Callable[[str], None] | None = None  # records the outcome in the model

    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


def classify(call: Callable[[], Any]) -> str:
    """``ok``, ``refused`` (a conflict, a closed, expired or missing transaction: nothing
    was done) or ``unknown`` (a crash or a storage error: it may have been done)."""
    try:
        call()
        return "ok"
    except Crashed:
        return "unknown"
    except (CommitConflict, NoSuchTransactionError, TransactionExpiredError):
        return "refused"
    except CatalogError as exc:  # being committed or aborted
        return "refused" if "transaction" in str(exc) else "unknown"
    except OlympiaError:
        return "unknown"


class TransactionHistory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="dtxn-history-")
        self.uri = os.path.join(self.root, "catalog")
        self.txns: dict[str, Txn] = {}
        self.writers: list[Writer] = []
        self.names = 0
        self.outside: list[tuple[int, str]] = []  # (version, base table) altered outside

    @initialize()
    def create(self) -> None:
        catalog = Catalog.create(self.uri, OPTIONS)
        catalog.create_namespace("s")
        for name in BASE:
            catalog.create_table("s", name, columns=COLS)
        self.direct = catalog
        for _ in range(WRITERS):
            self.writers.append(Writer(*gated_catalog(self.uri, gated=GATED)))

    # --- the machine's own moves ----------------------------------------------------------

    @precondition(lambda self: len(self.txns) < 4)
    @rule()
    def begin(self) -> None:
        txn_id = f"t{len(self.txns)}"
        dtx = self.direct.begin_transaction(txn_id)
        self.txns[txn_id] = Txn(txn_id, dtx.record.instance, dtx.record.beginning_version)

    @rule(table=st.sampled_from(BASE))
    def commit_outside(self, table: str) -> None:
        self.direct.alter_table("s", table, set_properties={"by": "outside"})
        self.outside.append((self.direct.version, table))

    @precondition(lambda self: self._expirable())
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        txn = data.draw(st.sampled_from(self._expirable()))
        path = dtxn_path(txn.id)
        record = pb.DistributedTransactionDef()
        record.ParseFromString(self.direct.storage.read(path))
        record.expire_at_millis = 1
        self.direct.storage.write(path, record.SerializeToString(deterministic=True))
        txn.expired = not txn.commit_began

    def _expirable(self) -> list[Txn]:
        """Recorded transactions no writer is committing (a commit that passed its check
        may land after an expiry: that race is the expiry job's grace period's)."""
        return [t for t in self.txns.values()
                if not t.commit_began and self.direct.storage.exists(dtxn_path(t.id))]

    # --- the writers' calls ---------------------------------------------------------------

    def _idle(self) -> list[int]:
        return [i for i, w in enumerate(self.writers) if not w.busy()] if self.txns else []

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def statement(self, data: st.DataObject) -> None:
        writer = data.draw(st.sampled_from(self._idle()))
        txn = self.txns[data.draw(st.sampled_from(sorted(self.txns)))]
        creates = tuple(self._name() for _ in range(data.draw(st.integers(0, 2))))
        alters = tuple(data.draw(st.lists(st.sampled_from(BASE), unique=True, max_size=2)))
        stmt = Statement(f"{txn.id}.{self.names}", creates, alters)

        def run(catalog: Catalog) -> None:
            with catalog.transaction(name=txn.id) as staged:
                for name in stmt.creates:
                    staged.create_table("s", name, columns=COLS)
                for name in stmt.alters:
                    staged.alter_table("s", name, set_properties={"by": stmt.sid})

        def after(outcome: str) -> None:
            {"ok": txn.acked, "refused": txn.refused,
             "unknown": txn.unknown}[outcome].append(stmt)

        self._start(writer, "statement", run, after)

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        writer = data.draw(st.sampled_from(self._idle()))
        txn = self.txns[data.draw(st.sampled_from(sorted(self.txns)))]
        txn.commit_began = True
        landed: list[int] = []

        def after(outcome: str) -> None:
            if outcome == "ok":
                assert txn.committed in (None, landed[0]), "two versions reported"
                txn.committed = landed[0]

        self._start(writer, "commit", lambda c: landed.append(
            c.distributed_transaction(txn.id).commit()), after)

    @precondition(lambda self: self._idle())
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        writer = data.draw(st.sampled_from(self._idle()))
        txn = self.txns[data.draw(st.sampled_from(sorted(self.txns)))]

        def after(outcome: str) -> None:
            txn.aborted = txn.aborted or outcome == "ok"

        self._start(writer, "abort", lambda c: c.distributed_transaction(txn.id).abort(),
                    after)

    def _name(self) -> str:
        self.names += 1
        return f"n{self.names}"

    def _start(self, index: int, what: str, call: Callable[[Catalog], None],
               after: Callable[[str], None]) -> None:
        writer = self.writers[index]
        if writer.gate.crashed:  # the crashed process is restarted: a new catalog object
            writer.catalog, writer.gate = gated_catalog(self.uri, gated=GATED)
        catalog = writer.catalog
        writer.outcome, writer.call, writer.after = None, what, after

        def run() -> None:
            writer.outcome = classify(lambda: call(catalog))

        writer.thread = threading.Thread(target=run, daemon=True)
        writer.thread.start()
        self._quiet(index)

    def _quiet(self, index: int) -> None:
        """Wait until the writer's call has ended or waits at its gate (bounded)."""
        writer = self.writers[index]
        deadline = time.monotonic() + QUIET_S
        while writer.busy() and writer.gate.pending is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"writer {index} neither finished nor waited:\n"
                                     f"{_stack(writer.thread)}")
            time.sleep(0.0002)
        if not writer.busy() and writer.after is not None:
            assert writer.outcome is not None
            event(f"{writer.call}: {writer.outcome}")
            writer.after(writer.outcome)
            writer.after = None

    def _pending(self) -> list[int]:
        return [i for i, w in enumerate(self.writers) if w.busy() and w.gate.pending]

    @precondition(lambda self: self._pending())
    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(self._pending()))
        self.writers[index].gate.decide(data.draw(st.sampled_from(DECISIONS)))
        self._quiet(index)

    # --- the end ---------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            if self.writers:
                self._drain()
                self._finish()
                self._check()
        finally:
            for writer in self.writers:
                writer.catalog.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def _drain(self) -> None:
        while self._pending():
            for index in self._pending():
                self.writers[index].gate.decide("go")
                self._quiet(index)
        for writer in self.writers:
            assert not writer.busy()

    def _finish(self) -> None:
        """Every recorded transaction can be finished: an open or sealed one committed
        (or, expired, left to the expiry job), an aborting one aborted."""
        for txn in self.txns.values():
            if not self.direct.storage.exists(dtxn_path(txn.id)):
                continue
            dtx = self.direct.distributed_transaction(txn.id)
            if dtx.record.state == pb.ABORTING:
                dtx.abort()
                continue
            txn.commit_began = txn.commit_began or dtx.record.state == pb.COMMITTING
            try:
                version = dtx.commit()
            except (CommitConflict, TransactionExpiredError):
                continue
            assert txn.committed in (None, version), "two versions reported"
            txn.committed = version

    def _check(self) -> None:
        reader = Catalog.open(self.uri, OPTIONS)
        history = [Snapshot(reader.files, reader.files.read_root(v))
                   for v in range(reader.version + 1)]
        carried: dict[str, list[int]] = {}
        created_in: dict[str, int] = {}
        for snap in history:
            btree.validate(snap.nodes, snap.root.node, snap.catalog_def.order)
            if snap.namespace_exists("s"):  # every definition reads back
                for name in snap.list_tables("s"):
                    snap.load_table("s", name)
            for action in snap.actions():
                if action.type == A.TRANSACTION_INFO and TRANSACTION_INSTANCE in action.info:
                    carried.setdefault(action.info[TRANSACTION_INSTANCE], []).append(
                        snap.version)
                if action.type == A.TABLE_CREATE:
                    created_in[action.object.name] = snap.version
        for txn in self.txns.values():
            landed = carried.get(txn.instance, [])
            event(f"transaction: {'landed' if landed else 'not landed'}")
            assert len(landed) <= 1, f"{txn.id} landed in versions {landed}"
            if txn.committed is not None and not landed:  # nothing to land: no version
                assert txn.committed == txn.beginning, (txn.id, txn.committed)
                assert not any(st.creates or st.alters for st in txn.acked), txn.id
            elif txn.committed is not None:
                assert landed == [txn.committed], (txn.id, landed, txn.committed)
            if txn.aborted or txn.expired:
                assert not landed, f"{txn.id} landed after it was aborted or expired"
            if not landed:
                for stmt in txn.acked + txn.unknown + txn.refused:
                    assert not any(n in created_in for n in stmt.creates), stmt
                continue
            version = landed[0]
            for stmt in txn.acked:
                assert all(created_in.get(n) == version for n in stmt.creates), stmt
            for stmt in txn.refused:
                assert not any(n in created_in for n in stmt.creates), stmt
            for stmt in txn.unknown:
                found = {created_in.get(n) for n in stmt.creates}
                assert found <= {version} or found == {None}, stmt
                assert len(found) <= 1, f"statement {stmt.sid} landed in part"
            self._no_lost_update(txn, version, history)

    @staticmethod
    def _no_lost_update(txn: Txn, version: int, history: list[Snapshot]) -> None:
        """What the transaction's version changed was changed by no version between its
        beginning and it."""
        ours = _touched(history[version])
        for between in history[txn.beginning + 1:version]:
            clash = ours & _touched(between)
            assert not clash, f"{txn.id} (version {version}) lost an update of {clash}"


def _touched(snap: Snapshot) -> set[str]:
    return {a.object.name for a in snap.actions() if a.type != A.TRANSACTION_INFO}


def _stack(thread: threading.Thread | None) -> str:
    frames = sys._current_frames()
    if thread is None or thread.ident not in frames:
        return ""
    return "".join(traceback.format_stack(frames[thread.ident]))


TransactionHistory.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestTransactionHistory = TransactionHistory.TestCase
