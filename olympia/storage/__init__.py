"""Storage: the files of one catalog prefix on local disk, in memory, on S3, Google Cloud
Storage or Azure Blob Storage.

Every path given to :class:`Storage` is relative to the catalog prefix (``vn/latest``,
``node/<uuid>.arrow``), and nothing is ever written outside it. The one operation that
makes commits safe is :meth:`Storage.create_exclusive` (and :meth:`Storage.publish`, which
ends with one): atomic (no reader ever sees a partial file) and exclusive (of N racing
writers exactly one wins; the others get :class:`FileAlreadyExists`).

The package: :mod:`olympia.storage.backends` (the backend contract),
:mod:`olympia.storage.schemes` (the scheme table) and one module per scheme
(:mod:`~olympia.storage.file`, :mod:`~olympia.storage.memory`, :mod:`~olympia.storage.s3`,
:mod:`~olympia.storage.gs`, :mod:`~olympia.storage.abfs`), :mod:`olympia.storage.retry`
(settings and failure classification), :mod:`olympia.storage.stats` (operation counts),
and here the :class:`Storage` facade every layer above uses.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar
from urllib.parse import urlsplit

from olympia.exceptions import (
    FileAlreadyExists,
    FileChanged,
    FileNotFound,
    PartialDeleteError,
    StorageError,
    TransientStorageError,
)
from olympia.storage.backends import Backend, FileInfo
from olympia.storage.file import LocalBackend
from olympia.storage.memory import MemoryBackend
from olympia.storage.retry import (
    DEFAULT_CONCURRENCY,
    StorageSettings,
    _not_deleted,
    classify,
)
from olympia.storage.schemes import SCHEMES, scheme_of, supported
from olympia.storage.stats import StorageStats

__all__ = [
    "DEFAULT_CONCURRENCY", "SCHEMES", "Backend", "FileInfo", "LocalBackend", "MemoryBackend",
    "Storage", "StorageSettings", "StorageStats", "classify",
]

T = TypeVar("T")
R = TypeVar("R")


class Storage:
    """The files of one catalog, addressed by paths relative to its prefix."""

    def __init__(self, uri: str, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = dict(options or {})
        options = dict(self.options)
        self.settings = StorageSettings.pop(options)
        self.concurrency = self.settings.max_concurrency
        self.uri = uri.rstrip("/")
        self.stats = StorageStats()
        scheme = scheme_of(uri)
        if scheme is None:
            raise StorageError(f"unsupported storage scheme {urlsplit(uri).scheme!r} (use "
                               f"{supported()})", uri)
        self.backend: Backend
        self.root, self.backend, canonical = scheme.profile.open_backend(uri, options,
                                                                          self.settings)
        self.uri = canonical or self.uri
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0  # a pool's threads do not survive fork(): one pool per process

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
                if kind is FileNotFound:  # the file the backend names, if it is ours
                    self.stats.add(misses=1)
                    name = getattr(exc, "filename", None)
                    if isinstance(name, str) and name.startswith(self.root):
                        path = name[len(self.root):]
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
        self.stats.add(reads=1)
        data = self._call("read", path, lambda: self.backend.read(self.full(path)))
        self.stats.add(bytes_read=len(data))
        return data

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """The file's content and a tag of it, or ``(None, tag)`` when it still has the
        content ``tag`` came with (``""``: read it in any case): one conditional request
        (S3 and Azure: a GET with If-None-Match on the ETag; Google Cloud Storage: on the
        generation; local disk: a ``stat``), counted as a
        read whose bytes count only when it sends them.

        Raises:
            FileNotFound: There is no such file.
        """
        self.stats.add(reads=1)
        data, tag = self._call("read", path,
                               lambda: self.backend.read_if_changed(self.full(path), tag))
        if data is not None:
            self.stats.add(bytes_read=len(data))
        return data, tag

    def tag(self, path: str) -> str:
        """The tag :meth:`read_if_changed` would give the file's content now, where telling
        costs no request (local disk: a ``stat``); ``""`` where it would."""
        return self.backend.tag(self.full(path))

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

    def replace(self, path: str, data: bytes, expected: bytes) -> bool:
        """Replace the file's content with ``data`` only if it holds ``expected``
        (compare-and-swap; ``data`` must differ from every content the file held before).

        Returns:
            True if this call replaced it; False if the file holds something else or is
            gone (another writer was first). A try that failed transiently may still have
            replaced it: a later try, or a read after the last, that finds ``data`` there
            counts as ours.

        Raises:
            TransientStorageError: The store kept failing, and the outcome could not be
                learned by reading the file.
        """
        self.stats.add(writes=1, bytes_written=len(data))
        full = self.full(path)
        tried = False

        def once() -> bool:
            nonlocal tried
            try:
                self.backend.replace(full, data, expected)
            except (FileExistsError, FileNotFoundError):
                return tried and self._read_or_none(path) == data
            except Exception as exc:
                if classify(exc) in (FileAlreadyExists, FileNotFound):
                    return tried and self._read_or_none(path) == data
                raise
            finally:
                tried = True
            return True

        try:
            return self._call("replace", path, once)
        except TransientStorageError:
            with contextlib.suppress(StorageError):  # the last try may have landed
                if self._read_or_none(path) == data:
                    return True
            raise

    def publish(self, files: Mapping[str, bytes], path: str, data: bytes,
                present: Iterable[str] = (), unchanged: Mapping[str, str] | None = None,
                alongside: Sequence[Callable[[], object]] = ()) -> None:
        """Write ``files``, then create ``path`` holding ``data`` only if it does not exist
        (as :meth:`create_exclusive`, with its retries): a reader never finds ``path``
        without all of ``files`` (:meth:`Backend.publish`, which may write them
        concurrently through :meth:`map_requests`) and of ``present``, whose existence is
        checked in the same batch as the writes (no round trip of its own; on a remote
        store one request each, counted in ``exists``); nor once a file of ``unchanged``,
        read in that batch too (counted in ``reads``), no longer holds what it held; nor
        once a call of ``alongside``, run in that batch too, failed.

        Args:
            files: Relative path -> content of the files ``path`` refers to.
            path: The file created last, exclusively.
            data: Its content.
            present: Relative paths of files written earlier that ``path`` refers to too.
            unchanged: Relative path -> the SHA-256 (hex) of the content that file must
                still hold for ``path`` to be created.
            alongside: Writes of files outside this storage that ``files`` name (a
                table's metadata file), not counted here. A retry runs them again, so each
                must succeed when its own earlier call did. Each fails with a
                StorageError, raised as it is (a transient one is tried again), and never
                with FileNotFound or FileAlreadyExists: those tell of ``present`` and
                ``path``.

        Raises:
            FileNotFound: A file of ``present`` is missing (named); ``path`` was not
                created.
            FileChanged: A file of ``unchanged`` holds other content or is gone (named,
                with the digest of what it holds); ``path`` was not created.
            FileAlreadyExists: ``path`` exists; ``files`` were written.
            TransientStorageError: The store kept failing, and whether ``path`` was
                created by this call could not be learned by reading it.
        """
        full = {self.full(name): content for name, content in files.items()}
        checked = [self.full(name) for name in present]
        expected = {self.full(name): digest for name, digest in (unchanged or {}).items()}
        self.stats.add(writes=len(files) + 1, exists=len(checked) if self.remote else 0,
                       reads=len(expected),
                       bytes_written=sum(map(len, files.values())) + len(data))

        def create() -> None:
            try:
                self.backend.publish(full, self.full(path), data, self.map_requests, checked,
                                     expected, alongside)
            except FileChanged as exc:
                raise FileChanged("a file the new root builds on changed",
                                  self.display(exc.path[len(self.root):]), exc.digest) from None

        self._exclusive(path, data, create)

    def _exclusive(self, path: str, data: bytes, create: Callable[[], object]) -> None:
        """Run ``create`` (ending with an exclusive create of ``path`` holding ``data``)
        with retries. A try that failed transiently may have created ``path``: a later
        try that finds it, or a read after the last try, learns the outcome from the
        store (``path`` holding ``data`` is ours: the create succeeded).

        Raises:
            FileAlreadyExists: Another writer created ``path``.
            TransientStorageError: The outcome could not be learned.
        """
        tried = False  # a try after a (transient) failure: our first one may have landed

        def once() -> None:
            nonlocal tried
            try:
                create()
            except Exception as exc:
                if not (tried and classify(exc) is FileAlreadyExists
                        and self._read_or_none(path) == data):
                    raise
            finally:
                tried = True

        try:
            self._call("exclusive create", path, once)
        except TransientStorageError:
            with contextlib.suppress(StorageError):  # the last try may have landed too
                if self._read_or_none(path) == data:
                    return
            raise

    def _read_or_none(self, path: str) -> bytes | None:
        try:
            return self.read(path)
        except FileNotFound:
            return None

    @property
    def remote(self) -> bool:
        """Whether every file operation is a request (object stores), so a look at a file
        is never free."""
        return self.backend.remote

    def known_to_exist(self, path: str) -> bool:
        """Whether the file exists, where telling costs no request (local disk, memory; no
        operation is counted). Always False on a remote store, and where the look failed:
        it only saves work, and the exclusive create still decides."""
        if self.backend.remote:
            return False
        try:
            return self.backend.exists(self.full(path))
        except OSError:
            return False

    def probe(self, path: str) -> bool:
        """Whether the file exists: :meth:`known_to_exist` where that is free, else
        :meth:`exists` (one request)."""
        return self.known_to_exist(path) if not self.backend.remote else self.exists(path)

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
        self.delete_many([path])

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

    def map_requests(self, fn: Callable[[T], R], items: Iterable[T]) -> builtins.list[R]:
        """:meth:`map` for a batch of requests (and what parsing they need): on a store that
        is not remote, run on the calling thread, where handing each to a thread would cost
        more CPU than the request (a commit's writes and syncs too: run in parallel on
        local disk, they did not make a commit any shorter)."""
        if self.backend.remote:
            return self.map(fn, items)
        return [fn(item) for item in items]

    def read_many(self, paths: Iterable[str]) -> builtins.list[bytes]:
        return self.map_requests(self.read, paths)

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
