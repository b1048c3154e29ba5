"""The catalog's own reads and writes of a table's small Iceberg files (metadata files,
manifest lists, manifests): each in one request where the FileIO allows it.

Through pyiceberg's fsspec FileIO on S3, opening a file asks for its size first (a HEAD
before the GET), and creating one checks that it is missing first (a HEAD, then a LIST when
it is, then the PUT). Here a read is one GET of the bytes asked for, and a create is one PUT
that the store refuses when the object exists (If-None-Match), which also closes the gap
between the check and the write. Other FileIOs are used as pyiceberg uses them.

A catalog that chose the obstore S3 client (the storage option ``client=obstore``) gives
its FileIO the property ``olympia.storage.client=obstore``; these reads and creates then go
through obstore, with a store made from the FileIO's own ``s3.*`` properties (endpoint,
region, credentials, session token, anonymous access, timeouts), mapped as the catalog's
own options are: through the catalog's own obstore backend
(:class:`olympia.storage.s3_obstore.ObstoreBackend`). pyiceberg's own reads (data files,
scans) keep its FileIO.

On local disk (whichever FileIO), a create goes through the catalog's own local backend:
the file is synced before it gets its name, and a file already there is never truncated. A
root synced to disk therefore never names a metadata file a crash emptied.
"""

from __future__ import annotations

import errno
from typing import Any
from urllib.parse import urlsplit

from pyiceberg.io import FileIO
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

from olympia.exceptions import FileAlreadyExists, InvalidArgumentError
from olympia.lru import LruCache
from olympia.storage.file import LocalBackend
from olympia.storage.retry import StorageSettings, classify
from olympia.storage.s3 import CLIENT_PROPERTY
from olympia.storage.schemes import LOCATION_SCHEMES


def _s3fs(io: FileIO, location: str) -> Any:
    """The S3 filesystem of ``io`` for ``location``, if ``io`` is fsspec's and the location
    is on S3."""
    scheme = urlsplit(location).scheme
    if isinstance(io, FsspecFileIO) and LOCATION_SCHEMES.get(scheme) == "s3":
        return io.get_fs(scheme)
    return None


#: obstore backends kept for table files (one per set of ``s3.*`` properties).
BACKENDS = 16
_backends: LruCache[tuple[tuple[str, str], ...], Any] = LruCache(BACKENDS)


def _obstore(io: FileIO, location: str) -> tuple[Any, str] | None:
    """The catalog's obstore backend for ``io`` and the backend path of ``location``, if
    it is on S3 and ``io``'s catalog chose the obstore client (one backend per set of
    ``s3.*`` properties: the backend keeps a store per bucket).

    Raises:
        InvalidArgumentError: An ``s3.*`` property the obstore client cannot honour.
    """
    parts = urlsplit(location)
    if (io.properties.get(CLIENT_PROPERTY) != "obstore"
            or LOCATION_SCHEMES.get(parts.scheme) != "s3"):
        return None
    from olympia.storage import s3, s3_obstore

    props = tuple(sorted((k, str(v)) for k, v in io.properties.items()
                         if k.startswith("s3.") and v is not None))
    backend = _backends.get(props)
    if backend is None:
        for prop, _ in props:
            if prop not in s3.PROPERTIES and prop != "s3.force-virtual-addressing":
                raise InvalidArgumentError(
                    f"property {prop} is not supported with client=obstore")
        backend = s3_obstore.ObstoreBackend(s3.storage_options(dict(props)),
                                            StorageSettings())
        _backends.put(props, backend)  # (two racing makers keep one; both work)
    return backend, parts.netloc + parts.path


_LOCAL = LocalBackend()  # (syncs what it writes)


def _local_path(location: str) -> str | None:
    """The path of ``location`` if it is on local disk (as pyiceberg's FileIOs take it)."""
    scheme = urlsplit(location).scheme
    if scheme and LOCATION_SCHEMES.get(scheme) != "":
        return None
    return PyArrowFileIO.parse_location(location)[2]


def read_file(io: FileIO, location: str, limit: int | None = None) -> bytes:
    """The bytes of the file at ``location``: at most ``limit`` of them (``None``: all).

    Raises:
        FileNotFoundError: there is no such file.
        OSError: the read failed otherwise.
    """
    found = _obstore(io, location)
    if found is not None:
        backend, path = found
        return bytes(backend.read(path) if limit is None else backend.read_range(path, limit))
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
    found = _obstore(io, location)
    if found is not None:
        found[0].create_exclusive(found[1], data)
        return
    fs = _s3fs(io, location)
    if fs is not None:
        try:
            fs.pipe_file(location, data, mode="create")
        except OSError as exc:  # s3fs raises a 412 as EINVAL, botocore's error its cause
            if classify(exc) is FileAlreadyExists:
                raise FileExistsError(errno.EEXIST, "the file exists", location) from exc
            raise
        return
    path = _local_path(location)
    if path is not None:
        _LOCAL.create_exclusive(path, data)
        return
    with io.new_output(location).create(overwrite=False) as stream:
        stream.write(data)
