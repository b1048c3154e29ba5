"""``olympia serve`` when its storage cannot take a write. A full disk and a file larger than
the store allows are 507 ``InsufficientStorageException``; a read-only store is 503
``ServiceUnavailableException`` (with ``Retry-After``), as every other storage failure. None
is a bug: no traceback, and the connection stays open for the client's next request. Nothing
half-written stays behind, and the catalog is unchanged.

Produced for real: on local disk a small tmpfs this test mounts (filled up, then remounted
read-only) and the server process's ``RLIMIT_FSIZE`` (writes past it fail with ``EFBIG``);
on the S3 server a prefix the filer makes read-only, and the answers other S3 stores give
for a full store or an object too large (SeaweedFS has none: a relay answers them).
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from iceberg_helpers import s3_properties
from restserver import RestServer, assert_error, version
from s3server import Fault, FaultProxy

from olympia.catalog.catalog import Catalog as OlympiaStore

SCHEMA = pa.schema([pa.field("id", pa.int64())])
CLIENT_KEYS = ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.region",
               "py-io-impl")

Answer = tuple[int, dict[str, str], Any]


def on_one_connection(server: RestServer, *requests: tuple[str, str, str | None],
                      ) -> list[Answer]:
    """Send ``requests`` (method, path, JSON body) one after the other on ONE keep-alive
    connection; fails if the server closed it after any answer."""
    address = urlsplit(server.url)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=120)
    answers: list[Answer] = []
    try:
        conn.connect()
        sock = conn.sock
        for method, path, body in requests:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            assert not response.will_close and conn.sock is sock, (
                f"the server closed the connection after {method} {path}")
            answers.append((response.status, {k.lower(): v for k, v in response.getheaders()},
                            json.loads(raw) if raw else None))
    finally:
        conn.close()
    return answers


def set_property(table: str, value: str) -> tuple[str, str, str]:
    """A commit setting one property of table ``ns.<table>``: the server writes a new
    metadata file (holding ``value``)."""
    body = {"requirements": [], "updates": [{"action": "set-properties",
                                             "updates": {"note": value}}]}
    return "POST", f"/v1/namespaces/ns/tables/{table}", json.dumps(body)


def create_namespace(name: str, value: str = "") -> tuple[str, str, str]:
    """A namespace create: the server writes only Olympia catalog files."""
    body = {"namespace": [name], "properties": {"note": value} if value else {}}
    return "POST", "/v1/namespaces", json.dumps(body)


def create_view(name: str) -> tuple[str, str, str]:
    """A view create: the server writes the view's metadata file, then catalog files."""
    body = {"name": name, "properties": {},
            "schema": {"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "type": "long", "required": False}]},
            "view-version": {"version-id": 1, "timestamp-ms": 0, "schema-id": 0,
                             "summary": {}, "default-namespace": ["ns"], "representations": [
                                 {"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}]}}
    return "POST", "/v1/namespaces/ns/views", json.dumps(body)


LOAD = ("GET", "/v1/namespaces/ns/tables/t", None)


def metadata_files(server: RestServer, table: str = "t") -> set[str]:
    """The names of the table's metadata files on local disk."""
    folder = Path(urlsplit(server.warehouse).path) / "ns" / table / "metadata"
    return {p.name for p in folder.iterdir() if p.name.endswith(".metadata.json")}


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block (unmounted after it)."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"this OS refuses to mount a tmpfs here ({mounted.stderr.strip()}); a "
                    "full or read-only disk needs root with the right to mount")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


@contextlib.contextmanager
def filled(disk: Path) -> Iterator[None]:
    """The file system of ``disk`` with no byte left, for the block."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    try:
        yield
    finally:
        filler.unlink()


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "8m") as mounted:
        yield mounted


@pytest.fixture
def disk_server(disk: Path) -> Iterator[RestServer]:
    """A server whose catalog and warehouse both live on the small tmpfs ``disk``, with
    namespace ``ns`` and table ``ns.t``."""
    with RestServer.on_new_catalog(disk) as server:
        client = server.client()
        client.create_namespace("ns")
        client.create_table(("ns", "t"), SCHEMA)
        yield server
    assert not any("Traceback" in line for line in server.log), "".join(server.log)


def test_a_full_disk_is_a_507_on_an_open_connection(disk: Path,
                                                    disk_server: RestServer) -> None:
    server = disk_server
    before, files = version(server), metadata_files(server)
    with filled(disk):
        table_commit, namespace_create, view_create, load = on_one_connection(
            server, set_property("t", "x"), create_namespace("other"), create_view("v"), LOAD)
    # the table's or the view's new metadata file could not be written; the namespace's
    # catalog files
    for answer in (table_commit, namespace_create, view_create):
        assert_error(answer, 507, "InsufficientStorageException", "No space left on device")
        assert "retry-after" not in answer[1]
    assert "table ns.t: cannot write its Iceberg metadata" in table_commit[2]["error"]["message"]
    assert "a view: cannot write its Iceberg metadata" in view_create[2]["error"]["message"]
    assert load[0] == 200
    assert version(server) == before and metadata_files(server) == files  # nothing left
    assert not list((disk / "warehouse" / "ns" / "v").rglob("*.json"))
    server.client().load_table(("ns", "t")).transaction().set_properties(
        note="x").commit_transaction()  # room again: the same commit lands
    assert len(metadata_files(server)) == len(files) + 1


def test_a_file_too_large_is_a_507_on_an_open_connection(tmp_path: Path) -> None:
    """The server process may write no file over 256 KiB (``RLIMIT_FSIZE``): a metadata file
    or a catalog file larger fails with ``EFBIG``, as on a file system that holds no
    larger file."""
    OlympiaStore.create(str(tmp_path / "catalog")).close()
    with RestServer(str(tmp_path / "catalog"), f"file://{tmp_path}/warehouse",
                    file_size_limit=256 * 1024) as server:
        client = server.client()
        client.create_namespace("ns")
        client.create_table(("ns", "t"), SCHEMA)
        before, files = version(server), metadata_files(server)
        big = "x" * 300_000
        table_commit, namespace_create, load, small = on_one_connection(
            server, set_property("t", big), create_namespace("other", big), LOAD,
            set_property("t", "small"))
        for answer in (table_commit, namespace_create):
            assert_error(answer, 507, "InsufficientStorageException", "File too large")
        assert load[0] == 200 and small[0] == 200
        assert small[2]["metadata"]["properties"]["note"] == "small"
        assert version(server) == before + 1 and len(metadata_files(server)) == len(files) + 1
    assert not any("Traceback" in line for line in server.log), "".join(server.log)


def test_a_read_only_disk_is_a_503_on_an_open_connection(disk: Path,
                                                         disk_server: RestServer) -> None:
    server = disk_server
    before, files = version(server), metadata_files(server)
    remount(disk, "ro")
    try:
        table_commit, namespace_create, load = on_one_connection(
            server, set_property("t", "x"), create_namespace("other"), LOAD)
    finally:
        remount(disk, "rw")
    for answer in (table_commit, namespace_create):
        assert_error(answer, 503, "ServiceUnavailableException", "Read-only file system")
        assert answer[1]["retry-after"] == "1"
    assert load[0] == 200
    assert version(server) == before and metadata_files(server) == files
    server.client().load_table(("ns", "t")).transaction().set_properties(
        note="x").commit_transaction()


# --- S3 --------------------------------------------------------------------------------


@pytest.fixture
def s3_rest(s3_server: Any) -> Iterator[tuple[RestServer, FaultProxy, str]]:
    """A server over a new catalog on the S3 server whose storage (catalog files and
    table metadata) goes through a relay that can answer chosen requests with an S3
    error, with namespace ``ns`` and table ``ns.t``; and the prefix of its files."""
    prefix = uuid.uuid4().hex[:12]
    props = s3_properties(s3_server, prefix)
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    with FaultProxy(s3_server.endpoint_url) as proxy:
        options = {**proxy.storage_options(s3_server.storage_options), "retry_attempts": 2,
                   "retry_backoff": 0.01}
        clients = [f"--client-property={key}={props[key]}" for key in CLIENT_KEYS]
        with RestServer(props["uri"], props["warehouse"], options, tuple(clients)) as server:
            client = server.client()
            client.create_namespace("ns")
            client.create_table(("ns", "t"), SCHEMA)
            yield server, proxy, f"{s3_server.bucket}/{prefix}"
        assert not any("Traceback" in line for line in server.log), "".join(server.log)


@pytest.mark.s3
@pytest.mark.parametrize(("status", "code"), [
    (400, "EntityTooLarge"),  # an object larger than the store takes (AWS: over 5 GiB)
    (403, "QuotaExceeded"),  # a bucket or account quota reached (Ceph, OpenStack Swift)
    (507, "XMinioStorageFull"),  # the store out of space (MinIO)
])
def test_an_s3_store_without_room_is_a_507_on_an_open_connection(
        s3_rest: tuple[RestServer, FaultProxy, str], status: int, code: str) -> None:
    server, proxy, prefix = s3_rest
    before = version(server)
    proxy.fault = Fault(frozenset({"PUT", "POST"}), status, code)
    table_commit, namespace_create, load = on_one_connection(
        server, set_property("t", "x"), create_namespace("other"), LOAD)
    proxy.fault = None
    assert_error(table_commit, 507, "InsufficientStorageException",
                 "table ns.t: cannot write its Iceberg metadata (")
    assert f"s3://{prefix}/warehouse/ns/t/metadata/" in table_commit[2]["error"]["message"]
    assert_error(namespace_create, 507, "InsufficientStorageException", f"s3://{prefix}/catalog/")
    assert load[0] == 200 and version(server) == before
    assert server.client().load_table(("ns", "t")).transaction().set_properties(
        note="x").commit_transaction().properties["note"] == "x"


@pytest.mark.s3
def test_a_read_only_s3_prefix_is_a_503_on_an_open_connection(
        s3_server: Any, s3_rest: tuple[RestServer, FaultProxy, str]) -> None:
    """The S3 server itself refuses the writes (SeaweedFS answers 500 ``InternalError``,
    which is tried again and then reported as failing storage)."""
    server, _, prefix = s3_rest
    before = version(server)
    s3_server.read_only(prefix)
    try:
        table_commit, namespace_create, load = on_one_connection(
            server, set_property("t", "x"), create_namespace("other"), LOAD)
    finally:
        s3_server.read_only(prefix, False)
    assert_error(table_commit, 503, "ServiceUnavailableException",
                 "table ns.t: cannot write its Iceberg metadata (")
    assert_error(namespace_create, 503, "ServiceUnavailableException", "failed after 2 tries")
    assert table_commit[1]["retry-after"] == namespace_create[1]["retry-after"] == "1"
    assert load[0] == 200 and version(server) == before
    server.client().load_table(("ns", "t")).transaction().set_properties(
        note="x").commit_transaction()
