"""Replacing a file's content in one step, safe against links planted in its folder and
against a crash (a reader sees the whole old content or the whole new one)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

# a new file, never an existing one nor one reached through a symbolic link
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME_KEPT = 200  # characters of the file's name in the temporary one: within NAME_MAX (255)


def replace_file(path: Path, data: bytes) -> None:
    """Give the regular file ``path`` the content ``data``, keeping its mode.

    Everything happens relative to ``path``'s folder, opened once: ``data`` goes to a new
    file of a random name there (``.NAME.RANDOM.tmp``, created exclusively, never through a
    link, mode 0600 until written), is fsynced, given ``path``'s mode and renamed over
    ``path``; then the folder is fsynced. On an error the temporary file is removed; a
    process killed meanwhile leaves it behind.

    Raises:
        OSError: ``path`` is not a regular file (a symbolic link included), or writing
            failed.
    """
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        mode = os.stat(path.name, dir_fd=folder, follow_symlinks=False).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        temporary = f".{path.name[:_NAME_KEPT]}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temporary, _CREATE, 0o600, dir_fd=folder)
        try:
            try:
                _write_all(fd, data)
                os.fchmod(fd, stat.S_IMODE(mode))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise
        os.fsync(folder)  # the rename itself made durable
    finally:
        os.close(folder)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
