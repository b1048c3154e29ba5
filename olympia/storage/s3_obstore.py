"""The S3 backend through obstore (Rust's ``object_store``): the storage option
``client=obstore`` of an ``s3://`` catalog. One request per operation, as the s3fs backend
(:mod:`olympia.storage.s3`), at a tenth of its CPU per request.

It is an explicit opt-in because obstore is not fork-safe: once a process has sent a
request through it (its Tokio runtime has started), a process forked from it hangs on its
next request, even through a store it makes anew. So the first process that makes or uses
an obstore store here is recorded (:func:`_guard`), and in any other process (a forked
child) every operation raises :class:`~olympia.exceptions.StorageError` at once, saying
so, instead of hanging. A child forked before any use works normally.

Options: exactly the spellings the s3fs backend takes for credentials, endpoint, region,
anonymous access, timeouts and addressing style (:data:`OPTIONS`); anything else is refused
by name (no value is ever echoed). obstore's own retries are off: Olympia's ``Storage`` is
the one retry layer (a retried conditional create whose first try landed would read as a
lost race).

Errors: obstore gives a missing object as ``FileNotFoundError`` and failed preconditions
as its own classes; other failures only as text, from which one documented pattern is
read (:data:`STATUS`: object_store's ``Server returned non-2xx status code: <status>``,
the S3 ``<Code>`` of the body it quotes, and the kind of a failed connection) and turned
into the ``OSError`` that :func:`olympia.storage.retry.classify` reads.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Hashable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from olympia.exceptions import (
    FileAlreadyExists,
    FileNotFound,
    InsufficientStorageError,
    InvalidArgumentError,
    StorageError,
    TransientStorageError,
)
from olympia.storage.backends import Backend, FileInfo, Opened
from olympia.storage.retry import StorageSettings, kind_of_code

if TYPE_CHECKING:
    from obstore.store import S3Store

# the storage options honoured, as s3fs spells them (nested ones as parent.child)
SCALARS = ("key", "secret", "token", "access_key_id", "secret_access_key", "endpoint_url",
           "region", "anon", "use_listings_cache", "skip_instance_cache")
NESTED = {"client_kwargs": ("endpoint_url", "region_name"),
          "config_kwargs": ("connect_timeout", "read_timeout", "s3")}
OPTIONS = (*SCALARS, *(f"{k}.{v}" for k, vs in NESTED.items() for v in vs),
           "config_kwargs.s3.addressing_style")

# object_store's text for an answer that is not 2xx, the S3 code in the body it quotes, and
# the kind of an HTTP failure without an answer (reqwest's: Connect, Request, Timeout, ...)
STATUS = re.compile(r"Server returned non-2xx status code: (\d{3}) ")
CODE = re.compile(r"<Code>(\w+)</Code>")
HTTP_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
HTTP_ERRNOS = {"Connect": errno.ECONNREFUSED, "Timeout": errno.ETIMEDOUT,
               "Request": errno.ECONNRESET, "Interrupted": errno.ECONNRESET,
               "Decode": errno.ECONNRESET}
KIND_ERRNOS: dict[type[StorageError], int] = {
    FileNotFound: errno.ENOENT, FileAlreadyExists: errno.EEXIST,
    InsufficientStorageError: errno.ENOSPC, TransientStorageError: errno.EAGAIN}

_owner: int | None = None  # the process that first made or used an obstore store
_owner_lock = threading.Lock()


def _guard() -> None:
    """Record this process as obstore's, or refuse in a process forked after it was used.

    Raises:
        StorageError: This is not the process that made or used obstore first.
    """
    global _owner
    pid = os.getpid()
    if _owner == pid:
        return
    with _owner_lock:
        if _owner is None:
            _owner = pid
            return
    raise StorageError(
        "the obstore S3 client (storage option client=obstore) cannot be used in a process "
        "forked after it was used (its runtime does not survive fork() and the request "
        "would hang); use the default client (client=s3fs) in forked processes, or start "
        "them before the first use")


def store_config(options: Mapping[str, Any],
                 settings: StorageSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The S3Store configuration and client options of s3fs-style storage ``options``
    (the one mapping the backend and the table files' reads share).

    Raises:
        InvalidArgumentError: An option obstore is not given here (named, never its value).
    """
    opts = dict(options)
    nested: dict[str, dict[str, Any]] = {}
    for parent, known in NESTED.items():
        value = opts.pop(parent, None) or {}
        if not isinstance(value, Mapping):
            raise InvalidArgumentError(f"storage option {parent} must be a JSON object")
        for inner in value:
            if inner not in known:
                _refuse(f"{parent}.{inner}")
        nested[parent] = dict(value)
    for key in opts:
        if key not in SCALARS:
            _refuse(key)
    # obstore keeps no listing cache and shares no client between backends: what these
    # s3fs options ask for when they have Olympia's values, and refused otherwise
    for key, honoured in (("use_listings_cache", False), ("skip_instance_cache", True)):
        if key in opts and _truthy(opts[key], key) is not honoured:
            raise InvalidArgumentError(
                f"storage option {key} can only be {str(honoured).lower()} with "
                "client=obstore (it keeps no listing cache and shares no client)")
    s3 = nested["config_kwargs"].pop("s3", None) or {}
    if not isinstance(s3, Mapping) or set(s3) - {"addressing_style"}:
        _refuse("config_kwargs.s3." + next(iter(set(s3) - {"addressing_style"}), "")
                if isinstance(s3, Mapping) else "config_kwargs.s3")
    config: dict[str, Any] = {}
    for names, target in ((("key", "access_key_id"), "access_key_id"),
                          (("secret", "secret_access_key"), "secret_access_key"),
                          (("token",), "session_token")):
        for name in names:
            if opts.get(name) is not None:
                config[target] = str(opts[name])
    endpoint = opts.get("endpoint_url") or nested["client_kwargs"].get("endpoint_url")
    region = opts.get("region") or nested["client_kwargs"].get("region_name")
    if endpoint:
        config["endpoint"] = str(endpoint)
    if region:
        config["region"] = str(region)
    if _truthy(opts.get("anon"), "anon"):
        config["skip_signature"] = True
    style = s3.get("addressing_style")
    if style not in (None, "auto", "virtual", "path"):
        raise InvalidArgumentError(
            "storage option config_kwargs.s3.addressing_style must be virtual, path or auto")
    # botocore's "auto": virtual on AWS, path on another endpoint; object_store's default
    # is path style everywhere
    config["virtual_hosted_style_request"] = style == "virtual" or (
        style in (None, "auto") and not endpoint)
    timeouts = nested["config_kwargs"]
    connect = _seconds(timeouts.get("connect_timeout", settings.connect_timeout),
                       "config_kwargs.connect_timeout")
    read = _seconds(timeouts.get("read_timeout", settings.read_timeout),
                    "config_kwargs.read_timeout")
    # read_timeout bounds each wait for bytes (botocore's read_timeout); the whole request
    # is bounded too (object_store's default is 30 s, short for a large table file)
    client = {"connect_timeout": timedelta(seconds=connect),
              "read_timeout": timedelta(seconds=read), "timeout": timedelta(seconds=600),
              "allow_http": str(endpoint or "").lower().startswith("http://")}
    return config, client


def _refuse(option: str) -> None:
    raise InvalidArgumentError(
        f"storage option {option} is not supported with client=obstore "
        f"(supported: {', '.join(OPTIONS)}; or use the default client=s3fs)")


def _truthy(value: Any, name: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    lowered = str(value).strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidArgumentError(f"storage option {name} must be true or false")
    return lowered == "true"


def _seconds(value: Any, name: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"storage option {name} must be a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise InvalidArgumentError(f"storage option {name} must be from 0 to 3600 seconds")
    return seconds


def make_store(bucket: str, config: Mapping[str, Any], client: Mapping[str, Any]) -> S3Store:
    """An S3Store of ``bucket`` that never retries on its own (Olympia's Storage does)."""
    from obstore.store import S3Store

    _guard()
    no_retries: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=600),
                       "backoff": {"init_backoff": timedelta(milliseconds=100),
                                   "max_backoff": timedelta(seconds=1), "base": 2}}
    return S3Store(bucket, config=dict(config),  # type: ignore[arg-type]
                   client_options=dict(client),  # type: ignore[arg-type]
                   retry_config=no_retries)


def os_error(exc: BaseException, path: str) -> BaseException:
    """The error :func:`olympia.storage.retry.classify` reads right for obstore's ``exc``
    about ``path`` (the bucket and key): missing, exists, transient, no room or (an
    ``OSError`` with ``EIO``) permanent. Other exceptions (the fork guard's) are kept."""
    from obstore.exceptions import (
        AlreadyExistsError,
        BaseError,
        NotFoundError,
        PreconditionError,
    )

    if isinstance(exc, FileNotFoundError | NotFoundError):
        return FileNotFoundError(errno.ENOENT, "no such object", path)
    if isinstance(exc, AlreadyExistsError | PreconditionError):
        return FileExistsError(errno.EEXIST, "the object exists or changed", path)
    if not isinstance(exc, BaseError | OSError):
        return exc
    text = str(exc)
    status = STATUS.search(text)
    if status:
        code_found = CODE.search(text)
        code = code_found.group(1) if code_found else ""
        kind = kind_of_code(code, int(status.group(1)))
        what = f"S3 answered {status.group(1)}{' ' + code if code else ''}"
        number = KIND_ERRNOS.get(kind, errno.EIO)
        error_class = {errno.ENOENT: FileNotFoundError, errno.EEXIST: FileExistsError}.get(
            number, OSError)
        return error_class(number, what, path)
    http = HTTP_KIND.search(text)
    if http and http.group(1) in HTTP_ERRNOS:
        return OSError(HTTP_ERRNOS[http.group(1)], f"S3 request failed ({http.group(1)})",
                       path)
    return OSError(errno.EIO, f"S3 request failed ({type(exc).__name__})", path)


class ObstoreBackend(Backend):
    """S3 through obstore: one S3Store per bucket (made on first use), each operation one
    request: a GET, a HEAD, a PUT (``mode="create"``: If-None-Match; a replace: If-Match
    on the ETag of the GET before it), a LIST, a DeleteObjects."""

    remote = True

    def __init__(self, options: Mapping[str, Any], settings: StorageSettings) -> None:
        self._config, self._client = store_config(options, settings)
        self._endpoint = self._config.get("endpoint")
        self._stores: dict[str, S3Store] = {}
        self._lock = threading.Lock()

    def _store(self, path: str) -> tuple[S3Store, str]:
        _guard()
        bucket, _, key = path.partition("/")
        store = self._stores.get(bucket)
        if store is None:
            with self._lock:
                store = self._stores.get(bucket)
                if store is None:
                    store = self._stores[bucket] = make_store(bucket, self._config,
                                                              self._client)
        return store, key

    def read(self, path: str) -> bytes:
        import obstore

        store, key = self._store(path)
        try:
            return bytes(obstore.get(store, key).bytes())
        except Exception as exc:
            raise os_error(exc, path) from exc

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self._put(path, data, None)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self._put(path, data, "create")

    def read_range(self, path: str, limit: int) -> bytes:
        """At most the first ``limit`` bytes of the file (one ranged GET; an empty file,
        whose range object_store's server answers 416, is read whole)."""
        import obstore

        store, key = self._store(path)
        try:
            if limit == 0:
                return b""
            try:
                return bytes(obstore.get_range(store, key, start=0, end=limit))
            except Exception as exc:
                status = STATUS.search(str(exc))
                if status is None or status.group(1) != "416":
                    raise
                return bytes(obstore.get(store, key).bytes())[:limit]
        except Exception as exc:
            raise os_error(exc, path) from exc

    def _put(self, path: str, data: bytes, mode: Any) -> None:
        import obstore

        store, key = self._store(path)
        try:
            obstore.put(store, key, data, mode=mode, use_multipart=False)
        except Exception as exc:
            raise os_error(exc, path) from exc

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        """One GET (content and ETag), then a PUT conditional on that ETag (If-Match)."""
        import obstore

        store, key = self._store(path)
        try:
            result = obstore.get(store, key)
            current, etag = bytes(result.bytes()), result.meta["e_tag"]
        except Exception as exc:
            raise os_error(exc, path) from exc
        if current != expected or etag is None:
            raise FileExistsError(errno.EEXIST, "the object was replaced", path)
        self._put(path, data, {"e_tag": etag})

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """One GET, conditional on the ETag ``tag`` (If-None-Match): 304, no body, when
        the object still has it."""
        import obstore
        from obstore.exceptions import NotModifiedError

        store, key = self._store(path)
        try:
            result = obstore.get(store, key, options={"if_none_match": tag} if tag else None)
            return bytes(result.bytes()), result.meta["e_tag"] or ""
        except NotModifiedError:
            return None, tag
        except Exception as exc:
            raise os_error(exc, path) from exc

    def exists(self, path: str) -> bool:
        """One HEAD."""
        import obstore

        store, key = self._store(path)
        try:
            obstore.head(store, key)
        except FileNotFoundError:
            return False
        except Exception as exc:
            error = os_error(exc, path)
            if isinstance(error, FileNotFoundError):
                return False
            raise error from exc
        return True

    def list(self, prefix: str) -> list[FileInfo]:
        """object_store lists whole path segments: the folder of ``prefix`` is listed and
        the keys that do not start with it are dropped."""
        import obstore

        store, key = self._store(prefix)
        bucket = prefix.partition("/")[0]
        folder = key.rpartition("/")[0]
        out = []
        try:
            for chunk in obstore.list(store, folder or None, chunk_size=1000):
                for meta in chunk:
                    full = f"{bucket}/{meta['path']}"
                    if full.startswith(prefix):
                        out.append(FileInfo(full, int(meta["size"]),
                                            meta["last_modified"].timestamp()))
        except Exception as exc:
            raise os_error(exc, prefix) from exc
        return out

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        """One DeleteObjects request (the keys of one bucket). obstore raises on the first
        key the answer lists as not deleted, without the others: then each key is deleted
        on its own, to learn which ones fail and why."""
        import obstore

        if not paths:
            return {}
        store, _ = self._store(paths[0])
        keys = [path.partition("/")[2] for path in paths]
        try:
            obstore.delete(store, keys)
            return {}
        except Exception as exc:
            if STATUS.search(str(exc)) or HTTP_KIND.search(str(exc)):  # the request failed
                raise os_error(exc, paths[0]) from exc
        left: dict[str, str] = {}
        for path, key in zip(paths, keys, strict=True):
            try:
                obstore.delete(store, key)
            except FileNotFoundError:
                continue
            except Exception as exc:
                code = CODE.search(str(exc))
                error = os_error(exc, path)
                if not isinstance(error, FileNotFoundError):
                    left[path] = f"{code.group(1) if code else 'Error'}: {error}"
        return left

    def place(self, root: str) -> Hashable:
        """As the s3fs backend's (:meth:`olympia.storage.s3.S3Backend.place`): the same
        endpoint and root address the same files, whichever client reaches them."""
        return "s3", self._endpoint, root


def open_backend(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    """The obstore backend of ``s3://bucket/prefix`` (obstore is imported on first use).

    Raises:
        InvalidArgumentError: An option it does not honour (named).
    """
    parts = urlsplit(uri)
    root = (parts.netloc + parts.path).strip("/") + "/"
    return root, ObstoreBackend(options, settings), None
