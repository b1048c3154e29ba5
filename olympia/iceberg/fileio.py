"""The catalog's own reads and writes of a table's small Iceberg files (metadata files,
manifest lists, manifests): each in one request where the FileIO allows it.

Through pyiceberg's fsspec FileIO on S3, opening a file asks for its size first (a HEAD
before the GET), and creating one checks that it is missing first (a HEAD, then a LIST when
it is, then the PUT). Here a read is one GET of the bytes asked for, and a create is one PUT
that the store refuses when the object exists (If-None-Match), which also closes the gap
between the check and the write. Other FileIOs are used as pyiceberg uses them.
"""

from __future__ import annotations

import errno
from typing import Any
from urllib.parse import urlsplit

from pyiceberg.io import FileIO
from pyiceberg.io.fsspec import FsspecFileIO

from olympia.exceptions import FileAlreadyExists
from olympia.storage.retry import classify
from olympia.storage.schemes import LOCATION_SCHEMES


def _s3fs(io: FileIO, location: str) -> Any:
    """The S3 filesystem of ``io`` for ``location``, if ``io`` is fsspec's and the location
    is on S3."""
    scheme = urlsplit(location).scheme
    if isinstance(io, FsspecFileIO) and LOCATION_SCHEMES.get(scheme) == "s3":
        return io.get_fs(scheme)
    return None


def read_file(io: FileIO, location: str, limit: int | None = None) -> bytes:
    """The bytes of the file at ``location``: at most ``limit`` of them (``None``: all).

    Raises:
        FileNotFoundError: there is no such file.
        OSError: the read failed otherwise.
    """
    fs = _s3fs(io, location)
    if fs is not None:
        if limit is None:  # (s3fs asks for the size first when it may split the read)
            whole: bytes = fs.cat_file(location, max_concurrency=1)
            return whole
        try:
            data: bytes = fs.cat_file(location, start=0, end=limit)
        except OSError as exc:  # 416 (EINVAL): a range from byte 0 of an empty object
            if exc.errno != errno.EINVAL or fs.info(location)["size"] != 0:
                raise
            return b""
        return data
    with io.new_input(location).open() as stream:
        return stream.read() if limit is None else stream.read(limit)


def create_file(io: FileIO, location: str, data: bytes) -> None:
    """Create the file at ``location`` with ``data``, never over an existing one.

    Raises:
        FileExistsError: the file exists.
        OSError: the write failed otherwise.
    """
    fs = _s3fs(io, location)
    if fs is not None:
        try:
            fs.pipe_file(location, data, mode="create")
        except OSError as exc:  # s3fs raises a 412 as EINVAL, botocore's error its cause
            if classify(exc) is FileAlreadyExists:
                raise FileExistsError(errno.EEXIST, "the file exists", location) from exc
            raise
        return
    with io.new_output(location).create(overwrite=False) as stream:
        stream.write(data)
