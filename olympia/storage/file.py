"""The ``file`` scheme (a local path, ``file://``, ``local://``): local disk, with syncs and
atomic links (:class:`LocalBackend`). Its tables' files need no FileIO properties."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import uuid
from collections.abc import Hashable, Sequence
from typing import Any
from urllib.parse import urlsplit

from olympia.storage.backends import (
    Backend,
    FileInfo,
    Opened,
    no_options,
    no_properties,
    passthrough,
)
from olympia.storage.retry import StorageSettings


def _stat_tag(st: os.stat_result) -> str:
    """What a local file's ``stat`` says of its content's identity."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


class LocalBackend(Backend):
    """Local disk. Every file is written whole, synced, and then given its name, so a
    reader or a crash never leaves a partly written file under a name: a new file is
    written unnamed in its folder (Linux ``O_TMPFILE``) and hard-linked at its name, which
    fails if the name exists (the exclusive create); elsewhere, and to replace a file, it
    is written as a named temp file (``.tmp-<hex>``, ignored by listings) and linked or
    renamed into place. Then the folder is synced too, before the write returns: a name is
    durable only once its folder is, so a root acknowledged never disappears in a crash of
    the machine, nor survives one that lost a file it names (file systems without a
    journal write folders in any order). A write that need not survive (``durable=False``:
    the vn/latest hint) syncs neither."""

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

    def tag(self, path: str) -> str:
        try:
            return _stat_tag(os.stat(path))
        except FileNotFoundError:
            return ""

    def _folder(self, path: str) -> str:
        """The folder of ``path``, created if missing, each folder made here named durably
        in its parent."""
        directory = os.path.dirname(path)
        if os.path.isdir(directory):
            return directory
        made, above = [], directory
        while above and not os.path.isdir(above):
            made.append(above)
            above = os.path.dirname(above)
        try:
            os.makedirs(directory, exist_ok=True)
        except FileExistsError:  # a parent is a file: no "file already exists" for `path`
            raise NotADirectoryError(errno.ENOTDIR, "a parent folder is a file", path) from None
        for folder in reversed(made):
            self._sync_name(folder)
        return directory

    def _sync_name(self, path: str) -> None:
        """Sync the folder of ``path``, making the entry that names it durable: a name
        given (a link, a rename, a new folder) is otherwise on disk only once the file
        system gets to it, after an acknowledged commit or out of order."""
        if not self.fsync:
            return
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

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
        if durable:
            self._sync_name(path)
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
        if durable:
            self._sync_name(path)

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
        self._sync_name(path)

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
                self._sync_name(path)
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


def open_backend(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    parts = urlsplit(uri)
    local = parts.path if len(parts.scheme) > 1 else uri
    root = os.path.abspath(os.path.expanduser(local)).rstrip("/") + "/"
    backend = LocalBackend(fsync=bool(options.pop("fsync", True)))
    return root, backend, "file://" + root.rstrip("/")


storage_options = no_options  # no pyiceberg property configures it
iceberg_properties = no_properties  # its tables need no FileIO property
data_source_properties = passthrough

# Login and Password: the S3 names, as before (a local catalog ignores them)
CONNECTION = ("key", "secret")
