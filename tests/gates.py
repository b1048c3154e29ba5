"""A storage backend whose operations wait for a test's decision (the state machines of
tests/test_commit_history.py and tests/test_dtxn_history.py): the test chooses the
interleaving of writers one storage operation at a time, and for each operation whether it
runs, fails transiently, runs and then loses its answer, or crashes its writer there."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st

from olympia import Catalog
from olympia.storage import Backend, FileInfo
from olympia.storage.backends import Job, RunAll, run_in_turn

T = TypeVar("T")
R = TypeVar("R")
OPTIONS = {"fsync": False, "retry_attempts": 2, "retry_backoff": 0}
#: OPTIONS without those gs:// and abfs:// refuse: fsync (an object store has no file to
#: sync; an object is durable once its write is answered)
CLOUD_OPTIONS = {k: v for k, v in OPTIONS.items() if k != "fsync"}


class Crashed(BaseException):
    """The writer's process died at this storage operation (injected)."""


class Interrupted(Exception):
    """An exception delivered to a caller (a task runner's timeout)."""


class Gate(Backend):
    """A real backend whose every operation waits for the machine's decision, except the
    operations of the machine's own thread (a transaction beginning and staging) and, in
    the writer process, those made while the gate is open (the same)."""

    def __init__(self, inner: Backend, ask: Callable[[str], str] | None = None,
                 gated: Container[str] | None = None) -> None:
        self.inner = inner
        self.gated = gated  # the operations that wait (None: every one)
        self.remote = inner.remote
        self.open = True  # a process's gate: closed while committing
        self.crashed = False
        self._ask = ask  # a process's gate asks its parent; a thread's waits here
        self._machine = threading.get_ident()
        self._cond = threading.Condition()
        self.pending: str | None = None
        self.waiter: int | None = None  # the thread whose operation is pending
        self._decision: str | None = None

    def _decide(self, name: str, path: str) -> str:
        """The machine's decision on an operation ("go" where it does not wait); a crash
        is raised here."""
        decision = "go"
        if self.crashed:
            raise Crashed()
        if self._ask is not None and not self.open:
            decision = self._ask(f"{name} {path}")
        elif (self._ask is None and threading.get_ident() != self._machine
              and (self.gated is None or name in self.gated)):
            decision = self._await(name, path)
        if decision == "crash":
            self.crashed = True
            raise Crashed()
        return decision

    def _op(self, name: str, path: str, run: Callable[[], T], creates: bool = False) -> T:
        decision = self._decide(name, path)
        if decision == "fail":
            raise TimeoutError("injected: the store did not answer")
        result = run()
        if decision == "lost-ack" and creates:
            raise TimeoutError("injected: the answer to a write that succeeded was lost")
        return result

    def _await(self, name: str, path: str) -> str:
        with self._cond:
            self.pending, self.waiter = f"{name} {path}", threading.get_ident()
            while self._decision is None:
                self._cond.wait()
            decision, self._decision = self._decision, None
            return decision

    def pause(self, _seconds: float) -> None:
        """A commit's pause after a lost race (its ``sleep``): the machine may restore
        the prefix before letting it end; "fail" interrupts the writer there (an
        exception, as a task timeout raises), "crash" kills it."""
        self._op("pause", "", lambda: None)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> builtins.list[R]:
        """The storage's ``map`` (a batch of concurrent operations, as a remote store's
        reads are): run on the writer's thread one at a time, in an order the machine
        decides (``order <n>`` pending; "go" keeps the given order, else the decision is
        :func:`order_decision`'s), since a store may answer them in any order. The first
        failure is raised and the rest never start, as ``Storage.map`` cancels them."""
        items = builtins.list(items)
        order = builtins.list(range(len(items)))
        if len(items) > 1:
            decision = self._decide("order", str(len(items)))
            if decision != "go":
                order = [int(i) for i in decision.split(",")]
        results: dict[int, R] = {}
        for i in order:
            results[i] = fn(items[i])
        return [results[i] for i in range(len(items))]

    def decide(self, decision: str) -> None:
        """Let the pending operation go with ``decision`` (the machine's side)."""
        with self._cond:
            assert self.pending is not None and self._decision is None
            self.pending, self._decision = None, decision
            self._cond.notify_all()

    def read(self, path: str) -> bytes:
        return self._op("read", path, lambda: self.inner.read(path))

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        return self._op("read", path, lambda: self.inner.read_if_changed(path, tag))

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self._op("write", path, lambda: self.inner.write(path, data, durable), creates=True)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self._op("create", path, lambda: self.inner.create_exclusive(path, data), creates=True)

    def publish(self, files: Mapping[str, bytes], path: str, data: bytes,
                run_all: RunAll = run_in_turn, present: Sequence[str] = (),
                unchanged: Mapping[str, str] | None = None, alongside: Sequence[Job] = (),
                ) -> None:
        """The contract's publish with its writes and checks in turn: the machine decides
        one operation of a writer at a time."""
        super().publish(files, path, data, run_in_turn, present, unchanged, alongside)

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        self._op("replace", path, lambda: self.inner.replace(path, data, expected),
                 creates=True)

    def exists(self, path: str) -> bool:
        return self._op("exists", path, lambda: self.inner.exists(path))

    def list(self, prefix: str) -> list[FileInfo]:
        return self._op("list", prefix, lambda: self.inner.list(prefix))

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        return self._op("delete", ",".join(paths), lambda: self.inner.delete_many(paths))

    def place(self, root: str) -> Any:
        return self.inner.place(root)


def order_decision(size: int) -> st.SearchStrategy[str]:
    """The machine's decision for an ``order <size>`` pending: an order of the batch."""
    return st.permutations(range(size)).map(lambda order: ",".join(map(str, order)))


def gated_catalog(uri: str, coalesce: bool = False,
                  ask: Callable[[str], str] | None = None,
                  gated: Container[str] | None = None,
                  options: Mapping[str, Any] = OPTIONS) -> tuple[Catalog, Gate]:
    """A catalog object on ``uri`` (with storage ``options``) whose storage operations
    (those named in ``gated``; default all) and pauses after lost races wait at a
    :class:`Gate`."""
    catalog = Catalog.open(uri, options, commit_timeout=3600, coalesce_commits=coalesce)
    gate = Gate(catalog.storage.backend, ask, gated)
    catalog.commit_options = type(catalog.commit_options)(
        timeout_s=3600, sleep=gate.pause, jitter=lambda bound: 0.0, coalesce=coalesce)
    catalog.storage.backend = gate
    if gated is None:  # every operation waits: so does a batch's order (Gate.map)
        catalog.storage.map = gate.map  # type: ignore[method-assign]
    return catalog, gate


