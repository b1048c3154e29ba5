"""Storage: the files of one catalog prefix on local disk, in memory, or on S3 (fsspec/s3fs).

Every path given to :class:`Storage` is relative to the catalog prefix (``vn/latest``,
``node/<uuid>.arrow``). The one operation that makes commits safe is
:meth:`Storage.create_exclusive`: atomic (no reader ever sees a partial file) and exclusive
(of N racing writers exactly one wins; the others get :class:`FileAlreadyExists`).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import random
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from olympia.exceptions import (
    FileAlreadyExists,
    FileNotFound,
    InvalidArgumentError,
    PartialDeleteError,
    StorageError,
    TransientStorageError,
)

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_CONCURRENCY = 16


@dataclass(frozen=True)
class StorageSettings:
    """Olympia's own storage options (every other option goes to the backend).

    ``retry_attempts`` bounds how often one operation is tried when it fails transiently;
    the pauses between tries start at ``retry_backoff`` seconds and double (jittered, at most
    ``MAX_BACKOFF``). On S3, ``connect_timeout`` and ``read_timeout`` (seconds) bound each
    request, which botocore and s3fs then do not retry themselves: a dead endpoint fails
    after ``retry_attempts`` quick tries instead of their nested retries (30-45 s).
    """

    max_concurrency: int = DEFAULT_CONCURRENCY
    retry_attempts: int = 5
    retry_backoff: float = 0.1
    connect_timeout: float = 2.0
    read_timeout: float = 15.0

    @classmethod
    def pop(cls, options: dict[str, Any]) -> StorageSettings:
        """Take (and validate) the settings out of ``options``.

        Raises:
            InvalidArgumentError: a setting is not a number in its range (named by key; the
                value is never echoed).
        """
        ints: dict[str, tuple[float, float]] = {"max_concurrency": (1, 1024),
                                                "retry_attempts": (1, 100)}
        floats: dict[str, tuple[float, float]] = {
            "retry_backoff": (0.0, 60.0), "connect_timeout": (0.001, 3600.0),
            "read_timeout": (0.001, 3600.0)}
        values: dict[str, Any] = {}
        for key, (low, high) in {**ints, **floats}.items():
            if key not in options:
                continue
            value: Any = options.pop(key)
            if isinstance(value, str):
                with contextlib.suppress(ValueError):
                    value = int(value) if key in ints else float(value)
            number = isinstance(value, int) or (key in floats and isinstance(value, float))
            if isinstance(value, bool) or not number or not low <= value <= high:
                kind = "an integer" if key in ints else "a number"
                raise InvalidArgumentError(
                    f"storage option {key} must be {kind} from {low} to {high}")
            values[key] = value
        return cls(**values)

    def pause(self, attempt: int) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based)."""
        return float(min(MAX_BACKOFF, self.retry_backoff * 2**attempt)) * random.uniform(0.5, 1)


MAX_BACKOFF = 2.0


@dataclass(frozen=True)
class FileInfo:
    """A listed file: path relative to the prefix, size in bytes, modification epoch seconds."""

    path: str
    size: int
    modified: float


@dataclass
class StorageStats:
    """Counts of storage operations; stable where timings are not (used by benchmarks).

    Every operation issued counts, whatever its outcome: a read of an absent file is a
    round trip too. ``misses`` counts the reads that found no file, ``failures`` the
    operations that ended in any other error (after retries), ``retries`` the tries made
    again after a transient failure.
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


class Backend(Protocol):
    """What a storage system must offer; paths here are full backend paths."""

    def read(self, path: str) -> bytes: ...
    def write(self, path: str, data: bytes) -> None: ...
    def create_exclusive(self, path: str, data: bytes) -> None: ...
    def exists(self, path: str) -> bool: ...
    def list(self, prefix: str) -> list[FileInfo]: ...
    def delete(self, path: str) -> None: ...

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        """Delete in one request; the paths the storage did not delete, each with its error
        text. A missing file counts as deleted."""

    def place(self, root: str) -> Hashable:
        """What identifies the files under ``root`` in this store: two backends that give
        equal places address the same files."""


class LocalBackend:
    """Local disk. Publishes every file by rename/link of a fully written temp file."""

    def __init__(self, fsync: bool = True) -> None:
        self.fsync = fsync

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def _temp(self, path: str, data: bytes) -> str:
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
        except FileExistsError:  # a parent is a file: no "file already exists" for `path`
            raise NotADirectoryError(errno.ENOTDIR, "a parent folder is a file", path) from None
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        return tmp

    def write(self, path: str, data: bytes) -> None:
        tmp = self._temp(path, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def create_exclusive(self, path: str, data: bytes) -> None:
        tmp = self._temp(path, data)
        try:
            os.link(tmp, path)  # fails with EEXIST if another writer published first
        finally:
            _unlink_quietly(tmp)

    def exists(self, path: str) -> bool:
        return os.path.isfile(path)

    def list(self, prefix: str) -> list[FileInfo]:
        out: list[FileInfo] = []
        root = prefix if os.path.isdir(prefix) else os.path.dirname(prefix)
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                full = os.path.join(dirpath, name)
                if name.startswith(".tmp-") or not full.startswith(prefix):
                    continue
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                out.append(FileInfo(full, st.st_size, st.st_mtime))
        return out

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        for path in paths:
            self.delete(path)
        return {}

    def place(self, root: str) -> Hashable:
        return "file", os.path.realpath(root)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class MemoryBackend:
    """An in-process store, shared by every Storage opened on the same ``memory://name``;
    so is the lock that makes exclusive creates exclusive."""

    _stores: dict[str, dict[str, tuple[bytes, float]]] = {}
    _locks: dict[str, threading.Lock] = {}
    _registry_lock = threading.Lock()

    def __init__(self, name: str) -> None:
        with self._registry_lock:
            self.files = self._stores.setdefault(name, {})
            self.lock = self._locks.setdefault(name, threading.Lock())

    def read(self, path: str) -> bytes:
        try:
            return self.files[path][0]
        except KeyError:
            raise FileNotFoundError(path) from None

    def write(self, path: str, data: bytes) -> None:
        self.files[path] = (bytes(data), time.time())

    def create_exclusive(self, path: str, data: bytes) -> None:
        with self.lock:
            if path in self.files:
                raise FileExistsError(path)
            self.files[path] = (bytes(data), time.time())

    def exists(self, path: str) -> bool:
        return path in self.files

    def list(self, prefix: str) -> list[FileInfo]:
        items = list(self.files.items())
        return [FileInfo(p, len(d), m) for p, (d, m) in items if p.startswith(prefix)]

    def delete(self, path: str) -> None:
        self.files.pop(path, None)

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        for path in paths:
            self.delete(path)
        return {}

    def place(self, root: str) -> Hashable:
        return "memory", id(self.files), root


class FsspecBackend:
    """S3 through s3fs: exclusive creates with ``pipe_file(mode="create")`` (If-None-Match).

    The filesystem (its S3 client is bound to fsspec's event loop) is never used across
    ``fork()``: a forked process makes its own on first use (fsspec's instance cache is
    keyed by process id, so it is a new one).
    """

    def __init__(self, make_fs: Callable[[], Any]) -> None:
        self._make_fs = make_fs
        self._fs = make_fs()
        self._pid = os.getpid()

    @property
    def fs(self) -> Any:
        """The s3fs filesystem of this process."""
        if self._pid != os.getpid():
            _abandon(self._fs)
            self._fs, self._pid = self._make_fs(), os.getpid()
        return self._fs

    def read(self, path: str) -> bytes:
        data: bytes = self.fs.cat_file(path)
        return data

    def write(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data, mode="create")

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def list(self, prefix: str) -> list[FileInfo]:
        folder, _, partial = prefix.rpartition("/")
        try:
            found = self.fs.find(folder, detail=True, prefix=partial)
        except FileNotFoundError:
            return []
        out = []
        for path, info in found.items():
            if not path.startswith(prefix):
                continue
            modified = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
            if hasattr(modified, "timestamp"):
                modified = modified.timestamp()
            out.append(FileInfo(path, int(info.get("size") or 0), float(modified)))
        return out

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(path)

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        """One ``DeleteObjects`` request (up to 1000 keys of one bucket). s3fs's ``rm``
        drops the response's per-key ``Errors``, so the API is called directly."""
        if not paths:
            return {}
        bucket = paths[0].partition("/")[0]
        keys = [{"Key": path.partition("/")[2]} for path in paths]
        response = self.fs.call_s3("delete_objects", Bucket=bucket,
                                   Delete={"Objects": keys, "Quiet": True})
        return {f"{bucket}/{e['Key']}": f"{e.get('Code')}: {e.get('Message')}"
                for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"}

    def place(self, root: str) -> Hashable:
        options = getattr(self.fs, "storage_options", {})
        endpoint = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get(
            "endpoint_url")
        return type(self.fs).__name__, endpoint, root


_INHERITED: list[Any] = []  # filesystems a forked process inherited, never closed here


def _abandon(fs: Any) -> None:
    """Drop a filesystem inherited across fork() without closing it: its S3 client belongs
    to the parent's event loop, which does not run in this process, so s3fs's finalizer
    (which closes the client on that loop) is detached and the object stays referenced,
    so nothing tries to close it here."""
    registry = getattr(weakref.finalize, "_registry", {})
    for finalizer, info in list(registry.items()):
        if info.weakref() is fs:
            finalizer.detach()
    _INHERITED.append(fs)


OBJECT_OPTIONS = ("client_kwargs", "config_kwargs", "s3_additional_kwargs")


def _s3_filesystem(options: Mapping[str, Any], settings: StorageSettings) -> Any:
    import s3fs

    opts = dict(options)
    for key in OBJECT_OPTIONS:
        if not isinstance(opts.get(key) or {}, dict):
            raise InvalidArgumentError(f"storage option {key} must be a JSON object")
    client_kwargs = dict(opts.pop("client_kwargs", None) or {})
    # one retry layer (Storage's): botocore makes one attempt per call, s3fs none of its own
    config = {"connect_timeout": settings.connect_timeout,
              "read_timeout": settings.read_timeout,
              "retries": {"total_max_attempts": 1, "mode": "standard"},
              **dict(opts.pop("config_kwargs", None) or {})}
    for short, long in (("endpoint_url", "endpoint_url"), ("region", "region_name")):
        if short in opts:
            client_kwargs[long] = opts.pop(short)
    for short, long in (("access_key_id", "key"), ("secret_access_key", "secret")):
        if short in opts:
            opts[long] = opts.pop(short)
    # listings are never cached (another writer may have added a version); the client itself
    # is: fsspec reuses one per thread for equal options, which saves ~100 ms per open
    opts.setdefault("use_listings_cache", False)
    try:
        fs = s3fs.S3FileSystem(client_kwargs=client_kwargs, config_kwargs=config, **opts)
    except (TypeError, ValueError, KeyError) as exc:  # s3fs names no value in these
        raise InvalidArgumentError(f"invalid S3 storage options ({exc})") from None
    fs.retries = 1
    return fs


# How storage errors are told apart, from what the error carries (never from free text):
# errno values (s3fs's translations: 503 SlowDown and 409 -> EBUSY, 500 -> EREMOTEIO),
# S3 error codes and HTTP status codes (botocore's ``response``, on the error or its cause),
# and the classes of network failures (by name: botocore and aiohttp are not imported here).
TRANSIENT_ERRNOS = frozenset({errno.EBUSY, errno.EREMOTEIO, errno.EAGAIN, errno.ETIMEDOUT,
                              errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED,
                              errno.EPIPE, errno.ENETUNREACH, errno.EHOSTUNREACH})
TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
                             "RequestThrottled", "TooManyRequests", "RequestLimitExceeded",
                             "RequestTimeout", "RequestTimeoutException", "InternalError",
                             "ServiceUnavailable", "ConditionalRequestConflict",
                             "OperationAborted"})
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
EXISTS_CODES = frozenset({"PreconditionFailed", "412"})
MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
TRANSIENT_CLASSES = frozenset({
    "ConnectTimeoutError", "ReadTimeoutError", "EndpointConnectionError",
    "ConnectionClosedError", "ResponseStreamingError", "IncompleteRead",
    "ServerDisconnectedError", "ClientConnectorError", "ClientPayloadError", "FSTimeoutError"})
# botocore's message for a code it has no response object left for (s3fs drops the cause of
# some errors, e.g. a HEAD request's 502): "An error occurred (502) when calling the ..."
BOTOCORE_MESSAGE = re.compile(r"An error occurred \((\w+)\) when calling the \w+ operation")

Kind = type[StorageError]


def _chain(exc: BaseException) -> Iterable[BaseException]:
    """The error and the errors it was raised from or while handling (unless suppressed with
    ``from None``); bounded, as chains may loop."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__)


def _kind_of_code(code: str, status: int | None = None) -> Kind:
    if code in EXISTS_CODES or status == 412:
        return FileAlreadyExists
    if code in MISSING_CODES or status == 404:
        return FileNotFound
    if code in TRANSIENT_CODES or (code.isdigit() and int(code) in TRANSIENT_STATUS) or (
            status in TRANSIENT_STATUS):
        return TransientStorageError
    return StorageError


def classify(error: BaseException | str) -> Kind:
    """Which StorageError an operation's failure becomes.

    Args:
        error: the exception a backend raised, or the ``Code: Message`` text a bulk delete
            reported for one key.

    Returns:
        FileNotFound, FileAlreadyExists, TransientStorageError (may go away on retry) or
        StorageError (permanent).
    """
    if isinstance(error, str):
        return _kind_of_code(error.partition(":")[0].strip())
    for exc in _chain(error):
        if isinstance(exc, StorageError):
            return type(exc)
        response = getattr(exc, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            return _kind_of_code(str(response["Error"].get("Code") or ""),
                                 status if isinstance(status, int) else None)
        if isinstance(exc, FileNotFoundError):
            return FileNotFound
        if isinstance(exc, FileExistsError):
            return FileAlreadyExists
        if isinstance(exc, TimeoutError | ConnectionError) or any(
                cls.__name__ in TRANSIENT_CLASSES for cls in type(exc).__mro__):
            return TransientStorageError
        if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
            return TransientStorageError
    # s3fs's translation of a code it knows no errno for: OSError(EIO, botocore's message)
    found = isinstance(error, OSError) and error.errno == errno.EIO and BOTOCORE_MESSAGE.match(
        error.strerror or "")
    return _kind_of_code(found.group(1)) if found else StorageError


Opened = tuple[str, Backend, str | None]
"""What a scheme's opener gives: the root (prefix with a trailing ``/``, as the backend
addresses it), the backend, and the canonical URI (None: as given)."""


def _open_local(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    parts = urlsplit(uri)
    local = parts.path if len(parts.scheme) > 1 else uri
    root = os.path.abspath(os.path.expanduser(local)).rstrip("/") + "/"
    backend = LocalBackend(fsync=bool(options.pop("fsync", True)))
    return root, backend, "file://" + root.rstrip("/")


def _open_memory(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    parts = urlsplit(uri)
    return "/", MemoryBackend((parts.netloc + parts.path).strip("/")), None


def _open_s3(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    parts = urlsplit(uri)
    root = (parts.netloc + parts.path).strip("/") + "/"
    return root, FsspecBackend(lambda: _s3_filesystem(options, settings)), None


# The backend of each URI scheme ("": a plain local path); options are the storage options
# left after Olympia's own (StorageSettings) were taken out.
SCHEMES: dict[str, Callable[[str, dict[str, Any], StorageSettings], Opened]] = {
    "": _open_local, "file": _open_local, "local": _open_local,
    "memory": _open_memory,
    "s3": _open_s3, "s3a": _open_s3,
}


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
        self.stats.add(reads=1)
        data = self._call("read", path, lambda: self.backend.read(self.full(path)))
        self.stats.add(bytes_read=len(data))
        return data

    def write(self, path: str, data: bytes) -> None:
        """Write (or replace) a file; readers see the old or the new content, never a mix."""
        self.stats.add(writes=1, bytes_written=len(data))
        self._call("write", path, lambda: self.backend.write(self.full(path), data))

    def create_exclusive(self, path: str, data: bytes) -> None:
        """Create a file only if it does not exist; raise FileAlreadyExists otherwise.

        A try that failed transiently may still have created the file: when the next try
        (or, after the last, a read) finds the file holding ``data``, the create succeeded.
        """
        full = self.full(path)
        self.stats.add(writes=1, bytes_written=len(data))
        tried = False  # a try after a (transient) failure: our first one may have landed

        def create() -> None:
            nonlocal tried
            try:
                self.backend.create_exclusive(full, data)
            except Exception as exc:
                if tried and classify(exc) is FileAlreadyExists and (
                        self._read_or_none(path) == data):
                    return
                raise
            finally:
                tried = True

        try:
            self._call("exclusive create", path, create)
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

    def read_many(self, paths: Iterable[str]) -> builtins.list[bytes]:
        return self.map(self.read, paths)

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


def _not_deleted(why: str) -> Kind:
    """The error for a key a bulk delete left: transient or permanent by its S3 code."""
    return TransientStorageError if classify(why) is TransientStorageError else StorageError
