"""A storage backend whose operations wait for a test's decision (the state machines of
tests/test_commit_history.py and tests/test_dtxn_history.py): the test chooses the
interleaving of writers one storage operation at a time, and for each operation whether it
runs, fails transiently, runs and then loses its answer, or crashes its writer there."""

from __future__ import annotations

import threading
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any, TypeVar

from olympia import Catalog
from olympia.storage import Backend, FileInfo
from olympia.storage.backends import RunAll, run_in_turn

T = TypeVar("T")
OPTIONS = {"fsync": False, "retry_attempts": 2, "retry_backoff": 0}


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

    def _op(self, name: str, path: str, run: Callable[[], T], creates: bool = False) -> T:
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
                run_all: RunAll = run_in_turn, present: Sequence[str] = ()) -> None:
        """The contract's publish with its writes and checks in turn: the machine decides
        one operation of a writer at a time."""
        super().publish(files, path, data, run_in_turn, present)

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


def gated_catalog(uri: str, coalesce: bool = False,
                  ask: Callable[[str], str] | None = None,
                  gated: Container[str] | None = None) -> tuple[Catalog, Gate]:
    """A catalog object whose storage operations (those named in ``gated``; default all)
    and pauses after lost races wait at a :class:`Gate`."""
    catalog = Catalog.open(uri, OPTIONS, commit_timeout=3600, coalesce_commits=coalesce)
    gate = Gate(catalog.storage.backend, ask, gated)
    catalog.commit_options = type(catalog.commit_options)(
        timeout_s=3600, sleep=gate.pause, jitter=lambda bound: 0.0, coalesce=coalesce)
    catalog.storage.backend = gate
    return catalog, gate


