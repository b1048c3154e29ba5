"""The ``s3`` scheme (``s3://``, ``s3a://``): the S3 backend through s3fs (fsspec), one
request per operation, and the mapping of its options to pyiceberg's ``s3.*`` FileIO
properties (which the Spark data source and the Airflow connection use too)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from fsspec.asyn import sync

from olympia.exceptions import InvalidArgumentError
from olympia.storage.backends import (
    Backend,
    FileInfo,
    Job,
    Opened,
    RunAll,
    convert_property,
    run_in_turn,
)
from olympia.storage.retry import StorageSettings


class S3Backend(Backend):
    """S3 through s3fs: exclusive creates with ``pipe_file(mode="create")`` (If-None-Match).

    The filesystem (its S3 client is bound to fsspec's event loop) is never used across
    ``fork()``: a forked process makes its own on first use (fsspec's instance cache is
    keyed by process id, so it is a new one). The inherited one stays referenced, never
    used or closed: its client belongs to the parent's event loop, which does not run in
    the child.
    """

    remote = True

    def __init__(self, make_fs: Callable[[], Any]) -> None:
        self._make_fs = make_fs
        self._fs = make_fs()
        self._pid = os.getpid()

    @property
    def fs(self) -> Any:
        """The s3fs filesystem of this process."""
        if self._pid != os.getpid():
            _INHERITED.append(self._fs)
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

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        """One GET (content and ETag), then a PUT conditional on that ETag (If-Match): the
        store refuses it (412) if anyone replaced the object in between."""
        bucket, _, key = path.partition("/")

        async def get() -> tuple[bytes, str]:
            response = await self.fs._call_s3("get_object", Bucket=bucket, Key=key)
            async with response["Body"] as body:
                return bytes(await body.read()), str(response["ETag"])

        current, etag = sync(self.fs.loop, get)
        if current != expected:
            raise FileExistsError(errno.EEXIST, "the object was replaced", path)
        self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfMatch=etag)

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """One GET, conditional on the ETag ``tag`` (If-None-Match): 304 Not Modified, no
        body, when the object still has it."""
        bucket, _, key = path.partition("/")
        condition = {"IfNoneMatch": tag} if tag else {}

        async def get() -> tuple[bytes | None, str]:
            try:
                response = await self.fs._call_s3("get_object", Bucket=bucket, Key=key,
                                                  **condition)
            except Exception as exc:
                if tag and _status(exc) == 304:
                    return None, tag
                raise
            async with response["Body"] as body:
                return bytes(await body.read()), str(response["ETag"])

        result: tuple[bytes | None, str] = sync(self.fs.loop, get)
        return result

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

    def publish(self, files: Mapping[str, bytes], path: str, data: bytes,
                run_all: RunAll = run_in_turn, present: Sequence[str] = (),
                unchanged: Mapping[str, str] | None = None, alongside: Sequence[Job] = (),
                ) -> None:
        """The files in one concurrent batch of PUTs (s3fs's ``pipe``, on its own event
        loop), alongside a HEAD of each of ``present``, a GET of each of ``unchanged`` and
        the calls of ``alongside`` (through ``run_all``), then the root."""
        writes = [partial(self.fs.pipe, dict(files))] if files else []
        self._batch([*alongside, *writes], present, run_all, unchanged or {})
        self.create_exclusive(path, data)

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
        return "s3", endpoint, root  # (the obstore backend's place is the same)


_INHERITED: list[Any] = []  # filesystems a forked process inherited, never used here


OBJECT_OPTIONS = ("client_kwargs", "config_kwargs", "s3_additional_kwargs")


def _status(exc: BaseException) -> int | None:
    """The HTTP status of botocore's response on ``exc`` or the error it was raised from."""
    for err in (exc, exc.__cause__, exc.__context__):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
    return None


def s3_filesystem(options: Mapping[str, Any], settings: StorageSettings) -> Any:
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




CLIENTS = ("s3fs", "obstore")  # the storage option client: s3fs (the default) or obstore
CLIENT_PROPERTY = "olympia.storage.client"  # as a catalog or FileIO property


def client_of(options: Mapping[str, Any]) -> str:
    """The S3 client the storage option ``client`` chooses (``s3fs`` when not given).

    Raises:
        InvalidArgumentError: Another value (the option and the values are named).
    """
    client = options.get("client", CLIENTS[0])
    if client not in CLIENTS:
        raise InvalidArgumentError(
            f"storage option client must be one of {', '.join(CLIENTS)}")
    return str(client)


def open_backend(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    """The S3 backend of ``s3://bucket/prefix``: through s3fs, or through obstore with the
    storage option ``client=obstore`` (:mod:`olympia.storage.s3_obstore`); the client is
    imported on first use.

    Raises:
        InvalidArgumentError: A ``client`` other than ``s3fs`` or ``obstore``; with obstore,
            an option it does not honour.
    """
    client = client_of(options)
    options.pop("client", None)
    if client == "obstore":
        from olympia.storage import s3_obstore

        return s3_obstore.open_backend(uri, options, settings)
    parts = urlsplit(uri)
    root = (parts.netloc + parts.path).strip("/") + "/"
    return root, S3Backend(lambda: s3_filesystem(options, settings)), None


# pyiceberg property -> (s3fs option path, value kind)
PROPERTIES: dict[str, tuple[tuple[str, ...], str]] = {
    "s3.endpoint": (("client_kwargs", "endpoint_url"), "str"),
    "s3.region": (("client_kwargs", "region_name"), "str"),
    "s3.access-key-id": (("key",), "str"),
    "s3.secret-access-key": (("secret",), "str"),
    "s3.session-token": (("token",), "str"),
    "s3.profile-name": (("profile",), "str"),
    "s3.anonymous": (("anon",), "bool"),
    "s3.connect-timeout": (("config_kwargs", "connect_timeout"), "float"),
    "s3.request-timeout": (("config_kwargs", "read_timeout"), "float"),
}
# the options the Spark data source and the Airflow connection translate back (the
# timeouts are Olympia's own settings there)
_DATA_SOURCE = {path: prop for prop, (path, _) in PROPERTIES.items()
                if path[0] != "config_kwargs"}


def storage_options(properties: Mapping[str, Any]) -> dict[str, Any]:
    """s3fs options from pyiceberg's ``s3.*`` properties (endpoint, region, credentials,
    timeouts, virtual addressing).

    Raises:
        InvalidArgumentError: A value has the wrong form (names the property).
    """
    options: dict[str, Any] = {}
    for prop, (path, kind) in PROPERTIES.items():
        if properties.get(prop) is not None:
            _set(options, path, convert_property(prop, str(properties[prop]), kind))
    if convert_property("s3.force-virtual-addressing",
                        str(properties.get("s3.force-virtual-addressing", "false")), "bool"):
        _set(options, ("config_kwargs", "s3", "addressing_style"), "virtual")
    return options


def iceberg_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """The endpoint, region and credentials as ``s3.*``, read through pyiceberg's fsspec
    FileIO (the s3fs client the catalog files use too), and ``olympia.storage.client``,
    the catalog's S3 client: with ``obstore`` the catalog's own reads and writes of table
    files (:mod:`olympia.iceberg.fileio`) go through obstore too (pyiceberg ignores the
    property)."""
    # the client is always named: a table property (which anyone who can commit to the
    # table sets) never outranks the catalog's own
    out = {"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
           CLIENT_PROPERTY: client_of(options)}
    for prop, (path, _) in PROPERTIES.items():
        value: Any = options
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            out[prop] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def data_source_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """S3 credentials, endpoint and region as ``s3.*`` (which reach both the catalog files
    and the table files); other scalar options as ``olympia.storage.<option>``.

    Raises:
        InvalidArgumentError: A nested s3fs option other than the endpoint and region (it
            has no pyiceberg counterpart), naming it.
    """
    out: dict[str, str] = {}
    for key, value in options.items():
        if isinstance(value, Mapping):
            for inner, inner_value in value.items():
                prop = _DATA_SOURCE.get((key, inner))
                if prop is None:
                    raise InvalidArgumentError(
                        f"storage option {key}.{inner} has no pyiceberg counterpart: give the "
                        "data source its s3.* properties directly")
                out[prop] = str(inner_value)
        elif (key,) in _DATA_SOURCE:
            prop = _DATA_SOURCE[(key,)]
            out[prop] = str(value).lower() if isinstance(value, bool) else str(value)
        else:
            out[f"olympia.storage.{key}"] = str(value)
    return out


def _set(options: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        options = options.setdefault(part, {})
    options[path[-1]] = value

# Login and Password of an Airflow connection: the access key id and secret
CONNECTION = ("key", "secret")
