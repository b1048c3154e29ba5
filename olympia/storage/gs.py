"""The ``gs`` scheme: Google Cloud Storage through its client library (one JSON API request
per operation), and the mapping of its options to pyiceberg's ``gcs.*`` FileIO properties.

A catalog URI is ``gs://bucket/prefix``. The exclusive create is an upload conditional on
``ifGenerationMatch=0`` (the object has no live generation); the compare-and-swap an upload
conditional on the generation read; the conditional read ``ifGenerationNotMatch`` (304 Not
Modified when the object is unchanged).

Storage options (each also a pyiceberg property): ``endpoint_url`` (``gcs.service.host``,
e.g. an emulator), ``project`` (``gcs.project-id``), ``token`` (``gcs.oauth2.token``, an
OAuth2 access token) and ``token_expires_at`` (``gcs.oauth2.token-expires-at``, epoch
milliseconds: the token is not used after it). Without a token the client finds
Application Default Credentials. Any other option is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from olympia.exceptions import InvalidArgumentError
from olympia.storage.backends import (
    Backend,
    FileInfo,
    Opened,
    PerProcess,
    flat_properties,
    flat_storage_options,
    http_error,
    refuse_unknown,
)
from olympia.storage.retry import StorageSettings

# pyiceberg property -> storage option
PROPERTIES = {"gcs.service.host": "endpoint_url", "gcs.project-id": "project",
              "gcs.oauth2.token": "token", "gcs.oauth2.token-expires-at": "token_expires_at"}
FAR_FUTURE_MS = str(2**41)  # pyarrow's GCS file system needs an expiry with a token


@contextmanager
def _errors(path: str, keep: type[BaseException] | None = None) -> Iterator[None]:
    """The client's errors as the backend contract's: by HTTP status, and a failed
    connection as a ConnectionError (transient); ``keep`` passes unchanged."""
    from google.api_core import exceptions as api
    from requests import exceptions as http

    try:
        yield
    except api.GoogleAPICallError as exc:
        if keep is not None and isinstance(exc, keep):
            raise
        error = http_error(exc.code, path, exc.message or type(exc).__name__)
        if error is None:
            raise
        raise error from exc
    except (http.ConnectionError, http.Timeout) as exc:
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc


class GcsBackend(Backend):
    """Google Cloud Storage: paths are ``bucket/key``. Library retries are off (Storage
    retries); every request is bounded by the settings' connect and read timeouts."""

    remote = True

    def __init__(self, make_client: Callable[[], Any], endpoint: str | None,
                 timeout: tuple[float, float]) -> None:
        self._client = PerProcess(make_client)
        self._endpoint = endpoint
        self._timeout = timeout

    def _blob(self, path: str) -> Any:
        bucket, _, key = path.partition("/")
        return self._client.get().bucket(bucket).blob(key)

    def _download(self, path: str, **condition: Any) -> tuple[bytes, str]:
        """The object's content and generation (one GET)."""
        blob = self._blob(path)
        with _errors(path):
            data = blob.download_as_bytes(retry=None, timeout=self._timeout, checksum=None,
                                          **condition)
        return bytes(data), str(blob.generation)

    def read(self, path: str) -> bytes:
        return self._download(path)[0]

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """The tag is the object's generation; a GET with ``ifGenerationNotMatch`` sends no
        body (304) while the object keeps it (a server that ignores the condition sends
        the body, and the generation still tells)."""
        from google.api_core.exceptions import NotModified

        try:
            data, generation = self._download(
                path, **({"if_generation_not_match": int(tag)} if tag else {}))
        except NotModified:
            return None, tag
        return (None, tag) if generation == tag else (data, generation)

    def _upload(self, path: str, data: bytes, **condition: Any) -> None:
        with _errors(path):
            self._blob(path).upload_from_string(data, retry=None, timeout=self._timeout,
                                                checksum=None, **condition)

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self._upload(path, data)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self._upload(path, data, if_generation_match=0)

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        """One GET (content and generation), then an upload conditional on that
        generation: refused (412) if anyone replaced the object in between."""
        current, generation = self._download(path)
        if current != expected:
            raise FileExistsError(f"the object was replaced: {path}")
        self._upload(path, data, if_generation_match=int(generation))

    def exists(self, path: str) -> bool:
        with _errors(path):
            return bool(self._blob(path).exists(retry=None, timeout=self._timeout))

    def list(self, prefix: str) -> list[FileInfo]:
        bucket, _, key = prefix.partition("/")
        with _errors(prefix):
            blobs = list(self._client.get().list_blobs(bucket, prefix=key, retry=None,
                                                       timeout=self._timeout))
        return [FileInfo(f"{bucket}/{b.name}", int(b.size or 0),
                         b.updated.timestamp() if b.updated else 0.0) for b in blobs]

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        """One DELETE per object (a missing one counts as deleted); the failures by path,
        as ``status: message``."""
        from google.api_core.exceptions import GoogleAPICallError

        failed: dict[str, str] = {}
        for path in paths:
            try:
                with _errors(path, keep=GoogleAPICallError):
                    self._blob(path).delete(retry=None, timeout=self._timeout)
            except GoogleAPICallError as exc:
                if exc.code != 404:
                    failed[path] = f"{exc.code}: {exc.message}"
        return failed

    def place(self, root: str) -> Hashable:
        return "gs", self._endpoint, root


def _expiry(millis: Any) -> datetime | None:
    """A token's expiry (epoch milliseconds) as google-auth keeps it: naive UTC.

    Raises:
        InvalidArgumentError: Not a whole number of milliseconds.
    """
    if millis in (None, ""):
        return None
    try:
        return datetime.fromtimestamp(int(str(millis)) / 1000, UTC).replace(tzinfo=None)
    except (ValueError, OverflowError, OSError):
        raise InvalidArgumentError("storage option token_expires_at must be epoch "
                                   "milliseconds") from None


def open_backend(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    """The backend of ``gs://bucket/prefix``.

    Raises:
        InvalidArgumentError: An option this scheme does not know, or no bucket.
    """
    refuse_unknown(options, list(PROPERTIES.values()), "gs")
    parts = urlsplit(uri)
    if not parts.netloc:
        raise InvalidArgumentError(f"a gs:// catalog URI names its bucket: {uri!r}")
    endpoint = options.get("endpoint_url")
    given = dict(options)
    expiry = _expiry(given.get("token_expires_at"))

    def make_client() -> Any:
        from google.auth.exceptions import DefaultCredentialsError
        from google.cloud import storage

        credentials = None
        if given.get("token"):
            from google.oauth2.credentials import Credentials

            credentials = Credentials(  # type: ignore[no-untyped-call]
                token=str(given["token"]), expiry=expiry)

        try:
            return storage.Client(project=given.get("project"), credentials=credentials,
                                  client_options={"api_endpoint": endpoint} if endpoint
                                  else None)
        except DefaultCredentialsError:
            raise InvalidArgumentError(
                f"no Google Cloud credentials for {uri}: give the storage option token "
                "(gcs.oauth2.token) or set up Application Default Credentials") from None

    backend = GcsBackend(make_client, endpoint,
                         (settings.connect_timeout, settings.read_timeout))
    return (parts.netloc + parts.path).strip("/") + "/", backend, None


def storage_options(properties: Mapping[str, Any]) -> dict[str, Any]:
    """Options from the ``gcs.*`` properties.

    Raises:
        InvalidArgumentError: A ``gcs.*`` property the catalog's files could not honour.
    """
    return flat_storage_options(properties, PROPERTIES, "gcs.", "gs")


def iceberg_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """The ``gcs.*`` properties, read through pyiceberg's pyarrow FileIO (a token is given
    an expiry far ahead when none is set: pyarrow needs both)."""
    out = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
           **flat_properties(options, PROPERTIES)}
    if "gcs.oauth2.token" in out:
        out.setdefault("gcs.oauth2.token-expires-at", FAR_FUTURE_MS)
    return out


def data_source_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """The FileIO properties (:func:`iceberg_properties`); other options as
    ``olympia.storage.<option>``."""
    return {**iceberg_properties(options), **flat_properties(options, PROPERTIES, others=True)}

# Login and Password of an Airflow connection: the project and an OAuth2 token
CONNECTION = ("project", "token")
