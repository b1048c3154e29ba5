"""The catalog's own reads and writes of a table's small Iceberg files (metadata files,
manifest lists, manifests): each in one request where the FileIO allows it.

Through pyiceberg's fsspec FileIO on S3, opening a file asks for its size first (a HEAD
before the GET), and creating one checks that it is missing first (a HEAD, then a LIST when
it is, then the PUT). Here a read is one GET of the bytes asked for, and a create is one PUT
that the store refuses when the object exists (If-None-Match), which also closes the gap
between the check and the write. Other FileIOs are used as pyiceberg uses them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pyiceberg.io import FileIO
from pyiceberg.io.fsspec import FsspecFileIO

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
        data: bytes = fs.cat_file(location, start=0, end=limit)
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
        fs.pipe_file(location, data, mode="create")
        return
    with io.new_output(location).create(overwrite=False) as stream:
        stream.write(data)
