"""The ``abfs`` scheme (``abfs://``, ``abfss://``, ``az://``): Azure Blob Storage and ADLS
Gen2 through the Blob service's client library (one request per operation), and the
mapping of its options to pyiceberg's ``adls.*`` FileIO properties.

A catalog URI is ``abfs://container/prefix`` or
``abfs://container@account.dfs.core.windows.net/prefix`` (the account must then agree with
``account_name``). The exclusive create is an upload with ``If-None-Match: *``; the
compare-and-swap an upload with ``If-Match`` on the ETag read; the conditional read a GET
with ``If-None-Match`` on the ETag (304 when unchanged).

Storage options: ``account_name`` (``adls.account-name``), ``account_key``
(``adls.account-key``), ``sas_token`` (``adls.sas-token``), ``connection_string``
(``adls.connection-string``) and ``endpoint_url``, the account's Blob endpoint
(``https://<account>.blob.core.windows.net`` by default; Azurite's is
``http://127.0.0.1:<port>/<account>``), which pyiceberg spells as
``adls.blob-storage-scheme`` and ``adls.blob-storage-authority`` (and the Data Lake
endpoint's ``adls.dfs-storage-*``, derived from it). Without a key, SAS token
or connection string the client uses Azure's default credential chain. Any other option is
refused.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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

# pyiceberg property -> storage option (the endpoint is two properties, below)
PROPERTIES = {"adls.account-name": "account_name", "adls.account-key": "account_key",
              "adls.sas-token": "sas_token", "adls.connection-string": "connection_string"}
AUTHORITY, URL_SCHEME = "adls.blob-storage-authority", "adls.blob-storage-scheme"
DFS_AUTHORITY, DFS_SCHEME = "adls.dfs-storage-authority", "adls.dfs-storage-scheme"
OPTIONS = (*PROPERTIES.values(), "endpoint_url")
PUBLIC_AUTHORITY = ".blob.core.windows.net"


@contextmanager
def _errors(path: str, keep: type[BaseException] | None = None) -> Iterator[None]:
    """The client's errors as the backend contract's: an existing blob (a failed
    ``If-None-Match: *``) as FileExistsError, others by HTTP status, and a failed
    connection as a ConnectionError (transient); ``keep`` passes unchanged."""
    from azure.core import exceptions as az

    try:
        yield
    except az.ResourceExistsError as exc:
        raise FileExistsError(f"{exc.reason}: {path}") from exc
    except az.HttpResponseError as exc:
        if keep is not None and isinstance(exc, keep):
            raise
        error = http_error(exc.status_code, path, str(exc.reason or type(exc).__name__))
        if error is None:
            raise
        raise error from exc
    except (az.ServiceRequestError, az.ServiceResponseError) as exc:
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc


class AzureBackend(Backend):
    """Azure Blob Storage: paths are ``container/blob``. Library retries are off (Storage
    retries)."""

    remote = True

    def __init__(self, make_client: Callable[[], Any], account_url: str) -> None:
        self._client = PerProcess(make_client)
        self._account_url = account_url

    def _blob(self, path: str) -> Any:
        container, _, name = path.partition("/")
        return self._client.get().get_blob_client(container, name)

    def _download(self, path: str, **condition: Any) -> tuple[bytes, str]:
        """The blob's content and ETag (one GET)."""
        with _errors(path):
            stream = self._blob(path).download_blob(**condition)
            return bytes(stream.readall()), str(stream.properties.etag)

    def read(self, path: str) -> bytes:
        return self._download(path)[0]

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """The tag is the blob's ETag; a GET with ``If-None-Match`` on it sends no body
        (304) while the blob keeps it."""
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError

        condition = {"etag": tag, "match_condition": MatchConditions.IfModified} if tag else {}
        try:
            return self._download(path, **condition)
        except HttpResponseError as exc:  # the client's class for a 304 varies by its code
            if exc.status_code == 304:
                return None, tag
            raise

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        with _errors(path):
            self._blob(path).upload_blob(data, overwrite=True)

    def create_exclusive(self, path: str, data: bytes) -> None:
        """An upload with ``If-None-Match: *`` (the client's ``overwrite=False``)."""
        with _errors(path):
            self._blob(path).upload_blob(data, overwrite=False)

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        """One GET (content and ETag), then an upload with ``If-Match`` on that ETag:
        refused (412) if anyone replaced the blob in between."""
        from azure.core import MatchConditions

        current, etag = self._download(path)
        if current != expected:
            raise FileExistsError(f"the blob was replaced: {path}")
        with _errors(path):
            self._blob(path).upload_blob(data, overwrite=True, etag=etag,
                                         match_condition=MatchConditions.IfNotModified)

    def exists(self, path: str) -> bool:
        with _errors(path):
            return bool(self._blob(path).exists())

    def list(self, prefix: str) -> list[FileInfo]:
        container, _, start = prefix.partition("/")
        with _errors(prefix):
            blobs = list(self._client.get().get_container_client(container).list_blobs(
                name_starts_with=start))
        return [FileInfo(f"{container}/{b.name}", int(b.size or 0),
                         b.last_modified.timestamp() if b.last_modified else 0.0)
                for b in blobs]

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        """One DELETE per blob (a missing one counts as deleted); the failures by path, as
        ``status: message``."""
        from azure.core.exceptions import HttpResponseError

        failed: dict[str, str] = {}
        for path in paths:
            try:
                with _errors(path, keep=HttpResponseError):
                    self._blob(path).delete_blob()
            except HttpResponseError as exc:
                if exc.status_code != 404:
                    failed[path] = f"{exc.status_code}: {exc.reason}"
        return failed

    def place(self, root: str) -> Hashable:
        return "abfs", self._account_url, root


def _account_url(options: Mapping[str, Any], account: str | None) -> str:
    if options.get("endpoint_url"):
        return str(options["endpoint_url"]).rstrip("/")
    if not account:
        raise InvalidArgumentError("an abfs:// catalog needs its account: give account_name, "
                                   "endpoint_url or connection_string, or name it in the URI "
                                   "(abfs://container@account.dfs.core.windows.net/...)")
    return f"https://{account}{PUBLIC_AUTHORITY}"


def open_backend(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    """The backend of ``abfs://container/prefix``.

    Raises:
        InvalidArgumentError: An option this scheme does not know, no container, or an
            account in the URI that the options contradict.
    """
    refuse_unknown(options, OPTIONS, "abfs")
    parts = urlsplit(uri)
    container, at, host = parts.netloc.rpartition("@")
    if not at:
        container, host = host, ""
    if not container:
        raise InvalidArgumentError(f"an abfs:// catalog URI names its container: {uri!r}")
    account = options.get("account_name") or (host.split(".")[0] if host else None)
    if host and options.get("account_name") and host.split(".")[0] != account:
        raise InvalidArgumentError(
            f"the catalog URI {uri!r} names account {host.split('.')[0]!r}, but storage "
            "option account_name names another")
    given = dict(options)
    timeouts: dict[str, Any] = {"retry_total": 0,
                                "connection_timeout": settings.connect_timeout,
                                "read_timeout": settings.read_timeout}
    url = "" if given.get("connection_string") else _account_url(given, account)

    def make_client() -> Any:
        from azure.storage.blob import BlobServiceClient

        if given.get("connection_string"):
            return BlobServiceClient.from_connection_string(given["connection_string"],
                                                            **timeouts)
        credential: Any
        if given.get("account_key"):
            credential = {"account_name": account, "account_key": given["account_key"]}
        elif given.get("sas_token"):
            credential = given["sas_token"]
        else:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential()
        return BlobServiceClient(url, credential=credential, **timeouts)

    backend = AzureBackend(make_client, url or make_client().url)
    return f"{container}/{parts.path.strip('/')}".rstrip("/") + "/", backend, None


def storage_options(properties: Mapping[str, Any]) -> dict[str, Any]:
    """Options from the ``adls.*`` properties.

    Raises:
        InvalidArgumentError: An ``adls.*`` property the catalog's files could not honour.
    """
    endpoint = {AUTHORITY: properties.get(AUTHORITY), URL_SCHEME: properties.get(URL_SCHEME)}
    ignored = (*endpoint, DFS_AUTHORITY, DFS_SCHEME)  # the catalog's files use the Blob API
    options = flat_storage_options({k: v for k, v in properties.items() if k not in ignored},
                                   PROPERTIES, "adls.", "abfs")
    if endpoint[AUTHORITY]:
        authority, scheme = str(endpoint[AUTHORITY]), str(endpoint[URL_SCHEME] or "https")
        account = options.get("account_name")
        if not account:
            raise InvalidArgumentError(f"property {AUTHORITY} needs adls.account-name")
        options["endpoint_url"] = (f"{scheme}://{account}{authority}"
                                   if authority.startswith(".")
                                   else f"{scheme}://{authority}/{account}")
    return options


def iceberg_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """The ``adls.*`` properties, read through pyiceberg's pyarrow FileIO (an
    ``endpoint_url`` becomes the Blob service's scheme and authority)."""
    out = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
           **flat_properties(options, PROPERTIES)}
    return {**out, **_endpoint_properties(options)}


def data_source_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """The FileIO properties (:func:`iceberg_properties`); other options as
    ``olympia.storage.<option>``."""
    rest = {k: v for k, v in options.items() if k != "endpoint_url"}
    return {**iceberg_properties(options), **flat_properties(rest, PROPERTIES, others=True)}


def _endpoint_properties(options: Mapping[str, Any]) -> dict[str, str]:
    if not options.get("endpoint_url"):
        return {}
    url = urlsplit(str(options["endpoint_url"]))
    account = str(options.get("account_name") or "")
    host = url.netloc
    authority = host[len(account):] if account and host.startswith(account + ".") else host
    # the Data Lake endpoint pyarrow asks first: Azure's is the account's .dfs. host; an
    # emulator's (Azurite) is its one endpoint
    return {URL_SCHEME: url.scheme, AUTHORITY: authority, DFS_SCHEME: url.scheme,
            DFS_AUTHORITY: authority.replace(".blob.", ".dfs.", 1)}

# Login and Password of an Airflow connection: the account name and key
CONNECTION = ("account_name", "account_key")
