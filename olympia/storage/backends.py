"""Storage backends (local disk, memory, S3 through s3fs) and the scheme table that picks
one for a URI (:data:`SCHEMES`). A backend takes full paths (the root joined with a
relative path) and raises its own errors; :class:`olympia.storage.Storage` adds the prefix,
retries and error types."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from olympia.exceptions import (
    InvalidArgumentError,
)
from olympia.storage.retry import StorageSettings

TURN_WAIT_S = 0.1  # the longest a local writer waits for its turn to name files
TURN_NAPS_S = (0.00005, 0.001)  # its first and its longest nap between looks
SPARE_UNNAMED = 8  # unnamed files a process keeps per folder for its next writes there
_TURNS_HELD: set[int] = set()  # descriptors of the turns this process's threads hold
_HELD = threading.local()  # .turns: folder -> descriptor of a turn this thread holds


def _close_inherited_turns() -> None:
    """In a child forked while a thread held a turn: close the copies of its descriptor,
    or the lock would outlive the parent's turn for as long as the child runs (closing a
    copy does not release the parent's lock; unlocking would)."""
    for fd in list(_TURNS_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _TURNS_HELD.clear()
    _HELD.__dict__.clear()  # the forking thread's held turns, now closed


os.register_at_fork(after_in_child=_close_inherited_turns)


def _held_turns() -> dict[str, int]:
    """Key -> descriptor of the turns this thread holds (:func:`holding`)."""
    turns: dict[str, int] = _HELD.__dict__.setdefault("turns", {})
    return turns


def note_held(fd: int) -> None:
    """``fd`` holds a turn's lock: a child forked while it does closes its copy."""
    _TURNS_HELD.add(fd)


def release_turn(fd: int | None) -> None:
    if fd is not None:
        _TURNS_HELD.discard(fd)
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def holding(key: str, take: Callable[[], int | None]) -> Iterator[bool]:
    """Hold the turn ``key`` names for the block: taken with ``take`` (its locked
    descriptor, None if not taken) unless this thread holds it already, and released at
    the end of the block that took it. Yields whether this thread holds it."""
    turns = _held_turns()
    fd = None if key in turns else take()
    if fd is not None:
        turns[key] = fd
    try:
        yield key in turns
    finally:
        if fd is not None:
            turns.pop(key, None)
            release_turn(fd)


def try_flock(fd: int, kind: int) -> bool:
    """Whether ``fd`` could be locked (``flock``, ``kind``) at once (False: another holds it).

    Raises:
        OSError: The file system offers no such locks.
    """
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def take_lock(fd: int, wait_s: float, naps: tuple[float, float],
              gone: Callable[[], bool] = lambda: False) -> bool:
    """Lock ``fd`` (``flock``, exclusive) for a turn, polling with naps growing from
    ``naps[0]`` to ``naps[1]``; False when ``wait_s`` passed, or ``gone()`` said there is
    nothing left to wait for, first. The caller releases it with :func:`release_turn` (a
    child forked meanwhile closes its copy).

    Raises:
        OSError: The file system offers no such locks.
    """
    nap, longest = naps
    start = time.monotonic()
    while True:
        if try_flock(fd, fcntl.LOCK_EX):
            note_held(fd)
            return True
        if gone() or time.monotonic() - start >= wait_s:
            return False
        time.sleep(nap)
        nap = min(2 * nap, longest)


@dataclass(frozen=True)
class FileInfo:
    """A listed file: path relative to the prefix, size in bytes, modification epoch seconds."""

    path: str
    size: int
    modified: float


class StagedFile(Protocol):
    """Content written ahead of its name (:meth:`Backend.stage`)."""

    def fill(self, data: bytes) -> None:
        """Write ``data``, from the start (replacing what an earlier try wrote)."""

    def write_back(self) -> None:
        """Start writing the content to disk without waiting for it: syncing several
        files that all started costs about one wait, not one each."""

    def sync(self) -> None:
        """Make the content durable (where the backend syncs at all)."""

    def turn(self) -> contextlib.AbstractContextManager[bool]:
        """Wait for the turn to name files in this file's folder and hold it while syncing
        and naming them; it yields whether the path is still free (False: another writer
        took it meanwhile, so there is nothing to sync or name)."""

    def link(self) -> bool:
        """Name it: create the path only if it does not exist (FileExistsError otherwise).
        False where the store refused to name it this way (the caller writes the file
        whole instead)."""

    def close(self) -> None:
        """Release it; content never named is discarded."""


class Backend(Protocol):
    """What a storage system must offer; paths here are full backend paths.

    ``remote``: each operation is a request over the network (a round trip). Where it is
    not, batches of small reads run on the calling thread and existence checks are free.
    ``shared_turns``: :meth:`hold_turn` is a turn that writers in every process of this
    host take (local disk).
    """

    remote: bool
    shared_turns: bool

    def read(self, path: str) -> bytes: ...
    def write(self, path: str, data: bytes, durable: bool = True) -> None: ...
    def create_exclusive(self, path: str, data: bytes) -> None: ...

    def stage(self, path: str) -> StagedFile | None:
        """A file to be created at ``path`` later, its content written before it is named
        (see :meth:`olympia.storage.Storage.publish`); None where this store cannot hold
        content apart from a name (then the file is created whole)."""

    def hold_turn(self, path: str, wait: bool = True) -> contextlib.AbstractContextManager[bool]:
        """Wait for the writers' turn to name files in ``path``'s folder (only take it if
        it is free at once, without ``wait``) and hold it for the whole block, whether or
        not ``path`` appears meanwhile; files this thread names there inside the block are
        named in it. Yields whether the turn is held (False where the store has no turns,
        or the wait ran out)."""

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
    """Local disk. Publishes every file fully written: a new file by linking an unnamed
    one (Linux ``O_TMPFILE``), else, and to replace a file, by link or rename of a named
    temp file.

    Writers that publish files together (:meth:`olympia.storage.Storage.publish`) take
    turns to sync and name them: an advisory lock (``flock``) on the folder of the file
    that decides the race, so the losers learn that they lost before syncing anything (at
    8 writers, a quarter of the syncs were of attempts that went on to lose). A writer may
    also hold the turn for longer (:meth:`hold_turn`: a commit that has waited too long
    catches up and lands in it). The lock only saves work and bounds waits: the exclusive
    link still decides, so a writer that waits longer than :data:`TURN_WAIT_S` (its holder
    stalled), or a file system without such locks, goes on without it.
    """

    remote = False
    shared_turns = True

    def __init__(self, fsync: bool = True) -> None:
        self.fsync = fsync
        # unnamed files need O_TMPFILE and /proc to link them; a file system without them
        # turns this off at its first refusal
        self._unnamed = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
        self._turns = True  # off once the file system refuses an advisory lock
        self._spares = _Spares()

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    @staticmethod
    def _folder(path: str) -> str:
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
        except FileExistsError:  # a parent is a file: no "file already exists" for `path`
            raise NotADirectoryError(errno.ENOTDIR, "a parent folder is a file", path) from None
        return directory

    def _fill(self, fd: int, data: bytes, durable: bool) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if self.fsync and durable:
            os.fsync(fd)

    def _temp(self, path: str, data: bytes, durable: bool = True) -> str:
        tmp = os.path.join(self._folder(path), f".tmp-{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            self._fill(fd, data, durable)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        os.close(fd)
        return tmp

    def _link_unnamed(self, path: str, data: bytes, durable: bool = True) -> bool:
        """Create ``path`` holding ``data`` by writing an unnamed file in its folder and
        linking it there: readers see all of it or nothing, and a crash leaves no temp
        file, as the folder gains its one entry last. Returns False where unnamed files
        are not available (the caller stages a named temp file instead, and so does every
        later write: a file system that refuses once is not asked again).

        Raises:
            FileExistsError: ``path`` exists.
        """
        unnamed = self.stage(path)
        if unnamed is None:
            return False
        try:
            unnamed.fill(data)
            if durable:
                unnamed.sync()
            return unnamed.link()
        finally:
            unnamed.close()

    def stage(self, path: str) -> _UnnamedFile | None:
        """An unnamed file in ``path``'s folder (one this process left unnamed before, if
        any), None where the file system offers none."""
        if not self._unnamed:
            return None
        fd = self._spares.take(os.path.dirname(path) or ".")
        if fd is None:
            fd = self._open_unnamed(path)
        return None if fd is None else _UnnamedFile(self, fd, path)

    def _open_unnamed(self, path: str) -> int | None:
        """An unnamed file open for writing in ``path``'s folder (created if missing), or
        None where the file system does not offer them."""
        folder, flags = os.path.dirname(path) or ".", os.O_TMPFILE | os.O_WRONLY
        try:
            try:
                return os.open(folder, flags, 0o666)
            except FileNotFoundError:
                self._folder(path)
                return os.open(folder, flags, 0o666)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
            self._unnamed = False
            return None

    @contextlib.contextmanager
    def turn(self, path: str) -> Iterator[bool]:
        """Hold the turn to name files in ``path``'s folder (see the class), unless this
        thread holds it already (:meth:`hold_turn`); yields whether ``path`` is still free."""
        fd = None if self._holding(path) else self._take_turn(path, until_taken=True)
        try:
            yield not os.path.lexists(path)
        finally:
            release_turn(fd)

    def hold_turn(self, path: str, wait: bool = True) -> contextlib.AbstractContextManager[bool]:
        return holding(os.path.dirname(path) or ".", lambda: self._take_turn(
            path, until_taken=False, wait_s=TURN_WAIT_S if wait else 0.0))

    @staticmethod
    def _holding(path: str) -> bool:
        """Whether this thread holds the turn of ``path``'s folder (:meth:`hold_turn`)."""
        return (os.path.dirname(path) or ".") in _held_turns()

    def _take_turn(self, path: str, until_taken: bool, wait_s: float = TURN_WAIT_S,
                   ) -> int | None:
        """The folder's descriptor, locked; None where the wait ended without the lock:
        ``path`` appeared (when ``until_taken``), the wait reached ``wait_s``, or there
        are no locks."""
        if not self._turns:
            return None
        try:
            fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:  # the turn only saves work: go on without it
            return None
        try:
            if take_lock(fd, wait_s, TURN_NAPS_S,
                         lambda: until_taken and os.path.lexists(path)):
                return fd
        except OSError:  # no advisory locks here (some network file systems)
            self._turns = False
        os.close(fd)
        return None

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        if not os.path.lexists(path):  # a new file (every node and definition file)
            try:
                if self._link_unnamed(path, data, durable):
                    return
            except FileExistsError:
                pass  # created meanwhile: replace it as below
        tmp = self._temp(path, data, durable)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def create_exclusive(self, path: str, data: bytes) -> None:
        if os.path.lexists(path):  # lost already: skip writing and syncing a doomed file
            raise FileExistsError(errno.EEXIST, "file exists", path)
        if self._link_unnamed(path, data):  # fails with EEXIST if another writer was first
            return
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


class _UnnamedFile:
    """An ``O_TMPFILE`` file of a :class:`LocalBackend`, named by linking it at ``path``."""

    def __init__(self, backend: LocalBackend, fd: int, path: str) -> None:
        self.backend, self.fd, self.path = backend, fd, path
        self.named = False

    def fill(self, data: bytes) -> None:
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        self.backend._fill(self.fd, data, durable=False)

    def write_back(self) -> None:
        if self.backend.fsync and _SYNC_FILE_RANGE is not None:
            # a hint: an error here leaves the sync that follows to do all the work
            _SYNC_FILE_RANGE(self.fd, 0, 0, _SYNC_FILE_RANGE_WRITE)

    def sync(self) -> None:
        if self.backend.fsync:
            os.fsync(self.fd)

    def turn(self) -> contextlib.AbstractContextManager[bool]:
        return self.backend.turn(self.path)

    def link(self) -> bool:
        try:  # linkat(2) follows /proc/self/fd/N to the open file; src_dir_fd only makes
            # os.link call linkat (an absolute source ignores the folder it names)
            os.link(f"/proc/self/fd/{self.fd}", self.path, src_dir_fd=self.fd,
                    follow_symlinks=True)
        except FileExistsError:
            raise
        except OSError:  # no linking through /proc here: a named temp file will do
            self.backend._unnamed = False
            return False
        self.named = True
        return True

    def close(self) -> None:
        """Close it, or, never named (its commit lost the race), keep it for this
        process's next file in the folder: see :class:`_Spares`."""
        folder = os.path.dirname(self.path) or "."
        if self.named or not self.backend._unnamed or not self.backend._spares.keep(
                folder, self.fd):
            os.close(self.fd)


class _Spares:
    """Unnamed files a process staged and never named, kept open (up to
    :data:`SPARE_UNNAMED` per folder) to hold its next files there.

    Closing an unnamed file frees its inode, and on ext4 without a journal every new inode
    is then allocated past the ones freed in the last seconds to minutes (the kernel's
    ``recently_deleted`` check, one buffer lookup each): at 8 writers every lost attempt
    freed 2-3 inodes, and a profile put a third of the machine's CPU in that scan. A
    spare's content is replaced whole before it is named (:meth:`_UnnamedFile.fill`).
    Spares belong to the process that opened them: a forked child closes its copies
    unused, or it would write into the same inodes as its parent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folders: dict[str, list[int]] = {}
        _SPARES.add(self)

    def take(self, folder: str) -> int | None:
        with self._lock:
            spares = self._folders.get(folder)
            return spares.pop() if spares else None

    def keep(self, folder: str, fd: int) -> bool:
        with self._lock:
            spares = self._folders.setdefault(folder, [])
            if len(spares) >= SPARE_UNNAMED:
                return False
            spares.append(fd)
            return True

    def close(self) -> None:
        """Close every spare (in a forked child: its copies; the parent keeps its own)."""
        folders, self._folders, self._lock = self._folders, {}, threading.Lock()
        for fd in (fd for spares in folders.values() for fd in spares):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self.close()


_SPARES: weakref.WeakSet[_Spares] = weakref.WeakSet()


def _close_inherited_spares() -> None:
    for spares in list(_SPARES):
        spares.close()


os.register_at_fork(after_in_child=_close_inherited_spares)


def _sync_file_range() -> Any:
    """Linux's ``sync_file_range(2)`` (None elsewhere). On ext4 each ``fsync`` of a new
    file commits the journal once for its own blocks; after every file's write-back has
    started, the first sync commits them all and the others find theirs done (3 new
    files: 0.57 ms to sync against 0.32-0.42 ms; 6 files: 1.2 ms against 0.46 ms)."""
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_SYNC_FILE_RANGE = _sync_file_range() if sys.platform.startswith("linux") else None
_SYNC_FILE_RANGE_WRITE = 2  # start write-back of dirty pages, do not wait


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class MemoryBackend:
    """An in-process store, shared by every Storage opened on the same ``memory://name``;
    so is the lock that makes exclusive creates exclusive."""

    remote = False
    shared_turns = False
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

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self.files[path] = (bytes(data), time.time())

    def create_exclusive(self, path: str, data: bytes) -> None:
        with self.lock:
            if path in self.files:
                raise FileExistsError(path)
            self.files[path] = (bytes(data), time.time())

    def stage(self, path: str) -> None:
        return None  # a create costs no I/O here: nothing to overlap

    def hold_turn(self, path: str, wait: bool = True) -> contextlib.AbstractContextManager[bool]:
        return contextlib.nullcontext(False)  # no turns here

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

    remote = True
    shared_turns = False

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
        # one GET: with concurrency above 1, s3fs first asks for the size (a HEAD, and a
        # LIST when the file is missing); catalog files are small, one request reads them
        data: bytes = self.fs.cat_file(path, max_concurrency=1)
        return data

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self.fs.pipe_file(path, data)  # an object store's PUT is durable either way

    def create_exclusive(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data, mode="create")

    def stage(self, path: str) -> None:
        return None  # an object is written by one request, content and name together

    def hold_turn(self, path: str, wait: bool = True) -> contextlib.AbstractContextManager[bool]:
        return contextlib.nullcontext(False)  # none of the store's (Storage takes host turns)

    def exists(self, path: str) -> bool:
        """One HEAD (s3fs's ``exists`` follows a missing file with a LIST, to look for a
        folder of that name; a catalog file is never one)."""
        bucket, _, key = path.partition("/")
        try:
            self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return False
        return True

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
