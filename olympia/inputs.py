"""Reading a file a user names (a spec, a vars file, a saved plan): untrusted input.

Only regular files are read — a device (``/dev/zero``) or a FIFO is refused before anything
is read, and a FIFO swapped in after the check cannot block because the file is opened
non-blocking — and never more than a size limit, so no such path can exhaust memory or hang.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from olympia.exceptions import InvalidArgumentError

MIB = 1024 * 1024
_CHUNK = MIB


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def read_user_file(path: str | Path, limit: int) -> bytes:
    """The content of the regular file ``path`` (symbolic links followed), at most ``limit``
    bytes.

    Args:
        path: the file a user named.
        limit: the largest size accepted, in bytes.

    Returns:
        The file's bytes.

    Raises:
        InvalidArgumentError: the file cannot be read, is not a regular file or is larger
            than ``limit``. Its message is the reason only; callers name the file.
    """
    try:
        mode = os.stat(path).st_mode  # before opening: opening a FIFO may have effects
        if not stat.S_ISREG(mode):
            raise InvalidArgumentError(f"{_kind(mode)}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            mode = os.fstat(fd).st_mode  # what was opened, should the path have changed
            if not stat.S_ISREG(mode):
                raise InvalidArgumentError(f"{_kind(mode)}, not a regular file")
            chunks: list[bytes] = []
            size = 0
            while size <= limit:
                chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise InvalidArgumentError(exc.strerror or str(exc)) from None
    if size > limit:
        raise InvalidArgumentError(f"larger than the limit of {_size(limit)}")
    return b"".join(chunks)


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit} bytes"
