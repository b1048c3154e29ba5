"""Storage backends (local disk, memory, S3 through s3fs) and the scheme table that picks
one for a URI (:data:`SCHEMES`). A backend takes full paths (the root joined with a
relative path) and raises its own errors; :class:`olympia.storage.Storage` adds the prefix,
retries and error types.

The contract (:class:`Backend`) is the size of fsspec's or pyiceberg's FileIO: read, write,
create exclusively, replace if unchanged (compare-and-swap), exists, list, delete many, and
publish (write a commit's files, then create its root exclusively; the default does exactly
that). A new backend is one class
and one line in :data:`SCHEMES`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from olympia.storage.retry import StorageSettings

Job = Callable[[], object]
# how a backend runs a batch of requests (calls of a Job): every call ends before it
# returns (Storage.map, or run_in_turn)
RunAll = Callable[[Callable[[Job], object], list[Job]], object]


def run_in_turn(fn: Callable[[Job], object], items: list[Job]) -> None:
    """A :data:`RunAll` that runs the calls one after the other on this thread."""
    for item in items:
        fn(item)


def _stat_tag(st: os.stat_result) -> str:
    """What a local file's ``stat`` says of its content's identity."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _run(job: Job) -> object:
    return job()


@dataclass(frozen=True)
class FileInfo:
    """A listed file: path relative to the prefix, size in bytes, modification epoch seconds."""

    path: str
    size: int
    modified: float


class Backend:
    """What a storage system must offer; paths here are full backend paths.

    ``remote``: each operation is a request over the network (a round trip). Where it is
    not, batches of small reads run on the calling thread and existence checks are free.
    """

    remote: bool = False

    def read(self, path: str) -> bytes:
        """The file's content.

        Raises:
            FileNotFoundError: There is no such file.
        """
        raise NotImplementedError

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        """Create or replace the file; a reader sees the old or the new content, never a
        mix. ``durable=False`` (hints) may skip syncing it to disk."""
        raise NotImplementedError

    def create_exclusive(self, path: str, data: bytes) -> None:
        """Create the file only if it does not exist (put-if-absent), whole or not at all.

        Raises:
            FileExistsError: The file exists.
        """
        raise NotImplementedError

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        """Replace the file's content with ``data`` only if it holds ``expected`` at that
        moment (compare-and-swap), whole or not at all.

        Raises:
            FileExistsError: The file holds something else (another writer replaced it).
            FileNotFoundError: There is no such file.
        """
        raise NotImplementedError

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """The file's content and a tag of that content, or ``(None, tag)`` when the file
        still has the content ``tag`` was given with (``""``: read it in any case): a
        conditional read, which sends no body when nothing changed. By default the file
        is read in full (:meth:`read`) and given no tag, so a caller always reads it.

        Raises:
            FileNotFoundError: There is no such file.
        """
        return self.read(path), ""

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def list(self, prefix: str) -> list[FileInfo]:
        """Every file whose full path starts with ``prefix`` (any order)."""
        raise NotImplementedError

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        """Delete the files (a missing file counts as deleted); the paths the storage did
        not delete, each with its error text."""
        raise NotImplementedError

    def place(self, root: str) -> Hashable:
        """What identifies the files under ``root`` in this store: two backends that give
        equal places address the same files."""
        raise NotImplementedError

    def publish(self, files: Mapping[str, bytes], path: str, data: bytes,
                run_all: RunAll = run_in_turn, present: Sequence[str] = ()) -> None:
        """Write ``files`` and check that each of ``present`` exists (in one batch), then
        create ``path`` exclusively: a reader never finds ``path`` without every one of
        ``files`` and ``present``.

        Args:
            files: Full path -> content.
            path: The file created last, exclusively.
            data: Its content.
            run_all: Runs the batch, returning once every call has ended (the storage
                passes its bounded thread pool: on local disk concurrent writes let the
                file system merge their syncs).
            present: Full paths of files written earlier that ``path`` also names.

        Raises:
            FileNotFoundError: A file of ``present`` is missing (``path`` was not created).
            FileExistsError: ``path`` exists (``files`` were written).
        """
        self._batch([partial(self.write, name, content) for name, content in files.items()],
                    present, run_all)
        self.create_exclusive(path, data)

    def _batch(self, writes: Sequence[Job], present: Sequence[str], run_all: RunAll) -> None:
        """Run ``writes`` and an existence check of each of ``present`` as one batch.

        Raises:
            FileNotFoundError: Naming the first missing file of ``present``.
        """
        found: dict[str, bool] = {}

        def check(name: str) -> None:
            found[name] = self.exists(name)

        run_all(_run, [*writes, *(partial(check, name) for name in present)])
        missing = [name for name in present if not found[name]]
        if missing:
            raise FileNotFoundError(errno.ENOENT, "a file the new root names is missing",
                                    missing[0])


class LocalBackend(Backend):
    """Local disk. Every file is written whole, synced, and then given its name, so a
    reader or a crash never leaves a partly written file under a name: a new file is
    written unnamed in its folder (Linux ``O_TMPFILE``) and hard-linked at its name, which
    fails if the name exists (the exclusive create); elsewhere, and to replace a file, it
    is written as a named temp file (``.tmp-<hex>``, ignored by listings) and linked or
    renamed into place."""

    def __init__(self, fsync: bool = True) -> None:
        self.fsync = fsync
        # unnamed files need O_TMPFILE and /proc to link them; a file system without them
        # turns this off at its first refusal
        self._unnamed = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """The tag is the file's device, inode, size, modification and change times (a
        ``stat``; a file replaced, or written in place, gets another); the content is read
        from the file that was stat-ed."""
        if tag and _stat_tag(os.stat(path)) == tag:
            return None, tag
        with open(path, "rb") as f:
            tag = _stat_tag(os.fstat(f.fileno()))
            return f.read(), tag

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
        linking it there: the folder gains its one entry last, so a crash leaves nothing.
        Returns False where unnamed files are not available (the caller writes a named
        temp file instead, and so does every later write).

        Raises:
            FileExistsError: ``path`` exists.
        """
        fd = self._open_unnamed(path) if self._unnamed else None
        if fd is None:
            return False
        try:
            self._fill(fd, data, durable)
            # linkat(2) follows /proc/self/fd/N to the open file; src_dir_fd only makes
            # os.link call linkat (an absolute source ignores the folder it names)
            os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=fd, follow_symlinks=True)
        except FileExistsError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS):
                raise  # the disk's answer, not a refusal of unnamed files
            self._unnamed = False  # no linking through /proc here: named temps will do
            return False
        finally:
            os.close(fd)
        return True

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
        # no look first: the commit asked whether the path is taken once already (before
        # writing its other files); a loss since costs one small doomed write
        if self._link_unnamed(path, data):  # fails with EEXIST if another writer was first
            return
        tmp = self._temp(path, data)
        try:
            os.link(tmp, path)  # fails with EEXIST if another writer published first
        finally:
            _unlink_quietly(tmp)

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        """Under an exclusive ``flock`` of the file now at ``path`` (the kernel releases it
        if the process dies): a writer that locked a file someone renamed away meanwhile
        starts again on the new one, so replacements of one path take turns and each
        compares against the content it replaces. Needs a file system whose locks work
        across processes (local disks do; some network file systems do not)."""
        while True:
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.fstat(fd).st_ino != os.stat(path).st_ino:
                    continue  # replaced while we waited for the lock: lock the new file
                with os.fdopen(os.dup(fd), "rb") as f:
                    if f.read() != expected:
                        raise FileExistsError(errno.EEXIST, "the file was replaced", path)
                tmp = self._temp(path, data)
                try:
                    os.replace(tmp, path)
                except BaseException:
                    _unlink_quietly(tmp)
                    raise
                return
            finally:
                os.close(fd)

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

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        for path in paths:
            _unlink_quietly(path)
        return {}

    def place(self, root: str) -> Hashable:
        return "file", os.path.realpath(root)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class MemoryBackend(Backend):
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

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self.files[path] = (bytes(data), time.time())

    def create_exclusive(self, path: str, data: bytes) -> None:
        with self.lock:
            if path in self.files:
                raise FileExistsError(path)
            self.files[path] = (bytes(data), time.time())

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        with self.lock:
            if self.read(path) != expected:
                raise FileExistsError(path)
            self.files[path] = (bytes(data), time.time())

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """The tag is the SHA-256 of the content (reading it is free)."""
        data = self.read(path)
        now = hashlib.sha256(data).hexdigest()
        return (None, tag) if now == tag else (data, now)

    def exists(self, path: str) -> bool:
        return path in self.files

    def list(self, prefix: str) -> list[FileInfo]:
        items = list(self.files.items())
        return [FileInfo(p, len(d), m) for p, (d, m) in items if p.startswith(prefix)]

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        for path in paths:
            self.files.pop(path, None)
        return {}

    def place(self, root: str) -> Hashable:
        return "memory", id(self.files), root


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
    from olympia.storage.s3 import FsspecBackend, s3_filesystem  # s3fs only when used

    parts = urlsplit(uri)
    root = (parts.netloc + parts.path).strip("/") + "/"
    return root, FsspecBackend(lambda: s3_filesystem(options, settings)), None


# The backend of each URI scheme ("": a plain local path); options are the storage options
# left after Olympia's own (StorageSettings) were taken out.
SCHEMES: dict[str, Callable[[str, dict[str, Any], StorageSettings], Opened]] = {
    "": _open_local, "file": _open_local, "local": _open_local,
    "memory": _open_memory,
    "s3": _open_s3, "s3a": _open_s3,
}
