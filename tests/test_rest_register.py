"""Registering a metadata file the server cannot take, through ``olympia serve``: a missing
file, a folder, a file that is no Iceberg table metadata, or one larger than the server
reads (``--max-metadata-bytes``, gzip decompressed included) is the client's mistake: 400
``BadRequestException`` naming the file, nothing registered, nothing in the log. The bound
is enforced while reading: at most one byte past it is read."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from iceberg_helpers import s3_properties
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import Table
from restserver import RestServer, assert_error, request, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.exceptions import InvalidArgumentError
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.metadata import (
    DEFAULT_MAX_METADATA_BYTES,
    MetadataTooLargeError,
    read_table_metadata,
)

SCHEMA = pa.schema([pa.field("id", pa.int64())])
BOUND = 100_000
CLIENT_KEYS = ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.region",
               "py-io-impl")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    root = tmp_path_factory.mktemp("register")
    with RestServer.on_new_catalog(root, "--max-metadata-bytes", str(BOUND)) as started:
        started.client().create_namespace("ns")
        yield started
    assert not any("Traceback" in line for line in started.log), "".join(started.log)


@pytest.fixture(scope="module")
def table(server: RestServer) -> Table:
    return server.client().create_table(("ns", "source"), SCHEMA)


def register(server: RestServer, name: str, location: str) -> tuple[int, dict[str, str], Any]:
    return request(server, "POST", "/v1/namespaces/ns/register",
                   json.dumps({"name": name, "metadata-location": location}))


def refused(server: RestServer, location: str, words: str) -> None:
    """Registering ``location`` is a 400 naming it and saying ``words``; nothing lands."""
    before = version(server)
    name = f"r_{uuid.uuid4().hex[:8]}"
    answer = register(server, name, location)
    assert_error(answer, 400, "BadRequestException", f"cannot register table ns.{name}: ")
    assert location in answer[2]["error"]["message"] and words in answer[2]["error"]["message"]
    assert version(server) == before
    assert request(server, "HEAD", f"/v1/namespaces/ns/tables/{name}")[0] == 404


def write_metadata(table: Table, name: str, **properties: str) -> str:
    """A copy of ``table``'s metadata (with ``properties`` added) describing a table next
    to it (``<its location>-<uuid>``: no live table's place), written in that table's
    metadata folder as ``name``; returns where."""
    metadata = table.metadata.model_copy(update={
        "location": f"{table.location()}-{uuid.uuid4().hex[:8]}",
        "properties": {**table.metadata.properties, **properties}})
    location = f"{metadata.location}/metadata/{name}"
    ToOutputFile.table_metadata(metadata, table.io.new_output(location))
    return location


def test_a_missing_file_a_folder_or_garbage_is_a_400(server: RestServer, table: Table) -> None:
    folder = f"{table.location()}/metadata"
    refused(server, f"{folder}/00009-missing.metadata.json", "the file does not exist")
    refused(server, folder, "it is a folder, not a file")
    for name, content, words in (
            ("00009-text.metadata.json", b"metadata, honestly\n", "not JSON"),
            ("00009-shape.metadata.json", b'{"format-version": 2}', "not Iceberg table metadata"),
            ("00009-binary.metadata.json", bytes(range(256)), "not"),
            ("00009-plain.gz.metadata.json", b"{}", "not gzip data")):
        Path(urlsplit(f"{folder}/{name}").path).write_bytes(content)
        refused(server, f"{folder}/{name}", words)


def test_metadata_larger_than_the_bound_is_a_400(server: RestServer, table: Table) -> None:
    folder = f"{table.location()}/metadata"
    bound = f"larger than {BOUND} bytes, the most this catalog reads"
    big = write_metadata(table, "00009-big.metadata.json", note="x" * BOUND)
    refused(server, big, bound)
    # 60 MB (sparse: costs no disk), refused after reading a byte past the bound
    huge = Path(urlsplit(folder).path) / "00009-huge.metadata.json"
    with open(huge, "wb") as f:
        f.truncate(60_000_000)
    refused(server, f"{folder}/{huge.name}", bound)
    # small on disk, past the bound once decompressed
    bomb = Path(urlsplit(folder).path) / "00009-bomb.gz.metadata.json"
    bomb.write_bytes(gzip.compress(table.metadata.model_copy(update={"properties": {
        "note": "x" * 10 * BOUND}}).model_dump_json().encode()))
    assert bomb.stat().st_size < BOUND / 10
    refused(server, f"{folder}/{bomb.name}", bound)
    # under the bound (compressed or not) registers
    fits = write_metadata(table, "00009-fits.gz.metadata.json", note="x" * 1000)
    status, _, body = register(server, "fits", fits)
    assert status == 200, body
    assert body["metadata"]["properties"]["note"] == "x" * 1000


def test_the_bound_is_enforced_while_reading() -> None:
    """A file that never ends (``/dev/zero``) is refused after ``limit`` + 1 bytes."""
    with pytest.raises(MetadataTooLargeError, match="larger than 1000 bytes") as raised:
        read_table_metadata(PyArrowFileIO(), "file:///dev/zero", "ns.t", 1000)
    assert raised.value.path == "file:///dev/zero" and raised.value.limit == 1000


def test_the_bound_is_a_catalog_property(tmp_path: Path) -> None:
    properties = {"uri": str(tmp_path / "catalog"), "olympia.create": "true",
                  "warehouse": f"file://{tmp_path}/warehouse"}
    catalog = OlympiaCatalog("c", **properties, **{"olympia.max-metadata-size": "2000"})
    catalog.create_namespace("ns")
    location = catalog.create_table(("ns", "t"), SCHEMA).metadata_location
    assert Path(urlsplit(location).path).stat().st_size < 2000
    big = catalog.load_table(("ns", "t")).transaction().set_properties(
        note="x" * 2000).commit_transaction().metadata_location
    with pytest.raises(MetadataTooLargeError, match="catalog property olympia.max-metadata"):
        OlympiaCatalog("c", **properties, **{"olympia.max-metadata-size": "2000"}).load_table(
            ("ns", "t"))
    assert OlympiaCatalog("c", **properties).load_table(("ns", "t")).metadata_location == big
    assert DEFAULT_MAX_METADATA_BYTES == 32 * 1024 * 1024
    for wrong in ("0", "-1", "1e6", "lots"):
        with pytest.raises(InvalidArgumentError, match="olympia.max-metadata-size must be"):
            OlympiaCatalog("c", **properties, **{"olympia.max-metadata-size": wrong})


@pytest.mark.s3
def test_registering_on_s3(s3_server: Any) -> None:
    props = s3_properties(s3_server, uuid.uuid4().hex[:12])
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    clients = [f"--client-property={key}={props[key]}" for key in CLIENT_KEYS]
    with RestServer(props["uri"], props["warehouse"], s3_server.storage_options,
                    (*clients, "--max-metadata-bytes", str(BOUND))) as server:
        client = server.client()
        client.create_namespace("ns")
        table = client.create_table(("ns", "source"), SCHEMA)
        folder = f"{table.location()}/metadata"
        fs = s3_server.filesystem()
        refused(server, f"{folder}/00009-missing.metadata.json", "the file does not exist")
        refused(server, folder, "is unreadable")  # SeaweedFS reads a folder as empty
        fs.pipe_file(f"{folder}/00009-text.metadata.json".removeprefix("s3://"), b"text")
        refused(server, f"{folder}/00009-text.metadata.json", "not JSON")
        big = write_metadata(table, "00009-big.metadata.json", note="x" * BOUND)
        refused(server, big, f"larger than {BOUND} bytes")
        fits = write_metadata(table, "00009-fits.metadata.json", note="small")
        assert register(server, "fits", fits)[0] == 200
    assert not any("Traceback" in line for line in server.log), "".join(server.log)
