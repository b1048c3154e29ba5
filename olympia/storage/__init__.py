"""Storage: the files of one catalog prefix on local disk, in memory, or on S3 (fsspec/s3fs).

Every path given to :class:`Storage` is relative to the catalog prefix (``vn/latest``,
``node/<uuid>.arrow``). The one operation that makes commits safe is
:meth:`Storage.create_exclusive`: atomic (no reader ever sees a partial file) and exclusive
(of N racing writers exactly one wins; the others get :class:`FileAlreadyExists`).

The package: :mod:`olympia.storage.backends` (the backends and the scheme table),
:mod:`olympia.storage.retry` (settings and failure classification), and here the
:class:`Storage` facade every layer above uses.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit

from olympia.exceptions import (
    FileAlreadyExists,
    FileNotFound,
    PartialDeleteError,
    StorageError,
    TransientStorageError,
)
from olympia.storage.backends import (
    SCHEMES,
    Backend,
    FileInfo,
    FsspecBackend,
    LocalBackend,
    MemoryBackend,
    StagedFile,
)
from olympia.storage.host import HostTurns, default_base
from olympia.storage.retry import (
    DEFAULT_CONCURRENCY,
    StorageSettings,
    _not_deleted,
    classify,
)

__all__ = [
    "DEFAULT_CONCURRENCY", "SCHEMES", "Backend", "FileInfo", "FsspecBackend", "LocalBackend",
    "MemoryBackend", "StagedFile", "Storage", "StorageSettings", "StorageStats", "classify",
]

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class StorageStats:
    """Counts of storage operations; stable where timings are not (used by benchmarks).

    Every operation issued counts, whatever its outcome: a read of an absent file is a
    round trip too. ``misses`` counts the reads that found no file, ``failures`` the
    operations that ended in any other error (after retries), ``retries`` the tries made
    again after a transient failure, ``host_reads`` the reads answered by this host's
    copies (:meth:`Storage.hold_turn`), which are no round trip and not in ``reads``.
    """

    reads: int = 0
    writes: int = 0
    exists: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    misses: int = 0
    failures: int = 0
    retries: int = 0
    host_reads: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def reset(self) -> None:
        with self._lock:
            for f in fields(self):
                if not f.name.startswith("_"):
                    setattr(self, f.name, 0)


class Storage:
    """The files of one catalog, addressed by paths relative to its prefix."""

    def __init__(self, uri: str, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = dict(options or {})
        options = dict(self.options)
        self.settings = StorageSettings.pop(options)
        self.concurrency = self.settings.max_concurrency
        self.uri = uri.rstrip("/")
        self.stats = StorageStats()
        parts = urlsplit(uri)
        scheme = parts.scheme if len(parts.scheme) > 1 else ""  # "C:" is not a scheme
        opener = SCHEMES.get(scheme)
        if opener is None:
            raise StorageError(
                f"unsupported storage scheme {scheme!r} (use a local path, file://, memory:// "
                "or s3://)", uri)
        self.backend: Backend
        self.root, self.backend, canonical = opener(uri, options, self.settings)
        self.uri = canonical or self.uri
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0  # a pool's threads do not survive fork(): one pool per process
        self._hosts: dict[str, HostTurns] = {}  # catalog id -> its turn on this host
        self._scope = ""  # the catalog id of the host turn taken last
        self._host_base = (self.settings.host_dir or default_base()) if (
            self.backend.remote and self.settings.host_turns) else None
        self._folders: dict[str, HostTurns] = {}  # catalog id -> its host folder (local disk)

    def __repr__(self) -> str:
        return f"Storage({self.uri!r})"

    def same_place(self, other: Storage) -> bool:
        """Whether ``other`` addresses the same files (same store, same prefix), however
        its URI and options are spelled."""
        return bool(self.backend.place(self.root) == other.backend.place(other.root))

    def full(self, path: str) -> str:
        """The backend path of a catalog-relative path."""
        return self.root + path.lstrip("/")

    def display(self, path: str) -> str:
        """A user-facing name for a file: the catalog URI joined with the relative path."""
        return f"{self.uri}/{path.lstrip('/')}"

    # --- single-file operations ---------------------------------------------------

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T:
        """Run one storage operation: a transient failure is tried again (at most
        ``retry_attempts`` tries, with backoff) and then raised as TransientStorageError;
        anything else is raised at once as its StorageError subclass."""
        attempts = self.settings.retry_attempts
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as exc:
                kind = classify(exc)
                if kind is TransientStorageError and attempt + 1 < attempts:
                    self.stats.add(retries=1)
                    time.sleep(self.settings.pause(attempt))
                    continue
                if kind is FileNotFound:
                    self.stats.add(misses=1)
                    raise FileNotFound("file not found", self.display(path)) from None
                self.stats.add(failures=1)
                if isinstance(exc, StorageError):
                    raise
                if kind is FileAlreadyExists:
                    raise FileAlreadyExists("file already exists", self.display(path)) from None
                tries = f" after {attempts} tries" if kind is TransientStorageError else ""
                raise kind(f"{op} failed{tries} ({exc})", self.display(path)) from exc
        raise AssertionError("unreachable")

    def read(self, path: str) -> bytes:
        host = self._copies()
        if host is not None:
            data = host.get(path)
            if data is not None:
                self.stats.add(host_reads=1)
                return data
        self.stats.add(reads=1)
        data = self._call("read", path, lambda: self.backend.read(self.full(path)))
        self.stats.add(bytes_read=len(data))
        return data

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        """Write (or replace) a file; readers see the old or the new content, never a mix.
        ``durable=False`` (for hints, which readers check) skips syncing it to disk."""
        self.stats.add(writes=1, bytes_written=len(data))
        self._call("write", path, lambda: self.backend.write(self.full(path), data, durable))

    def create_exclusive(self, path: str, data: bytes) -> None:
        """Create a file only if it does not exist; raise FileAlreadyExists otherwise.

        A try that failed transiently may still have created the file: when the next try
        (or, after the last, a read) finds the file holding ``data``, the create succeeded.
        """
        full = self.full(path)
        self.stats.add(writes=1, bytes_written=len(data))
        self._exclusive(path, data, lambda: self.backend.create_exclusive(full, data))

    def publish(self, files: Mapping[str, bytes], path: str, data: bytes,
                written: Callable[[], None] | None = None) -> None:
        """Write ``files``, then create ``path`` holding ``data`` only if it does not exist
        (as :meth:`create_exclusive`): a reader never finds ``path`` without all of
        ``files``. Where the backend can stage content ahead of its name (local disk), every
        file is written unnamed, then, in the writers' turn to name files in ``path``'s
        folder, all are written back, then synced and named, ``path`` last: one thread
        does it all, and the syncs after the first find little left to flush. A writer
        whose turn comes after another took ``path`` discards its staged files unsynced.

        Args:
            files: Relative path -> content of the files ``path`` refers to.
            path: The file created last, exclusively.
            data: Its content.
            written: Called once every file of ``files`` is in place, before ``path`` is
                created: a race lost before that leaves none of them written.

        Raises:
            FileAlreadyExists: ``path`` exists.
        """
        names = [*files, path]
        staged = self._stage(names) if files else None
        if staged is None:
            self.write_many(files)
            if written is not None:
                written()
            self.create_exclusive(path, data)
            host = self._held_host()
            if host is not None:
                host.put({**files, path: data})
            return
        contents = [*files.values(), data]
        try:
            for name, content, one in zip(names, contents, staged, strict=True):
                self._call("write", name, partial(one.fill, content))
            with staged[-1].turn() as free:
                if not free:
                    raise FileAlreadyExists("file already exists", self.display(path))
                self.stats.add(writes=len(names), bytes_written=sum(map(len, contents)))
                for name, one in zip(names, staged, strict=True):
                    self._call("write", name, one.write_back)
                for name, one in zip(names, staged, strict=True):
                    self._call("write", name, one.sync)
                for name, content, one in zip(
                        names[:-1], contents[:-1], staged[:-1], strict=True):
                    if not self._link(name, one):
                        self._call("write", name,
                                   partial(self.backend.write, self.full(name), content, True))
                if written is not None:
                    written()
                if self._exclusive(path, data, staged[-1].link) is False:
                    # the store refused to name staged content: create the file whole
                    self._exclusive(path, data, partial(
                        self.backend.create_exclusive, self.full(path), data))
        finally:
            for one in staged:
                one.close()

    def hold_turn(self, path: str, scope: str = "", wait: bool = True,
                  ) -> contextlib.AbstractContextManager[bool]:
        """Hold the writers' turn to name files in ``path``'s folder for the whole block.

        On local disk other writers' :meth:`publish` there waits for it, while this
        thread's publishes use it; without ``wait`` it is only taken if free at once. On
        remote storage (with the ``host_turns`` setting) it
        is the host turn of ``scope`` (a catalog's id; see :mod:`olympia.storage.host`):
        the writers of this host take turns, and while this thread holds it, what it
        publishes is copied to this host, and what holders published before is read from
        there (:meth:`read`, :meth:`known_to_exist`) without a request. Yields whether it
        is held (False on storage without turns, or when the wait for a stalled holder ran
        out: the exclusive create still decides races)."""
        if self._host_base is None:
            return self.backend.hold_turn(self.full(path), wait)
        return self._host(scope).hold(wait)

    def _host(self, scope: str) -> HostTurns:
        """The host turn of the catalog ``scope`` (remote storage, ``host_turns`` on)."""
        assert self._host_base is not None
        host = self._hosts.get(scope)
        if host is None:
            key = repr((self.backend.place(self.root), scope))
            host = self._hosts.setdefault(scope, HostTurns(self._host_base, key))
        self._scope = scope
        return host

    def await_turn(self, path: str, letters: HostTurns,
                   ) -> contextlib.AbstractContextManager[bool]:
        """:meth:`hold_turn` for a writer that left a letter in ``letters``, waiting in the
        kernel (at most 2 s; see :class:`olympia.storage.host.HostTurns`) with the urgent
        lock of their folder: on remote storage the host turn itself, on local disk the
        turn of ``path``'s folder."""
        if self._host_base is not None:
            return letters.hold()
        return letters.hold_local(self.full(path))

    def host_folder(self, scope: str) -> HostTurns | None:
        """This host's folder for the catalog ``scope`` (its id), with the ``host_turns``
        setting on: where writers note the versions they land, so their neighbours catch
        up without parsing every root (:meth:`HostTurns.note`), and where coalescing
        writers leave changes for the writer holding the turn to land with its own
        (:func:`olympia.catalog.commit.commit` with ``coalesce``). On remote storage it is
        the host turn's folder; on local disk, a folder under ``host_dir`` too; None
        elsewhere (memory)."""
        if self._host_base is not None:
            return self._host(scope)
        if not self.backend.shared_turns or not self.settings.host_turns:
            return None
        folder = self._folders.get(scope)
        if folder is None:
            key = repr((self.backend.place(self.root), scope))
            folder = self._folders.setdefault(scope, HostTurns(
                self.settings.host_dir or default_base(), key))
        return folder

    @property
    def remote(self) -> bool:
        """Whether every file operation is a request (object stores), so a look at a file
        is never free."""
        return self.backend.remote

    @property
    def host_turns(self) -> bool:
        """Whether writers take host turns here (remote storage, ``host_turns`` on)."""
        return self._host_base is not None

    def _held_host(self) -> HostTurns | None:
        """The host turn a thread of this process holds on this storage, if any."""
        for host in list(self._hosts.values()):
            if host.held():
                return host
        return None

    def _copies(self) -> HostTurns | None:
        """Where this host keeps copies of the catalog's landed files (once this process
        took its host turn; a catalog's files are immutable once created, so a copy reads
        as the store would, like a cached file: readers look at vn/oldest before reading an
        old version)."""
        return self._held_host() or self._hosts.get(self._scope)

    def _stage(self, paths: builtins.list[str]) -> builtins.list[StagedFile] | None:
        """A staged file for each path, or None where the backend stages none."""
        staged: builtins.list[StagedFile] = []
        try:
            for path in paths:
                one = self._call("write", path, partial(self.backend.stage, self.full(path)))
                if one is None:
                    break
                staged.append(one)
        except BaseException:
            for one in staged:
                one.close()
            raise
        if len(staged) == len(paths):
            return staged
        for one in staged:
            one.close()
        return None

    def _link(self, path: str, staged: StagedFile) -> bool:
        """Name a staged file that :meth:`write` would replace: False where it exists
        already or the store refused (the caller writes it whole)."""
        try:
            return bool(self._call("write", path, staged.link))
        except FileAlreadyExists:
            return False

    def _exclusive(self, path: str, data: bytes, create: Callable[[], R]) -> R | None:
        """Run ``create`` (an exclusive create of ``path`` holding ``data``) with retries; a
        try after a transient failure that finds ``path`` holding ``data`` succeeded (None)."""
        tried = False  # a try after a (transient) failure: our first one may have landed

        def once() -> R | None:
            nonlocal tried
            try:
                return create()
            except Exception as exc:
                if tried and classify(exc) is FileAlreadyExists and (
                        self._read_or_none(path) == data):
                    return None
                raise
            finally:
                tried = True

        try:
            return self._call("exclusive create", path, once)
        except TransientStorageError:
            with contextlib.suppress(StorageError):  # the last try may have landed too
                if self._read_or_none(path) == data:
                    return None
            raise

    def _read_or_none(self, path: str) -> bytes | None:
        try:
            return self.read(path)
        except FileNotFound:
            return None

    def known_to_exist(self, path: str) -> bool:
        """Whether the file exists, where telling costs no request (local disk, memory; no
        operation is counted). On a remote store only a file that holders of the host turn
        published is known (:meth:`hold_turn`); False otherwise."""
        if self.backend.remote:
            host = self._copies()
            return host is not None and host.has(path)
        return self.backend.exists(self.full(path))

    def probe(self, path: str) -> bool:
        """Whether the file exists: :meth:`known_to_exist` where that says so on a remote
        store, else :meth:`exists` (one request there)."""
        return (self.backend.remote and self.known_to_exist(path)) or self.exists(path)

    def exists(self, path: str) -> bool:
        self.stats.add(exists=1)
        return self._call("exists", path, lambda: self.backend.exists(self.full(path)))

    def list(self, prefix: str = "") -> builtins.list[FileInfo]:
        """Every file whose relative path starts with ``prefix``, sorted by path."""
        self.stats.add(lists=1)
        found = self._call("list", prefix, lambda: self.backend.list(self.full(prefix)))
        cut = len(self.root)
        return sorted(
            (FileInfo(f.path[cut:], f.size, f.modified) for f in found), key=lambda f: f.path
        )

    def delete(self, path: str) -> None:
        """Delete a file; a missing file counts as deleted."""
        self.stats.add(deletes=1)
        self._call("delete", path, lambda: self.backend.delete(self.full(path)))

    # --- batched operations ---------------------------------------------------------

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> builtins.list[R]:
        """Run ``fn`` over ``items`` with bounded concurrency, results in input order.

        Raises:
            Exception: the first failure (in input order), once the calls that had not
                started are cancelled and those that had have finished: nothing runs on
                after map returns or raises.
        """
        items = builtins.list(items)
        if len(items) <= 1:
            return [fn(i) for i in items]
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="olympia-io")
            self._pool_pid = os.getpid()
        futures: builtins.list[Future[R]] = [self._pool.submit(fn, i) for i in items]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:  # also when this thread is interrupted
            for future in futures:
                future.cancel()
            wait(futures)
        for future in futures:
            if not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        return [future.result() for future in futures]

    def map_reads(self, fn: Callable[[T], R], items: Iterable[T]) -> builtins.list[R]:
        """:meth:`map` for a batch of reads (and what parsing they need): on a store that is
        not remote, run on the calling thread, where handing each to a thread would cost
        more than the read."""
        if self.backend.remote:
            return self.map(fn, items)
        return [fn(item) for item in items]

    def read_many(self, paths: Iterable[str]) -> builtins.list[bytes]:
        return self.map_reads(self.read, paths)

    def write_many(self, files: Mapping[str, bytes]) -> None:
        self.map(lambda item: self.write(*item), files.items())

    def delete_many(self, paths: Iterable[str], batch: int = 1000) -> None:
        """Delete files in requests of up to ``batch``; a missing file counts as deleted.
        Files the storage reports it did not delete raise :class:`PartialDeleteError`
        naming each (after the other requests finished)."""
        paths = builtins.list(paths)
        chunks = [paths[i : i + batch] for i in range(0, len(paths), batch)]

        def run(chunk: builtins.list[str]) -> dict[str, str]:
            self.stats.add(deletes=len(chunk))
            full = [self.full(p) for p in chunk]
            return self._call("delete", chunk[0], lambda: self.backend.delete_many(full))

        cut = len(self.root)
        left = {path[cut:]: why for failed in self.map(run, chunks) for path, why in failed.items()}
        if left:
            self.stats.add(failures=len(left))
            raise PartialDeleteError({
                path: _not_deleted(why)(f"delete failed ({why})", self.display(path))
                for path, why in sorted(left.items())})

    def close(self) -> None:
        if self._pool is not None and self._pool_pid == os.getpid():
            self._pool.shutdown(wait=False)
            self._pool = None
