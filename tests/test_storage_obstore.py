"""S3 through the opt-in obstore client (``client=obstore``) on the real SeaweedFS server:
each backend operation, a catalog's commits and history, an Iceberg append whose table
files go through obstore, option refusals, the fork guard and the classification of
failures (the contract under random sequences, races and the commit scenarios run in
tests/test_cloud_schemes.py, kind ``obstore``)."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from s3server import Fault, FaultProxy

from olympia import Catalog
from olympia.exceptions import (
    FileAlreadyExists,
    FileChanged,
    FileNotFound,
    InsufficientStorageError,
    InvalidArgumentError,
    PartialDeleteError,
    StorageError,
    TransientStorageError,
)
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.options import iceberg_properties
from olympia.storage import Storage, classify, s3_obstore
from olympia.storage.retry import StorageSettings

pytestmark = pytest.mark.s3

GETS = frozenset({"GET", "HEAD"})


def _options(server: Any, **more: Any) -> dict[str, Any]:
    return {**server.storage_options, "client": "obstore", **more}


@pytest.fixture
def storage(s3_server: Any) -> Iterator[Storage]:
    store = Storage(f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}", _options(s3_server))
    yield store
    store.close()


def test_each_backend_operation(storage: Storage, s3_server: Any) -> None:
    """read, write, create over an existing file, replace after a change made by another
    client, a conditional read answered 304, exists, list (a partial name too), bulk
    delete with a missing key, an empty file."""
    assert type(storage.backend).__name__ == "ObstoreBackend"
    storage.write("a", b"1")
    storage.create_exclusive("vn/1", b"root")
    with pytest.raises(FileAlreadyExists, match="vn/1"):
        storage.create_exclusive("vn/1", b"other")
    assert storage.read("vn/1") == b"root"
    with pytest.raises(FileNotFound, match="missing"):
        storage.read("missing")
    assert storage.exists("a") and not storage.exists("missing")
    # replace: compare-and-swap, refused after a change made elsewhere (s3fs, out of band)
    assert storage.replace("a", b"2", b"1")
    s3_server.filesystem().pipe_file(storage.full("a"), b"changed")
    assert not storage.replace("a", b"3", b"2")
    assert not storage.replace("gone", b"3", b"2")
    assert storage.read("a") == b"changed"
    # a conditional read: the content and its ETag, then nothing while it is unchanged
    data, tag = storage.read_if_changed("a", "")
    assert data == b"changed" and tag
    assert storage.read_if_changed("a", tag) == (None, tag)
    storage.write("a", b"new")
    assert storage.read_if_changed("a", tag)[0] == b"new"
    storage.write("empty", b"")
    assert storage.read("empty") == b""
    assert [f.path for f in storage.list()] == ["a", "empty", "vn/1"]
    assert [f.path for f in storage.list("vn/")] == ["vn/1"]
    assert [f.path for f in storage.list("em")] == ["empty"]  # a partial name
    assert [(f.path, f.size) for f in storage.list("e")] == [("empty", 0)]
    storage.delete_many(["a", "never/written"])
    assert [f.path for f in storage.list()] == ["empty", "vn/1"]
    storage.publish({"node/x": b"n"}, "vn/2", b"root 2", present=["vn/1"])
    assert storage.read("node/x") == b"n" and storage.read("vn/2") == b"root 2"
    with pytest.raises(FileNotFound, match="vn/9"):
        storage.publish({}, "vn/3", b"r", present=["vn/9"])
    with pytest.raises(FileChanged, match="vn/1") as changed:  # published only on vn/1 as read
        storage.publish({}, "vn/3", b"r", unchanged={"vn/1": hashlib.sha256(b"?").hexdigest()})
    assert changed.value.digest == hashlib.sha256(storage.read("vn/1")).hexdigest()
    storage.publish({}, "vn/3", b"r", unchanged={"vn/1": changed.value.digest})
    assert storage.read("vn/3") == b"r"


# names a key may hold that URL encodings treat specially: percent signs (Olympia's own
# file names percent-encode table names), plus, space, reserved and non-ASCII characters
HOSTILE_NAMES = ("x", "d/ns%2Fa%C3%A9-t.binpb", "a+b", "a b", "a%20b", "%", "q=1&r;s",
                 "é/ü~'!$()*,:@", "x%2F..%2Fy")


def test_both_clients_address_the_same_files(storage: Storage, s3_server: Any) -> None:
    """Each name reaches the same object through both clients, both ways: neither
    client encodes a key differently (a key written by one and listed by the other
    comes back as it was written)."""
    other = Storage(storage.uri, s3_server.storage_options)
    assert storage.same_place(other) and other.same_place(storage)
    for n, name in enumerate(HOSTILE_NAMES):
        storage.write(f"o/{name}", f"obstore {n}".encode())
        other.write(f"s/{name}", f"s3fs {n}".encode())
    for n, name in enumerate(HOSTILE_NAMES):
        assert other.read(f"o/{name}") == f"obstore {n}".encode(), name
        assert storage.read(f"s/{name}") == f"s3fs {n}".encode(), name
    expected = {f"{side}/{name}" for side in "os" for name in HOSTILE_NAMES}
    assert {f.path for f in storage.list("")} == expected
    assert {f.path for f in other.list("")} == expected


def test_a_catalog_commits_reads_and_keeps_history(s3_server: Any) -> None:
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    catalog = Catalog.create(uri, _options(s3_server))
    catalog.create_namespace("s")
    catalog.create_table("s", "t1", columns=[{"name": "x", "type": "int4"}])
    catalog.create_table("s", "t2", columns=[{"name": "x", "type": "int4"}])
    again = Catalog.open(uri, _options(s3_server))
    assert type(again.storage.backend).__name__ == "ObstoreBackend"
    assert again.list_tables("s") == ["t1", "t2"]
    assert again.version == catalog.version
    assert again.at_version(again.version - 1).list_tables("s") == ["t1"]  # history
    assert Catalog.open(uri, s3_server.storage_options).list_tables("s") == ["t1", "t2"]


def test_iceberg_table_files_go_through_obstore(s3_server: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With the opt-in, the catalog's metadata files are created (and read) through
    obstore, never through s3fs; a table appended twice reads back whole."""
    import obstore

    import olympia.iceberg.fileio as fileio

    puts: list[str] = []

    original = obstore.put

    def spy(store: Any, key: str, data: Any, **kwargs: Any) -> Any:
        puts.append(key)
        return original(store, key, data, **kwargs)

    def no_s3fs(io: Any, location: str) -> Any:
        raise AssertionError(f"s3fs used for {location}")

    monkeypatch.setattr(obstore, "put", spy)
    monkeypatch.setattr(fileio, "_s3fs", no_s3fs)
    prefix = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    properties = iceberg_properties(prefix, _options(s3_server))
    assert properties["olympia.storage.client"] == "obstore"
    properties["py-io-impl"] = "pyiceberg.io.fsspec.FsspecFileIO"
    catalog = OlympiaCatalog("c", uri=f"{prefix}/catalog", warehouse=f"{prefix}/tables",
                             **{"olympia.create": "true"}, **properties)
    assert type(catalog.olympia.storage.backend).__name__ == "ObstoreBackend"
    catalog.create_namespace("ns")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    table = catalog.create_table(("ns", "t"), rows.schema)
    table.append(rows)
    table.append(rows)
    metadata = [key for key in puts if key.endswith(".metadata.json")]
    assert len(metadata) == 3  # create, two appends: each metadata file through obstore
    assert all("/tables/" in key for key in metadata)
    loaded = catalog.load_table(("ns", "t"))
    assert loaded.metadata_location.endswith(metadata[-1].rpartition("/")[2])
    assert loaded.scan().to_arrow().num_rows == 6
    catalog.close()


def test_options_are_mapped_or_refused() -> None:
    settings = StorageSettings(connect_timeout=3, read_timeout=7)
    config, client = s3_obstore.store_config(
        {"access_key_id": "k", "secret_access_key": "s", "token": "t", "region": "r",
         "endpoint_url": "http://h:1", "anon": "true", "skip_instance_cache": True,
         "use_listings_cache": False, "config_kwargs": {"s3": {"addressing_style": "virtual"},
                                                        "read_timeout": 9}}, settings)
    assert config == {"access_key_id": "k", "secret_access_key": "s", "session_token": "t",
                      "endpoint": "http://h:1", "region": "r", "skip_signature": True,
                      "virtual_hosted_style_request": True}
    assert client["connect_timeout"].total_seconds() == 3
    assert client["read_timeout"].total_seconds() == 9 and client["allow_http"]
    config, client = s3_obstore.store_config(
        {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": "https://h",
                                                      "region_name": "r"}}, settings)
    assert config["endpoint"] == "https://h" and config["region"] == "r"
    assert not config["virtual_hosted_style_request"] and not client["allow_http"]
    assert s3_obstore.store_config({}, settings)[0]["virtual_hosted_style_request"]  # AWS
    for options, message in [({"version_aware": True}, "version_aware"),
                             ({"s3_additional_kwargs": {}}, "s3_additional_kwargs"),
                             ({"config_kwargs": {"retries": {}}}, "config_kwargs.retries"),
                             ({"client_kwargs": "x"}, "client_kwargs must be a JSON object"),
                             ({"use_listings_cache": True}, "use_listings_cache can only be false"),
                             ({"skip_instance_cache": "false"},
                              "skip_instance_cache can only be true")]:
        with pytest.raises(InvalidArgumentError, match=message):
            s3_obstore.store_config(options, settings)
    with pytest.raises(InvalidArgumentError, match="addressing_style must be"):
        s3_obstore.store_config({"config_kwargs": {"s3": {"addressing_style": "x"}}}, settings)
    with pytest.raises(InvalidArgumentError, match="storage option client must be one of "
                                                   "s3fs, obstore"):
        Storage("s3://b/p", {"client": "OBSTORE"})
    with pytest.raises(InvalidArgumentError, match="client is not one a gs:// catalog knows"):
        Storage("gs://b/p", {"client": "obstore"})


def test_the_client_reaches_the_cli_and_catalog_properties(s3_server: Any, tmp_path: Any) -> None:
    """``-o client=obstore`` and OLYMPIA_STORAGE_OPTIONS choose it; a bad value is an error
    naming the option; the property ``olympia.storage.client`` survives the data source's
    properties."""
    import os

    from olympia.iceberg.options import storage_options
    from olympia.spark import properties_from_storage_options

    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    olympia = [str(os.path.join(os.path.dirname(sys.executable), "olympia"))]
    env = {**os.environ, "OLYMPIA_STORAGE_OPTIONS": json.dumps(_options(s3_server))}
    done = subprocess.run([*olympia, "init", "-c", uri], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    env["OLYMPIA_STORAGE_OPTIONS"] = json.dumps(s3_server.storage_options)
    done = subprocess.run([*olympia, "log", "-c", uri, "-o", "client=boto"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "storage option client must be one of" in done.stderr
    properties = properties_from_storage_options(_options(s3_server), uri)
    assert properties["olympia.storage.client"] == "obstore"
    assert storage_options(uri, properties)["client"] == "obstore"


# --- failures ------------------------------------------------------------------------


@pytest.fixture
def proxy(s3_server: Any) -> Iterator[FaultProxy]:
    with FaultProxy(s3_server.endpoint_url) as relay:
        yield relay


def _through(proxy: FaultProxy, s3_server: Any, **settings: Any) -> Storage:
    options = {**proxy.storage_options(s3_server.storage_options), "client": "obstore",
               **settings}
    return Storage(f"s3://{s3_server.bucket}/{uuid.uuid4().hex}", options)


@pytest.mark.parametrize(("status", "code", "methods"), [
    (503, "SlowDown", GETS), (500, "InternalError", GETS), (502, "BadGateway", GETS),
    (504, "GatewayTimeout", GETS), (429, "TooManyRequests", GETS),
    (400, "RequestTimeout", frozenset({"GET"})),  # a HEAD answer has no body: only 400
])
def test_transient_answers_are_retried_by_storage_alone(
        proxy: FaultProxy, s3_server: Any, status: int, code: str,
        methods: frozenset[str]) -> None:
    """Each transient answer is one request (obstore retries nothing) and Storage's
    retries; one that never recovers is a TransientStorageError after the tries."""
    storage = _through(proxy, s3_server, retry_attempts=3, retry_backoff=0)
    storage.write("vn/latest", b"7")
    proxy.fault = Fault(methods, status, code, times=2)
    proxy.requests = 0
    assert storage.read("vn/latest") == b"7"
    assert storage.stats.retries == 2 and proxy.refused == 2 and proxy.requests == 3
    proxy.fault = Fault(methods, status, code)
    storage.stats.reset()
    with pytest.raises(TransientStorageError, match="after 3 tries") as raised:
        storage.read("vn/latest")
    assert storage.display("vn/latest") in str(raised.value)


@pytest.mark.parametrize(("status", "code", "kind"), [
    (403, "AccessDenied", StorageError), (400, "InvalidRequest", StorageError),
    (501, "NotImplemented", StorageError), (507, "XMinioStorageFull", InsufficientStorageError),
    (400, "EntityTooLarge", InsufficientStorageError), (503, "SlowDown", TransientStorageError),
])
def test_each_answer_is_classified_once(proxy: FaultProxy, s3_server: Any, status: int,
                                        code: str, kind: type) -> None:
    """Permanent and no-room answers are raised at once (one request), of their kind."""
    storage = _through(proxy, s3_server, retry_attempts=2, retry_backoff=0)
    proxy.fault = Fault(frozenset({"PUT"}), status, code)
    for op in (lambda: storage.write("a", b"y"),
               lambda: storage.create_exclusive("vn/00000000000000000000000000000001", b"r")):
        proxy.refused = 0
        with pytest.raises(StorageError) as raised:
            op()
        assert type(raised.value) is kind
        assert proxy.refused == (2 if kind is TransientStorageError else 1)


def test_a_whole_bulk_delete_that_fails_is_retried(proxy: FaultProxy, s3_server: Any) -> None:
    storage = _through(proxy, s3_server, retry_attempts=3, retry_backoff=0)
    storage.write_many({"a": b"1", "b": b"2"})
    proxy.fault = Fault(frozenset({"POST"}), 503, "SlowDown", times=1)
    storage.delete_many(["a", "b", "absent"])
    assert storage.stats.retries == 1 and storage.list() == []


def test_keys_a_bulk_delete_left_are_reported(storage: Storage,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """obstore raises on the first key a DeleteObjects answer lists, without the others:
    each key is then deleted on its own, and the ones that fail are reported."""
    import obstore

    storage.write_many({"a": b"1", "b": b"2", "c": b"3"})
    original = obstore.delete
    denied = storage.full("b").partition("/")[2]

    def delete(store: Any, paths: Any) -> None:
        if not isinstance(paths, str):
            raise obstore.exceptions.GenericError(
                "Generic S3 error: DeleteObjects request failed for key x: AccessDenied")
        if paths == denied:
            raise obstore.exceptions.PermissionDeniedError(
                "Error performing DELETE in 1ms - Server returned non-2xx status code: "
                "403 Forbidden: <Error><Code>AccessDenied</Code></Error>")
        original(store, paths)

    monkeypatch.setattr(obstore, "delete", delete)
    with pytest.raises(PartialDeleteError) as raised:
        storage.delete_many(["a", "b", "c", "absent"])
    assert sorted(raised.value.errors) == ["b"]
    assert "AccessDenied" in str(raised.value.errors["b"])
    assert not isinstance(raised.value.errors["b"], TransientStorageError)
    assert [f.path for f in storage.list()] == ["b"]


def test_a_silent_server_is_transient() -> None:
    """A server that accepts and never answers: the read timeout, a transient error (a
    closed port: tests/test_cloud_schemes.py, with the other clients)."""
    with socket.socket() as silent:  # accepts, never answers: the read timeout
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        storage = Storage("s3://b/p", {"client": "obstore", "key": "k", "secret": "s",
                                       "endpoint_url": f"http://{silent.getsockname()[0]}:"
                                                       f"{silent.getsockname()[1]}",
                                       "retry_attempts": 1, "read_timeout": 0.5})
        with pytest.raises(TransientStorageError, match="Timeout"):
            storage.read("a")


def test_errors_obstore_gives_as_text_are_classified() -> None:
    from obstore.exceptions import GenericError

    def text(body: str) -> BaseException:
        return s3_obstore.os_error(GenericError(body), "b/k")

    assert classify(text("Server returned non-2xx status code: 503 Service Unavailable: "
                         "<Error><Code>SlowDown</Code></Error>")) is TransientStorageError
    assert classify(text("Server returned non-2xx status code: 400 Bad Request: "
                         "<Error><Code>QuotaExceeded</Code></Error>")) is InsufficientStorageError
    assert classify(text("Server returned non-2xx status code: 404 Not Found: ")) is FileNotFound
    assert classify(text("Server returned non-2xx status code: 412 x")) is FileAlreadyExists
    assert classify(text("HTTP error: error sending request\n HttpError {\n kind: Connect,"
                         )) is TransientStorageError
    assert classify(text("something else")) is StorageError
    guard = StorageError("x")
    assert s3_obstore.os_error(guard, "b/k") is guard


# --- fork ------------------------------------------------------------------------------

FORKS = textwrap.dedent("""
    import json, os, sys, time
    from olympia.exceptions import StorageError, TransientStorageError
    from olympia.storage import Storage

    uri, options = sys.argv[1], json.loads(sys.argv[2])

    def in_child(fn):
        pid = os.fork()
        if pid == 0:
            try:
                code = fn()
            except BaseException as exc:
                print("child:", type(exc).__name__, exc, flush=True)
                code = 9
            os._exit(code)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # a hang fails, it never blocks the parent
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return "hung"

    storage = Storage(uri, options)  # made, not used yet

    def before():  # forked before any use: works, with the inherited storage or its own
        storage.write("child", b"1")
        return 0 if Storage(uri, options).read("child") == b"1" else 1

    print("before", in_child(before), flush=True)
    storage.write("parent", b"2")  # the parent uses obstore now

    def after():  # refused at once with a clear error, never a hang, never retried
        for store in (storage, Storage(uri, options)):
            try:
                store.read("parent")
                return 1
            except TransientStorageError:
                return 2
            except StorageError as exc:
                if "forked after it was used" not in str(exc):
                    return 3
        return 0

    print("after", in_child(after), flush=True)
    print("parent", storage.read("parent"), flush=True)
""")


def test_a_forked_child_works_before_and_is_refused_after_first_use(s3_server: Any) -> None:
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    done = subprocess.run([sys.executable, "-c", FORKS, uri, json.dumps(_options(s3_server))],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["before 0", "after 0", "parent b'2'"], done.stdout


def test_a_table_property_never_chooses_the_client(s3_server: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A table's ``olympia.storage.client=obstore`` (anyone who can commit to the table
    sets its properties) does not switch a catalog on the default client to obstore: the
    catalog always names its own client, and the catalog's properties outrank the
    table's."""
    import obstore

    used: list[str] = []
    monkeypatch.setattr(obstore, "put", lambda *args, **kwargs: used.append("put"))
    monkeypatch.setattr(obstore, "get", lambda *args, **kwargs: used.append("get"))
    prefix = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    properties = iceberg_properties(prefix, dict(s3_server.storage_options))
    assert properties["olympia.storage.client"] == "s3fs"
    catalog = OlympiaCatalog("c", uri=f"{prefix}/catalog", warehouse=f"{prefix}/tables",
                             **{"olympia.create": "true"}, **properties)
    catalog.create_namespace("ns")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    table = catalog.create_table(("ns", "t"), rows.schema,
                                 properties={"olympia.storage.client": "obstore"})
    table.append(rows)
    assert catalog.load_table(("ns", "t")).scan().to_arrow().num_rows == 3
    assert used == []
    catalog.close()
