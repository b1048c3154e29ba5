"""What a load and a commit read again (issue 46): counted, never timed.

A metadata file is read (and parsed) once per process: the definition records the SHA-256
of its bytes, so a process that wrote or read those bytes answers from memory, and a
process that did not reads them and checks them against it. The latest version is found
again, when nothing changed, by asking whether the known root is the same file and the next
one is missing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import Location
from hypothesis import example, given, settings
from hypothesis import strategies as st
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows, s3_properties
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import SetPropertiesUpdate, update_table_metadata
from pyiceberg.types import LongType, NestedField

from olympia.catalog.catalog import Catalog
from olympia.catalog.files import LATEST
from olympia.exceptions import FileNotFound
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg import session as iceberg_session
from olympia.iceberg.metadata import (
    DIGEST_PROPERTY,
    IcebergMetadataError,
    metadata_json,
    parse_table_metadata,
)
from olympia.server import CatalogService
from olympia.server.models import CommitTableBody
from olympia.storage import Storage


class MetadataReads:
    """Counts the metadata files an OlympiaCatalog reads and parses while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = self.parses = 0
        read, parse = iceberg_session.read_metadata_file, iceberg_session.parse_table_metadata

        def reading(*args: Any) -> bytes:
            self.reads += 1
            return read(*args)

        def parsing(*args: Any) -> Any:
            self.parses += 1
            return parse(*args)

        monkeypatch.setattr(iceberg_session, "read_metadata_file", reading)
        monkeypatch.setattr(iceberg_session, "parse_table_metadata", parsing)

    def reset(self) -> None:
        self.reads = self.parses = 0


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> MetadataReads:
    return MetadataReads(monkeypatch)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def properties(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "local":
        return local_properties(tmp_path)
    return s3_properties(request.getfixturevalue("s3_server"), tmp_path.name)


def _requests(catalog: OlympiaCatalog) -> tuple[int, int]:
    """(reads, existence questions) the catalog's storage has made so far."""
    stats = catalog.olympia.storage.stats
    return stats.reads, stats.exists


def test_a_load_after_a_load_reads_no_metadata_file(properties: dict[str, str],
                                                     counted: MetadataReads) -> None:
    writer = open_catalog(properties)
    writer.create_namespace("ns")
    writer.create_table("ns.t", SCHEMA).append(rows(0))
    reader = open_catalog({**properties, "skip_instance_cache": "true"}, "reader")
    counted.reset()
    first = reader.load_table("ns.t")
    assert (counted.reads, counted.parses) == (1, 1)
    counted.reset()
    before = _requests(reader)
    again = reader.load_table("ns.t")
    after = _requests(reader)
    assert (counted.reads, counted.parses) == (0, 0)
    assert again.metadata is first.metadata
    local = properties["uri"].startswith("/")
    # nothing changed: one conditional read of the known root (a stat; on S3 a GET with
    # If-None-Match, answered 304) and one probe of the next (free on local disk)
    assert (after[0] - before[0], after[1] - before[1]) == ((1, 0) if local else (1, 1))


def test_an_append_after_an_append_rereads_nothing(properties: dict[str, str],
                                                   counted: MetadataReads) -> None:
    catalog = open_catalog(properties)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    table.append(rows(0))
    counted.reset()
    table.append(rows(3))
    table.append(rows(6))
    assert (counted.reads, counted.parses) == (0, 0)
    assert len(catalog.load_table("ns.t").scan().to_arrow()) == 9
    assert (counted.reads, counted.parses) == (0, 0)


def test_what_is_kept_is_what_the_file_holds(tmp_path: Path) -> None:
    """The parsed form a commit keeps equals the parse of the bytes it wrote, and the
    definition records their digest."""
    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA, properties={"a": "b"})
    table.append(rows(0))
    with table.update_schema() as update:
        update.add_column("extra", LongType())
    with table.transaction() as txn:
        txn.set_properties(c="d")
    for _ in range(2):
        table = catalog.load_table("ns.t")
        data = Path(table.metadata_location.removeprefix("file://")).read_bytes()
        assert parse_table_metadata(data, table.metadata_location, "ns.t") == table.metadata
        definition = catalog.olympia.load_table("ns", "t")
        assert definition.format_properties[DIGEST_PROPERTY] == hashlib.sha256(data).hexdigest()
        table.append(rows(3))


_SUMMARY_KEYS = st.sampled_from(["added-records", "total-records", "note", "x"])


@settings(max_examples=60, deadline=None)
@given(format_version=st.sampled_from([1, 2]),  # (pyiceberg writes no version 3)
       snapshots=st.lists(st.tuples(
           st.integers(1, 3), st.one_of(st.none(), st.integers(1, 3)), st.integers(1, 3),
           st.sampled_from(["append", "overwrite"]),
           st.lists(st.tuples(_SUMMARY_KEYS, st.sampled_from(["1", "2"])), max_size=3)),
           max_size=6))
def test_a_metadata_file_says_what_pyiceberg_would(
        format_version: int,
        snapshots: list[tuple[int, int | None, int, str, list[tuple[str, str]]]]) -> None:
    """The metadata JSON, whose snapshots are each encoded once while kept, parses to what
    pyiceberg's own encoding of the same metadata parses to: for a next metadata file that
    repeats the same snapshot objects, and one whose snapshots are new objects (encoded
    afresh, as are those of format version 1, which drops sequence numbers)."""
    base = new_table_metadata(
        Schema(NestedField(1, "id", LongType(), required=True)), UNPARTITIONED_PARTITION_SPEC,
        UNSORTED_SORT_ORDER, "file:///w/t", {"format-version": str(format_version)})
    listed = [Snapshot(snapshot_id=100 + i, parent_snapshot_id=parent,
                       sequence_number=sequence, timestamp_ms=1,
                       manifest_list=f"file:///w/t/metadata/snap-{i}.avro",
                       summary=Summary(Operation(operation), **dict(entries)))
              for i, parent, sequence, operation, entries in snapshots]
    changed = [s.model_copy(update={"timestamp_ms": 2}) for s in listed]
    for kept in ([], listed[:-1], listed, changed):  # each snapshot object encoded earlier
        metadata = base.model_copy(update={"snapshots": [*kept, *listed[len(kept):]]})
        for exclude_none in (True, False):
            assert json.loads(metadata_json(metadata, exclude_none)) == json.loads(
                metadata.model_dump_json(exclude_none=exclude_none))


def test_a_commit_by_another_process_is_seen(properties: dict[str, str],
                                             counted: MetadataReads) -> None:
    """A load after another writer's commit answers the new version, never an older one
    than it answered before."""
    server = open_catalog(properties, "server")
    server.create_namespace("ns")
    server.create_table("ns.t", SCHEMA).append(rows(0))
    assert len(server.load_table("ns.t").metadata.snapshots) == 1
    acknowledged = server.version
    other = open_catalog({**properties, "skip_instance_cache": "true"}, "other")
    other.load_table("ns.t").append(rows(3))
    counted.reset()
    seen = server.load_table("ns.t")
    assert len(seen.metadata.snapshots) == 2 and server.version == acknowledged + 1
    assert (counted.reads, counted.parses) == (1, 1)
    assert len(server.load_table("ns.t").metadata.snapshots) == 2


def test_a_replaced_metadata_file_is_refused_by_a_reader_that_never_read_it(
        tmp_path: Path) -> None:
    properties = local_properties(tmp_path)
    writer = open_catalog(properties)
    writer.create_namespace("ns")
    first = writer.create_table("ns.t", SCHEMA)
    original = Path(first.metadata_location.removeprefix("file://")).read_bytes()
    first.append(rows(0))
    current = Path(writer.load_table("ns.t").metadata_location.removeprefix("file://"))
    current.write_bytes(original)  # valid metadata, but not the committed bytes
    assert len(writer.load_table("ns.t").metadata.snapshots) == 1  # the committed content
    with pytest.raises(IcebergMetadataError, match="do not have the SHA-256"):
        open_catalog(properties, "reader").load_table("ns.t")


def test_an_append_shares_what_it_did_not_change(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The metadata an append stages is pyiceberg's (the same model as its
    ``update_table_metadata`` gives) but shares the earlier snapshots with the current
    metadata instead of deep-copying them."""
    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    table.append(rows(0))
    staged: list[tuple[Any, Any, Any]] = []
    stage = OlympiaCatalog._update_and_stage_table

    def recording(self: OlympiaCatalog, current: Any, *args: Any) -> Any:
        result = stage(self, current, *args)
        staged.append((current, args[2], result))
        return result

    monkeypatch.setattr(OlympiaCatalog, "_update_and_stage_table", recording)
    table.append(rows(3))
    (current, updates, result), = staged
    expected = update_table_metadata(current.metadata, updates,
                                     metadata_location=current.metadata_location)
    assert result.metadata == expected
    assert result.metadata.snapshots[0] is current.metadata.snapshots[0]
    assert len(catalog.load_table("ns.t").scan().to_arrow()) == 6


class _ThroughService:
    """What a pyiceberg table commits through: the REST server's operations, in process
    (the commit path ``olympia serve`` runs, without the HTTP round trip)."""

    def __init__(self, service: CatalogService) -> None:
        self.service = service

    def commit_table(self, table: Table, requirements: Any, updates: Any) -> Any:
        ns, name = table.name()
        return CommitTableResponse.model_validate_json(self.service.commit_table(
            ns, name, CommitTableBody(requirements=requirements, updates=updates)))

    def _delete_old_metadata(self, *args: Any) -> None:
        self.service.catalog._delete_old_metadata(*args)


def test_the_server_rereads_nothing_it_wrote(properties: dict[str, str],
                                             counted: MetadataReads) -> None:
    """Appends after an append, and loads after them, through one server's operations:
    no metadata file is read or parsed again."""
    service = CatalogService(open_catalog(properties, "server"), {})
    service.catalog.create_namespace("ns")
    created = service.catalog.create_table("ns.t", SCHEMA)
    table = Table(("ns", "t"), created.metadata, created.metadata_location, created.io,
                  _ThroughService(service))  # type: ignore[arg-type]
    table.append(rows(0))
    counted.reset()
    for start in (3, 6):
        table.append(rows(start))
        body = json.loads(service.load_table("ns", "t", "all"))
        assert body["metadata-location"] == table.metadata_location
        assert len(body["metadata"]["snapshots"]) == start // 3 + 1
    assert (counted.reads, counted.parses) == (0, 0)


def test_a_commit_answer_carries_the_metadata_file_it_wrote(tmp_path: Path) -> None:
    """The server answers a commit with the JSON it wrote to the new metadata file (not
    encoded a second time); the answer means what pyiceberg's own encoding would."""
    service = CatalogService(open_catalog(local_properties(tmp_path), "server"), {})
    service.catalog.create_namespace("ns")
    before = service.catalog.create_table("ns.t", SCHEMA)
    updates = (SetPropertiesUpdate(updates={"k": "v"}),)
    answer = service.commit_table("ns", "t", CommitTableBody(updates=updates))
    body = json.loads(answer)
    location = body["metadata-location"]
    assert location != before.metadata_location
    assert body["metadata"] == json.loads(Path(location.removeprefix("file://")).read_bytes())
    parsed = CommitTableResponse.model_validate_json(answer)
    assert parsed.metadata == service.catalog.load_table("ns.t").metadata
    assert parsed.metadata.properties["k"] == "v"


def test_a_restored_root_of_the_known_version_is_read_again(tmp_path: Path) -> None:
    """Ruling 15: a version number is no identity. The catalog is restored from a copy
    and another writer commits the same version number again: a reader that knew that
    number finds its root changed (the conditional read) and answers the store's."""
    properties = local_properties(tmp_path)
    catalog_dir = Path(properties["uri"])
    writer = open_catalog(properties, "writer")
    writer.create_namespace("ns")
    writer.create_table("ns.t", SCHEMA)
    backup = tmp_path / "backup"
    shutil.copytree(catalog_dir, backup)
    writer.load_table("ns.t").append(rows(0))
    reader = open_catalog(properties, "reader")
    for _ in range(2):  # the second load takes the hot path
        assert reader.load_table("ns.t").scan().to_arrow()["id"].to_pylist() == [0, 1, 2]
    known = reader.version
    shutil.rmtree(catalog_dir)
    shutil.copytree(backup, catalog_dir)
    other = open_catalog(properties, "other")
    other.load_table("ns.t").append(rows(100))
    assert other.version == known
    assert sorted(reader.load_table("ns.t").scan().to_arrow()["id"].to_pylist()) == [
        100, 101, 102]


def test_a_conditional_read_sends_nothing_only_while_the_file_is_unchanged(
        location: Location) -> None:
    storage = Storage(location.uri, location.storage_options)
    storage.write("f", b"first")
    data, tag = storage.read_if_changed("f", "")
    assert data == b"first" and tag
    before = storage.stats.bytes_read
    assert storage.read_if_changed("f", tag) == (None, tag)
    assert storage.stats.bytes_read == before
    storage.write("f", b"other")  # same size, another file
    data, again = storage.read_if_changed("f", tag)
    assert data == b"other" and again != tag
    storage.delete("f")
    with pytest.raises(FileNotFound):
        storage.read_if_changed("f", again)
    storage.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["commit", "refresh", "save", "restore", "stale hint"]),
                min_size=1, max_size=14))
@example(["save", "commit", "refresh", "restore"])  # back to an older version
@example(["commit", "save", "commit", "refresh", "restore", "commit"])  # its number again
def test_a_refresh_answers_what_the_spec_procedure_answers(steps: list[str]) -> None:
    """Whatever another writer commits, whatever copy the catalog is restored from and
    whatever vn/latest says, a catalog that refreshes (its known root asked about with one
    conditional read when it can) answers the version and root content a catalog opened
    afresh discovers (the spec's procedure, ruling 11), never trusting a number."""
    with tempfile.TemporaryDirectory() as tmp:
        uri, backup = Path(tmp) / "catalog", Path(tmp) / "backup"
        Catalog.create(str(uri)).close()
        writer, reader = Catalog.open(str(uri)), Catalog.open(str(uri))
        saved = False
        for step in ["refresh", *steps, "refresh"]:
            if step == "commit":
                writer.create_namespace(f"n{uuid.uuid4().hex[:8]}")
            elif step == "save":
                shutil.rmtree(backup, ignore_errors=True)
                shutil.copytree(uri, backup)
                saved = True
            elif step == "restore" and saved:
                shutil.rmtree(uri)
                shutil.copytree(backup, uri)
            elif step == "stale hint":
                writer.files.write_hint(LATEST, max(0, writer.refresh() - 2))
            elif step == "refresh":
                fresh = Catalog.open(str(uri))
                assert reader.refresh() == fresh.version
                assert reader.snapshot.root.digest == fresh.snapshot.root.digest
                fresh.close()
        writer.close()
        reader.close()


@pytest.mark.s3
def test_a_confined_append_reads_and_writes_each_table_file_in_one_request(
        s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On S3, the catalog's own requests for a table's files in an append: one GET for
    each of the new manifest list and manifest it checks, one conditional PUT for the new
    metadata file (no HEAD before a read, no HEAD and LIST before a create)."""
    import s3fs

    properties = s3_properties(s3_server, tmp_path.name)
    catalog = open_catalog(properties).confined()
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    table.append(rows(0))
    warehouse = properties["warehouse"].removeprefix(f"s3://{s3_server.bucket}/")
    calls: list[tuple[str, str]] = []
    real = s3fs.S3FileSystem._call_s3

    async def counted(fs: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        key = str(kwargs.get("Key") or kwargs.get("Prefix") or "")
        if key.startswith(warehouse) and not key.endswith(".parquet"):
            calls.append((method, key.rpartition("/")[2]))
        return await real(fs, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    staged = table.transaction()
    staged.append(rows(3))
    client_writes = len(calls)  # the client's own: data, manifest, manifest list
    staged.commit_transaction()
    server = calls[client_writes:]
    assert sorted(method for method, _ in server) == ["get_object", "get_object",
                                                      "put_object"], server
    assert next(key for method, key in server if method == "put_object").endswith(
        ".metadata.json")
