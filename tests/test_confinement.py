"""Nobody places, reads or deletes a file outside the warehouse through `olympia serve`
(issue 44, item 1), on local disk and on the S3 server.

Every location a client hands the server (a table location, ``write.*.path``, a set
location, a registered metadata file, the files a table's metadata names) is parsed once and
refused with a 400 when a FileIO could read it differently from the catalog: a query,
fragment or parameters (dropped by pyiceberg), a relative path (resolved from the server's
working directory), ``..`` steps before or after percent-decoding, another bucket or host,
a symlink leading out. Every file a table references lies under its own location: the
server refuses a ``write.*.path``, a manifest list, manifest or data file elsewhere (a
trusted library writer may still put one there). A purge deletes only files under the
table's own location that no other table, at any kept catalog version, has in its location,
and a dropped table's location is not given to another while kept versions read it.
Property-based tests generate hostile locations; the property: nothing outside the warehouse
is created, read or deleted, and every table references only files under its location.
"""

from __future__ import annotations

import json
import os
import posixpath
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from iceberg_helpers import s3_properties
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError
from pyiceberg.io import InputFile, InputStream
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, write_manifest_list
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import MetadataLogEntry
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import Record
from restserver import RestServer, assert_error, request, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.exceptions import LocationInUseError, TableLocationError
from olympia.expire import ExpirePolicy, expire_local
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg import catalog as iceberg_catalog
from olympia.iceberg.files import table_files, under
from olympia.iceberg.locations import LiveIndex, LiveTable, confine

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
SECRET = "s3cr3t-value-" + uuid.uuid4().hex
CLIENT_KEYS = ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.region",
               "py-io-impl")


@dataclass
class Lake:
    """A server whose warehouse is ``<top>/wh``: ``<top>`` holds a victim file and a
    credentials file beside it, so a step out of the warehouse shows up there."""

    server: RestServer
    warehouse: str           # <top>/wh, as the server has it
    top: str                 # <wh>/.. as a location
    files: Callable[[], set[str]]  # every file under <top>, as the filesystem names it
    in_warehouse: Callable[[str], bool]
    read: Callable[[str], bytes]   # the bytes of a file files() lists
    write: Callable[[str, bytes], None]
    library: dict[str, str]  # properties of an OlympiaCatalog over the same catalog

    def outside(self) -> dict[str, bytes]:
        """Every file under <top> outside the warehouse, with its bytes."""
        return {f: self.read(f) for f in self.files() if not self.in_warehouse(f)}


def _local(root: Path) -> Lake:
    top = root / "top"
    (top / "wh").mkdir(parents=True)
    OlympiaStore.create(str(root / "catalog")).close()
    server = RestServer(str(root / "catalog"), f"file://{top}/wh")
    return Lake(server, f"file://{top}/wh", f"file://{top}",
                lambda: {str(p) for p in top.rglob("*") if p.is_file()},
                lambda f: f.startswith(f"{top}/wh/"),
                lambda listed: Path(listed).read_bytes(),
                lambda loc, data: Path(loc.removeprefix("file://")).write_bytes(data),
                {"uri": str(root / "catalog"), "warehouse": f"file://{top}/wh"})


def _s3(s3_server: Any) -> Lake:
    prefix = uuid.uuid4().hex[:12]
    props = s3_properties(s3_server, prefix)
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    top = f"s3://{s3_server.bucket}/{prefix}/top"
    clients = [f"--client-property={key}={props[key]}" for key in CLIENT_KEYS]
    server = RestServer(props["uri"], f"{top}/wh", s3_server.storage_options, tuple(clients))
    fs = s3_server.filesystem()

    def write(location: str, data: bytes) -> None:
        with fs.open(location, "wb") as out:
            out.write(data)

    return Lake(server, f"{top}/wh", top,
                lambda: set(fs.find(top.removeprefix("s3://"))),
                lambda f: f.startswith(f"{top.removeprefix('s3://')}/wh/"),
                lambda listed: fs.cat_file(listed), write, {**props, "warehouse": f"{top}/wh"})


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def lake(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         ) -> Iterator[Lake]:
    made = (_local(tmp_path_factory.mktemp("confine")) if request.param == "local"
            else _s3(request.getfixturevalue("s3_server")))
    made.write(f"{made.top}/victim.txt", b"victim")
    made.write(f"{made.top}/creds.json", json.dumps({"secret": SECRET}).encode())
    with made.server:
        yield made
    # every refusal was answered without a traceback, also in the log
    log = "".join(made.server.log)
    assert "Traceback" not in log and SECRET not in log, log


@pytest.fixture
def client(lake: Lake) -> RestCatalog:
    return lake.server.client()


@pytest.fixture
def ns(client: RestCatalog) -> str:
    name = f"ns_{uuid.uuid4().hex[:10]}"
    client.create_namespace(name)
    return name


def refused_forms(lake: Lake, tail: str) -> list[str]:
    """Locations whose text starts with the warehouse (or is relative) that pyiceberg reads
    as ``<top>/esc-…``, the working directory, or elsewhere."""
    wh = lake.warehouse
    name = f"esc-{uuid.uuid4().hex[:8]}"
    return [f"{wh}/../{name}?/../wh/{tail}", f"{wh}/../{name}#/../wh/{tail}",
            f"{wh}/../{name};/../wh/{tail}", f"{wh}/%2E%2E/{name}/{tail}",
            f"{wh}/%2e./{name}", f"{wh}/..%2F{name}", f"{wh}/x\\..\\..\\{name}",
            f"{wh}/./{tail}", f"{wh}/{tail}\n", f"{wh}/{tail}?", f"{name}/{tail}",
            f"file:{name}", "file://elsewhere" + lake.top.split("://")[-1]]


def hostile(lake: Lake, tail: str) -> list[str]:
    """The refused forms, and plain places outside the warehouse."""
    return [*refused_forms(lake, tail), f"{lake.top}/esc-{uuid.uuid4().hex[:8]}",
            "s3://other-bucket/esc", lake.warehouse.replace("://", "://x") + f"/{tail}"]


def data_file(path: str) -> DataFile:
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET, partition=Record(),
                              record_count=3, file_size_in_bytes=10)


def name_file(table: Table, path: str) -> None:
    """A commit whose manifest (written by the client) names ``path`` as a data file."""
    with table.transaction() as tx, _FastAppendFiles(Operation.APPEND, tx, table.io) as add:
        add.append_data_file(data_file(path))


@contextmanager
def trusted(lake: Lake) -> Iterator[OlympiaCatalog]:
    """A library catalog over the server's catalog: a trusted writer (an Olympia job),
    which may make a table reference files anywhere (pyiceberg's ``add_files``)."""
    job = OlympiaCatalog("job", **lake.library)
    try:
        yield job
    finally:
        job.close()


def trusted_name_file(lake: Lake, table: tuple[str, str], path: str) -> None:
    """:func:`name_file` through a trusted writer (the server refuses the commit)."""
    with trusted(lake) as job:
        name_file(job.load_table(table), path)


# --- placing -------------------------------------------------------------------------------


def test_a_hostile_place_is_refused_with_a_400_everywhere(lake: Lake, client: RestCatalog,
                                                         ns: str) -> None:
    """Create, stage-create, write.*.path (at create and by a commit), set-location and
    register: each answers 400 naming why, and nothing appears outside the warehouse or in
    the server's working directory."""
    before = lake.outside()
    table = client.create_table((ns, "t"), ROWS.schema)
    for i, location in enumerate(hostile(lake, "q")):
        with pytest.raises(BadRequestError, match="is refused|is outside"):
            client.create_table((ns, f"c{i}"), ROWS.schema, location=location)
        for key in ("write.metadata.path", "write.data.path"):
            with pytest.raises(BadRequestError, match=f"{key} of table .*(refused|outside)"):
                client.create_table((ns, f"p{i}"), ROWS.schema, properties={key: location})
            with pytest.raises(BadRequestError, match=f"{key} of table {ns}.t"):
                table.transaction().set_properties({key: location}).commit_transaction()
        set_location = {"requirements": [], "updates": [{"action": "set-location",
                                                         "location": location}]}
        assert_error(request(lake.server, "POST", f"/v1/namespaces/{ns}/tables/t",
                             json.dumps(set_location)), 400, "BadRequestException",
                     f"location of table {ns}.t")
        with pytest.raises(BadRequestError, match="metadata file registered"):
            client.register_table((ns, f"r{i}"), location)
        with pytest.raises(BadRequestError, match=f"location of namespace {ns}x{i}"):
            client.create_namespace(f"{ns}x{i}", {"location": location})
        with pytest.raises(BadRequestError, match=f"location of namespace {ns}"):
            client.update_namespace_properties(ns, updates={"location": location})
    # the raw answers: a 400 ErrorModel, never a 500
    body = json.dumps({"name": "raw", "location": f"{lake.warehouse}/../raw?/../wh/raw",
                       "schema": json.loads(table.schema().model_dump_json())})
    assert_error(request(lake.server, "POST", f"/v1/namespaces/{ns}/tables", body), 400,
                 "BadRequestException", "is refused: it has a '..' step")
    table.append(ROWS)  # the table still takes commits
    assert client.list_tables(ns) == [(ns, "t")] and "location" not in \
        client.load_namespace_properties(ns)
    assert lake.outside() == before and escaped_here() == []


def escaped_here() -> list[str]:
    """What a relative location made in the server's working directory (the tests')."""
    return [entry for entry in os.listdir(".") if entry.startswith("esc-")]


def test_the_library_writes_no_metadata_file_to_a_refused_place(lake: Lake, client: RestCatalog,
                                                                ns: str) -> None:
    """An Olympia job (the library) committing to a table: a ``write.metadata.path`` in a
    refused form is refused at that commit, before the file is written (the server refuses
    to set it; a table may carry one from before)."""
    before = lake.outside()
    client.create_table((ns, "t"), ROWS.schema)
    job = OlympiaCatalog("job", **lake.library)
    try:
        table = job.load_table((ns, "t"))
        for location in refused_forms(lake, "m"):
            with pytest.raises(TableLocationError, match=f"metadata file of table {ns}.t"):
                table.transaction().set_properties(
                    {"write.metadata.path": location}).commit_transaction()
        table.append(ROWS)
    finally:
        job.close()
    assert client.load_table((ns, "t")).scan().to_arrow().num_rows == 3
    assert lake.outside() == before and escaped_here() == []


def test_a_symlink_out_of_the_warehouse_is_refused(lake: Lake, client: RestCatalog,
                                                   ns: str) -> None:
    if not lake.warehouse.startswith("file://"):
        pytest.skip("symbolic links are a local-disk matter")
    top = Path(lake.top.removeprefix("file://"))
    link = top / "wh" / f"link-{uuid.uuid4().hex[:8]}"
    (top / "elsewhere").mkdir(exist_ok=True)
    link.symlink_to(top / "elsewhere")
    with pytest.raises(BadRequestError, match="once symbolic links are resolved"):
        client.create_table((ns, "t"), ROWS.schema, location=f"file://{link}/t")
    assert not any((top / "elsewhere").iterdir())
    # a purge deletes nothing through a link inside the table's folder
    table = client.create_table((ns, "t"), ROWS.schema)
    (top / "elsewhere" / "kept.parquet").write_bytes(b"kept")
    Path(table.location().removeprefix("file://"), "linked").symlink_to(top / "elsewhere")
    linked = f"{table.location()}/linked/kept.parquet"
    with pytest.raises(BadRequestError, match="data file.*once symbolic links are resolved"):
        name_file(table, linked)  # the server takes no such commit
    trusted_name_file(lake, (ns, "t"), linked)  # a trusted writer may
    with pytest.raises(BadRequestError, match="data file.*once symbolic links are resolved"):
        client.purge_table((ns, "t"))
    assert (top / "elsewhere" / "kept.parquet").read_bytes() == b"kept"


# --- reading ---------------------------------------------------------------------------------


def test_files_outside_are_never_read(lake: Lake, client: RestCatalog, ns: str) -> None:
    """Registering the credentials file behind a query is a 400 that echoes nothing of it;
    so is registering metadata whose manifest list is that file, and purging a table a
    trusted writer registered with it (the server checks every file before reading it)."""
    creds = f"{lake.warehouse}/../creds.json"
    for location in (f"{creds}?/..", f"{creds}#/..", creds):
        status, _, body = request(lake.server, "POST", f"/v1/namespaces/{ns}/register",
                                  json.dumps({"name": "r", "metadata-location": location}))
        assert status == 400 and SECRET not in json.dumps(body), body
    table = client.create_table((ns, "t"), ROWS.schema)
    table.append(ROWS)
    location = f"{lake.warehouse}/{ns}/stolen"
    snapshots = [s.model_copy(update={"manifest_list": f"{lake.top}/creds.json"})
                 for s in table.metadata.snapshots]
    metadata = f"{location}/metadata/00000-{uuid.uuid4()}.metadata.json"
    ToOutputFile.table_metadata(table.metadata.model_copy(update={
        "location": location, "snapshots": snapshots, "table_uuid": uuid.uuid4(),
        "metadata_log": []}),
        table.io.new_output(metadata))
    status, _, body = request(lake.server, "POST", f"/v1/namespaces/{ns}/register",
                              json.dumps({"name": "stolen", "metadata-location": metadata}))
    assert status == 400 and SECRET not in json.dumps(body), body
    assert f"table {ns}.stolen: its manifest list file" in body["error"]["message"]
    assert not client.table_exists((ns, "stolen"))
    with trusted(lake) as job:
        job.register_table((ns, "stolen"), metadata)
    status, _, body = request(lake.server, "DELETE",
                              f"/v1/namespaces/{ns}/tables/stolen?purgeRequested=true")
    assert status == 400 and SECRET not in json.dumps(body), body
    assert "manifest list file" in body["error"]["message"]
    assert client.table_exists((ns, "stolen"))


# --- deleting --------------------------------------------------------------------------------


def test_a_purge_deletes_nothing_outside_the_tables_location(lake: Lake, client: RestCatalog,
                                                             ns: str) -> None:
    """A manifest naming the victim (behind a query, a fragment, or plainly): the server
    refuses the commit; a trusted writer's commit of it makes the purge a 400, nothing
    dropped, nothing deleted."""
    before = lake.outside()
    for i, path in enumerate([f"{lake.warehouse}/../victim.txt?/../wh/{ns}/f/data/x.parquet",
                              f"{lake.warehouse}/../victim.txt#/../wh/{ns}/f/x.parquet",
                              f"{lake.top}/victim.txt"]):
        table = client.create_table((ns, f"f{i}"), ROWS.schema)
        table.append(ROWS)
        with pytest.raises(BadRequestError, match=f"table {ns}.f{i}: its data file"):
            name_file(table, path)
        trusted_name_file(lake, (ns, f"f{i}"), path)
        with pytest.raises(BadRequestError, match="nothing dropped or deleted: its data file"):
            client.purge_table((ns, f"f{i}"))
        assert client.table_exists((ns, f"f{i}"))
    assert lake.outside() == before


def test_a_purge_never_deletes_another_tables_data(lake: Lake, client: RestCatalog,
                                                   ns: str) -> None:
    """Table ``g`` naming table ``a``'s data file (plainly; behind a query, with steps that
    lead the text back into ``g``; through ``..``): the server refuses the commit; when a
    trusted writer made it, purging ``g`` is refused and ``a`` stays readable."""
    a = client.create_table((ns, "a"), ROWS.schema)
    a.append(ROWS)
    (a_file,) = [t.file.file_path for t in a.scan().plan_files()]
    f = client.create_table((ns, "f"), ROWS.schema)
    f.append(ROWS)
    in_a = a_file.rsplit("/a/", 1)[1]
    for i, path in enumerate([a_file, f"{a_file}?/../../../g{{}}/data/x.parquet",
                              f"{a_file}#/../../../g{{}}/data/x.parquet",
                              f"{f.location()}/../a/{in_a}?/..",
                              f"{f.location()}/data/../../a/{in_a}"]):
        g = client.create_table((ns, f"g{i}"), ROWS.schema)
        with pytest.raises(BadRequestError, match=f"table {ns}.g{i}: its data file"):
            name_file(g, path.format(i))
        trusted_name_file(lake, (ns, f"g{i}"), path.format(i))
        with pytest.raises(BadRequestError, match="nothing dropped or deleted"):
            client.purge_table(g.name())
    assert client.load_table((ns, "a")).scan().to_arrow().num_rows == 3
    client.purge_table((ns, "f"))  # its own files only: fine
    assert client.load_table((ns, "a")).scan().to_arrow().num_rows == 3


def test_a_purge_spares_a_table_of_a_kept_version(lake: Lake, client: RestCatalog,
                                                  ns: str) -> None:
    """``old`` is dropped (its files stay, time travel reads it): ``new`` may not take its
    folder while a kept version has ``old`` there. A trusted writer placed ``old``'s
    metadata in ``new``'s folder and made ``new`` reference it: purging ``new`` is
    refused."""
    with trusted(lake) as job:
        old = job.create_table((ns, "old"), ROWS.schema, properties={
            "write.metadata.path": f"{lake.warehouse}/{ns}/new/of-old"})
        old.append(ROWS)
    folder, kept = old.location(), version(lake.server)
    client.drop_table((ns, "old"))
    with pytest.raises(BadRequestError, match=f"location {folder} overlaps .* table {ns}.old "
                                              f"at kept catalog versions \\d+ to {kept}"):
        client.create_table((ns, "new"), ROWS.schema, location=folder)
    new = client.create_table((ns, "new"), ROWS.schema)
    assert new.location() == f"{lake.warehouse}/{ns}/new"
    trusted_name_file(lake, (ns, "new"), old.metadata_location)
    with pytest.raises(BadRequestError, match=f"live table {ns}.old .*kept older catalog"):
        client.purge_table((ns, "new"))
    past = lake.server.client("past", warehouse=f"{lake.warehouse}@{kept}")
    assert past.load_table((ns, "old")).scan().to_arrow().num_rows == 3


def test_a_purge_is_free_once_the_version_is_expired(lake: Lake, client: RestCatalog,
                                                     ns: str) -> None:
    """Once the versions where ``old`` lived are expired, nothing kept reads its files:
    ``new`` may take its folder, and purging ``new`` there goes ahead (deleting only
    ``new``'s own files)."""
    old = client.create_table((ns, "old"), ROWS.schema)
    old.append(ROWS)
    old_files = {t.file.file_path for t in old.scan().plan_files()}
    client.drop_table((ns, "old"))
    with pytest.raises(BadRequestError, match=f"table {ns}.old at kept catalog versions"):
        client.create_table((ns, "new"), ROWS.schema, location=old.location())
    with trusted(lake) as job:
        expire_local(job.olympia, ExpirePolicy(keep_last=1, older_than_ms=0, grace_ms=0,
                                               force=True), now_ms=2**42, settle_ms=0)
    new = client.create_table((ns, "new"), ROWS.schema, location=old.location())
    new.append(ROWS)
    client.purge_table((ns, "new"))
    assert not client.table_exists((ns, "new"))
    assert all(new.io.new_input(f).exists() for f in old_files)


def test_the_kept_tables_follow_new_versions_and_expiry(tmp_path: Path) -> None:
    """One catalog object purging again (as the server does): the tables of the versions
    made since its last purge are seen, and after an expiry the expired ones are not."""
    catalog = OlympiaCatalog("lib", uri=str(tmp_path / "catalog"),
                             warehouse=f"file://{tmp_path}/wh", **{"olympia.create": "true"})
    catalog.create_namespace("ns")
    catalog.create_table(("ns", "first"), ROWS.schema).append(ROWS)
    catalog.purge_table(("ns", "first"))  # builds what it keeps
    old = catalog.create_table(("ns", "old"), ROWS.schema, properties={
        "write.metadata.path": f"file://{tmp_path}/wh/ns/new/of-old"})
    old.append(ROWS)
    catalog.drop_table(("ns", "old"))
    name_file(catalog.create_table(("ns", "new"), ROWS.schema), old.metadata_location)
    with pytest.raises(LocationInUseError, match="live table ns.old"):
        catalog.purge_table(("ns", "new"))
    expire_local(catalog.olympia, ExpirePolicy(keep_last=1, older_than_ms=0, grace_ms=0,
                                               force=True), now_ms=2**42, settle_ms=0)
    catalog.purge_table(("ns", "new"))
    assert not catalog.table_exists(("ns", "new"))
    catalog.close()


def test_old_metadata_is_deleted_only_in_the_tables_location(lake: Lake, client: RestCatalog,
                                                             ns: str) -> None:
    """The server refuses to register a metadata file whose log names the victim. A trusted
    writer registers it, with deletion of old metadata after commits on: pyiceberg deletes
    old metadata in the committing process, so a library catalog committing to that table
    (an Olympia job) deletes only the table's own old metadata files."""
    before = lake.outside()
    table = client.create_table((ns, "t"), ROWS.schema)
    location = f"{lake.warehouse}/{ns}/logged"
    metadata = f"{location}/metadata/00000-{uuid.uuid4()}.metadata.json"
    log = [MetadataLogEntry(metadata_file=f"{lake.top}/victim.txt",  # type: ignore[call-arg]
                            timestamp_ms=1)]
    ToOutputFile.table_metadata(table.metadata.model_copy(update={
        "location": location, "table_uuid": uuid.uuid4(), "metadata_log": log,
        "properties": {"write.metadata.delete-after-commit.enabled": "true",
                       "write.metadata.previous-versions-max": "1"}}),
        table.io.new_output(metadata))
    with pytest.raises(BadRequestError, match=f"{ns}.logged: its previous metadata file"):
        client.register_table((ns, "logged"), metadata)
    job = OlympiaCatalog("job", **lake.library)
    try:
        job.register_table((ns, "logged"), metadata)
        logged = job.load_table((ns, "logged"))
        for i in range(3):
            logged = logged.transaction().set_properties({"n": str(i)}).commit_transaction()
        # (the log keeps every entry: kept catalog versions read them, retention.py)
        assert f"{lake.top}/victim.txt" in [e.metadata_file for e in logged.metadata.metadata_log]
    finally:
        job.close()
    assert lake.outside() == before


def test_a_live_table_stored_in_a_refused_form_holds_all_it_could_name() -> None:
    """A table a server placed before these checks: the index counts it as holding every
    place its location could name (for a ``..`` step or a relative path: all of its file
    system), so no new table lands where its files may be."""
    index = LiveIndex()
    index.put(("n", "q"), LiveTable(("n", "q"), "file:///srv/wh/t?x"))
    index.put(("n", "up"), LiveTable(("n", "up"), "s3://b/wh/../esc?/../wh/u"))
    for taken, owner in (("/srv/wh/u", "n.q"), ("/srv/other", None), ("s3://b/anywhere", "n.up"),
                         ("s3://c/x", None)):
        if owner is None:
            index.check_free("table n.new", taken, "", ("n", "new"))
        else:
            with pytest.raises(LocationInUseError, match=f"live table {owner}"):
                index.check_free("table n.new", taken, "", ("n", "new"))


# --- properties ------------------------------------------------------------------------------

STEPS = st.sampled_from(["..", ".", "%2E%2E", "%2e.", ".%2E", "..%2F..", "%252E", "x", "wh",
                         "ESC", "a?b", "a#b", "a;b", "a\\..", "%00", "~", "", " ", "\t"])


@st.composite
def locations(draw: st.DrawFn, warehouse: str) -> str:
    """A location built from path steps that name the warehouse, leave it, or hide a step
    behind a query, a fragment, parameters, encoding or whitespace."""
    start = draw(st.sampled_from([warehouse, warehouse + "/..", warehouse.split("://")[-1],
                                  "", "esc-rel", "file:", "file:esc-rel", "file://h",
                                  "s3://other"]))
    steps = draw(st.lists(STEPS, max_size=6))
    tail = draw(st.sampled_from(["", "?x", "#x", "/", "?/../..", ";x"]))
    return "/".join([start, *steps]) + tail


def _pyiceberg_path(location: str) -> str:
    """The path pyiceberg's file IO takes ``location`` to name, resolved."""
    _, _, path = PyArrowFileIO.parse_location(location)
    return posixpath.normpath(path if path.startswith("/") else f"/{path}")


@pytest.mark.parametrize("warehouse", ["file:///srv/top/wh", "s3://bucket/top/wh"])
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_an_accepted_place_is_where_pyiceberg_goes(warehouse: str, data: st.DataObject) -> None:
    """Whatever location confine() accepts under the warehouse, pyiceberg's file IO reads
    and writes under the warehouse too (and the place confine() returns is that path)."""
    location = data.draw(locations(warehouse))
    try:
        at = confine(location, warehouse, "a location", "the warehouse")
    except TableLocationError:
        return
    root = _pyiceberg_path(warehouse)
    went = _pyiceberg_path(location)
    assert went.startswith(root + "/"), (location, went)
    assert went == "/" + "/".join(((at[1],) if at[1] else ()) + at[2])


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_nothing_outside_is_created_read_or_deleted(lake: Lake, client: RestCatalog, ns: str,
                                                    data: st.DataObject) -> None:
    """Through the server: a generated location as a table location, a metadata path, a
    data path, a registered metadata file, and a data file a commit adds (a purge would
    delete it). Whatever is answered, every file outside the warehouse is still there,
    unchanged, nothing new is there, no answer holds the secret, no answer is a 500, and
    every table of the namespace references only files under its own location."""
    before = lake.outside()
    location = data.draw(locations(lake.warehouse))
    name = f"t{uuid.uuid4().hex[:8]}"
    attempts = [
        ("POST", f"/v1/namespaces/{ns}/tables", {"name": name, "location": location,
                                                 "schema": SCHEMA_JSON}),
        ("POST", f"/v1/namespaces/{ns}/tables", {"name": name + "m", "schema": SCHEMA_JSON,
                                                 "properties": {"write.metadata.path":
                                                                location}}),
        ("POST", f"/v1/namespaces/{ns}/tables", {"name": name + "d", "schema": SCHEMA_JSON,
                                                 "properties": {"write.data.path":
                                                                location}}),
        # (a file: registering a folder is a 503 of its own, not a matter of places)
        ("POST", f"/v1/namespaces/{ns}/register", {"name": name + "r", "metadata-location":
                                                   f"{location}/v1.metadata.json"}),
    ]
    for method, path, body in attempts:
        status, _, answer = request(lake.server, method, path, json.dumps(body))
        assert status in (200, 400, 404, 409), (location, status, answer)
        assert SECRET not in json.dumps(answer)
    table = client.create_table((ns, name + "p"), ROWS.schema)
    for path in (location, location.replace(lake.warehouse, table.location(), 1)):
        try:
            name_file(table, path)
        except BadRequestError:
            pass
    each_file_is_under_its_table(lake, ns)
    try:
        client.purge_table((ns, name + "p"))
    except BadRequestError:
        pass
    assert lake.outside() == before and escaped_here() == []


def each_file_is_under_its_table(lake: Lake, ns: str) -> None:
    """Every file each table of ``ns`` references (checked before it is read) lies under
    the table's own location: what the server let in keeps that rule."""
    with trusted(lake) as job:
        for identifier in job.list_tables(ns):
            table = job.load_table(identifier)
            table_files(table, under(table.location(), ".".join(identifier)))


SCHEMA_JSON = {"type": "struct", "schema-id": 0,
               "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


# --- every file a table references lies under its own location ---------------------------


def test_a_write_path_into_another_tables_folder_is_refused(lake: Lake, client: RestCatalog,
                                                            ns: str) -> None:
    """``write.*.path`` must lie under the table's own location (not merely the warehouse):
    at create, stage-create and on a commit; a location change must hold the table's
    files. Each refusal names the table, the place and the rule; nothing lands in ``a``."""
    a = client.create_table((ns, "a"), ROWS.schema)
    a.append(ROWS)
    in_a = set(lake.files())
    b = client.create_table((ns, "b"), ROWS.schema)
    for key in ("write.data.path", "write.metadata.path", "write.object-storage.path"):
        elsewhere = {key: f"{a.location()}/{key}"}
        rule = f"{key} of table {ns}.c, .* is outside its location .*every file a table"
        with pytest.raises(BadRequestError, match=rule):
            client.create_table((ns, "c"), ROWS.schema, properties=elsewhere)
        with pytest.raises(BadRequestError, match=rule):
            client.create_table_transaction((ns, "c"), ROWS.schema, properties=elsewhere)
        with pytest.raises(BadRequestError, match=f"{key} of table {ns}.b, .* is outside"):
            b.transaction().set_properties(elsewhere).commit_transaction()
        b = b.transaction().set_properties({key: f"{b.location()}/{key}"}).commit_transaction()
    b.append(ROWS)
    for location in (f"{lake.warehouse}/{ns}/b2", a.location(), f"{b.location()}/inner"):
        set_location = {"requirements": [], "updates": [{"action": "set-location",
                                                         "location": location}]}
        assert_error(request(lake.server, "POST", f"/v1/namespaces/{ns}/tables/b",
                             json.dumps(set_location)), 400, "BadRequestException",
                     f"table {ns}.b: its location may change only to one holding its files")
    assert set(lake.files()) == in_a | {f for f in lake.files() if "/b/" in f}
    assert not client.table_exists((ns, "c"))
    assert client.load_table((ns, "a")).scan().to_arrow().num_rows == 3
    assert client.load_table((ns, "b")).scan().to_arrow().num_rows == 3


def test_a_snapshot_naming_another_tables_manifests_is_refused(lake: Lake, client: RestCatalog,
                                                               ns: str) -> None:
    """A client's new snapshot whose manifest list lies in table ``f``'s folder, or whose
    manifest list (in its own folder) lists ``f``'s manifest: each is a 400 naming the
    file, and the table is unchanged."""
    f = client.create_table((ns, "f"), ROWS.schema)
    f.append(ROWS)
    t = client.create_table((ns, "t"), ROWS.schema)
    elsewhere = t.metadata.model_copy(update={"properties": {
        **t.metadata.properties, "write.metadata.path": f"{f.location()}/metadata"}})
    steered = Table(t.name(), elsewhere, t.metadata_location, t.io, t.catalog)
    with pytest.raises(BadRequestError, match=f"table {ns}.t: its manifest list file, "
                                              f"{f.location()}/metadata/snap-"):
        steered.append(ROWS)
    f_snapshot = f.current_snapshot()
    assert f_snapshot is not None
    listing = f"{t.location()}/metadata/snap-adopted-{uuid.uuid4().hex}.avro"
    with write_manifest_list(2, t.io.new_output(listing), 7, None, 1, "deflate") as writer:
        writer.add_manifests(f_snapshot.manifests(f.io))
    commit = {"requirements": [], "updates": [
        {"action": "add-snapshot", "snapshot": {
            "snapshot-id": 7, "sequence-number": 1, "timestamp-ms": 1, "schema-id": 0,
            "manifest-list": listing, "summary": {"operation": "append"}}},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
         "snapshot-id": 7}]}
    assert_error(request(lake.server, "POST", f"/v1/namespaces/{ns}/tables/t",
                         json.dumps(commit)), 400, "BadRequestException",
                 f"table {ns}.t: its manifest file, {f.location()}/metadata/")
    assert client.load_table((ns, "t")).current_snapshot() is None
    client.purge_table((ns, "f"))


def test_a_parent_manifest_list_replaced_later_hides_no_manifest(lake: Lake,
                                                                 client: RestCatalog,
                                                                 ns: str) -> None:
    """The server checked the commit that made ``t``'s snapshot; the client then rewrites
    that snapshot's manifest list (in its own folder) to also list ``f``'s manifest, and
    commits a child listing it too: the manifest still counts as new, and the commit is a
    400 naming it."""
    f = client.create_table((ns, "f2"), ROWS.schema)
    f.append(ROWS)
    t = client.create_table((ns, "t2"), ROWS.schema)
    t.append(ROWS)
    parent, f_snapshot = t.current_snapshot(), f.current_snapshot()
    assert parent is not None and f_snapshot is not None
    smuggled = [*parent.manifests(t.io), *f_snapshot.manifests(f.io)]
    with write_manifest_list(2, t.io.new_output(parent.manifest_list), parent.snapshot_id,
                             None, parent.sequence_number, "deflate") as writer:
        writer.add_manifests(smuggled)  # (overwrites: the client can write its folder)
    listing = f"{t.location()}/metadata/snap-child-{uuid.uuid4().hex}.avro"
    child = parent.snapshot_id + 1
    with write_manifest_list(2, t.io.new_output(listing), child, parent.snapshot_id,
                             parent.sequence_number + 1, "deflate") as writer:
        writer.add_manifests(smuggled)
    commit = {"requirements": [], "updates": [
        {"action": "add-snapshot", "snapshot": {
            "snapshot-id": child, "parent-snapshot-id": parent.snapshot_id,
            "sequence-number": parent.sequence_number + 1, "timestamp-ms": 1, "schema-id": 0,
            "manifest-list": listing, "summary": {"operation": "append"}}},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
         "snapshot-id": child}]}
    assert_error(request(lake.server, "POST", f"/v1/namespaces/{ns}/tables/t2",
                         json.dumps(commit)), 400, "BadRequestException",
                 f"table {ns}.t2: its manifest file, {f.location()}/metadata/")
    assert client.load_table((ns, "t2")).current_snapshot() == parent
    client.purge_table((ns, "f2"))


def test_register_refuses_metadata_naming_files_outside_its_location(
        lake: Lake, client: RestCatalog, ns: str) -> None:
    """Registering metadata whose manifest names a data file in another table's folder (a
    trusted writer made it, and dropped the table) is a 400 naming the file; so is
    metadata whose manifest lists lie in another table's folder."""
    a = client.create_table((ns, "a"), ROWS.schema)
    a.append(ROWS)
    (a_file,) = [t.file.file_path for t in a.scan().plan_files()]
    client.create_table((ns, "r0"), ROWS.schema).append(ROWS)
    trusted_name_file(lake, (ns, "r0"), a_file)
    r0 = client.load_table((ns, "r0"))
    client.drop_table((ns, "r0"))
    with pytest.raises(BadRequestError, match=f"table {ns}.r: its data file, {a_file}, is "
                                              "outside its location .*every file a table"):
        client.register_table((ns, "r"), r0.metadata_location)
    moved = f"{lake.warehouse}/{ns}/moved"
    metadata = f"{moved}/metadata/00000-{uuid.uuid4()}.metadata.json"
    ToOutputFile.table_metadata(a.metadata.model_copy(update={
        "location": moved, "table_uuid": uuid.uuid4(), "metadata_log": []}),
        a.io.new_output(metadata))
    with pytest.raises(BadRequestError, match=f"table {ns}.m: its manifest list file, "
                                              f"{a.location()}/metadata/snap-"):
        client.register_table((ns, "m"), metadata)
    assert not client.table_exists((ns, "r")) and not client.table_exists((ns, "m"))


def _remove_orphans(lake: Lake, table: Table) -> list[str]:
    """What Iceberg's orphan-file removal does (older_than aside): delete every file under
    the table's location that its metadata does not name. Returns the files deleted."""
    scheme = table.location().split("://")[0] + "://"
    named = {path.removeprefix(scheme) for kind in
             table_files(table, under(table.location(), "t")).values() for path in kind}
    folder = table.location().removeprefix(scheme) + "/"
    orphans = sorted(f for f in lake.files() if f.startswith(folder) and f not in named)
    for orphan in orphans:
        table.io.delete(scheme + orphan)
    return orphans


def test_drop_then_create_again_takes_a_new_location(lake: Lake, client: RestCatalog,
                                                     ns: str) -> None:
    """Dropped ``t``, kept versions read it: ``t`` created again gets a location of its own
    (the escaped name and a short unique suffix), so removing the new table's orphan files
    and purging it leave the old table readable at its kept version. The old location
    given explicitly is refused, naming the old table and its versions."""
    old = client.create_table((ns, "t"), ROWS.schema)
    old.append(ROWS)
    kept = version(lake.server)
    client.drop_table((ns, "t"))
    with pytest.raises(BadRequestError, match=f"table {ns}.t at kept catalog versions \\d+ "
                                              f"to {kept}, which read its files there"):
        client.create_table((ns, "t"), ROWS.schema, location=old.location())
    new = client.create_table((ns, "t"), ROWS.schema)
    assert new.location().startswith(f"{old.location()}-") and \
        len(new.location()) == len(old.location()) + 9
    staged = client.create_table_transaction((ns, "t2"), ROWS.schema)  # (no drop: as ever)
    assert staged.table_metadata.location == f"{lake.warehouse}/{ns}/t2"
    new.append(ROWS)
    new.io.new_output(f"{new.location()}/data/orphan.parquet").create().close()
    assert [o.rsplit("/", 1)[1] for o in _remove_orphans(lake, new)] == ["orphan.parquet"]
    client.purge_table((ns, "t"))
    past = lake.server.client("past", warehouse=f"{lake.warehouse}@{kept}")
    assert past.load_table((ns, "t")).scan().to_arrow().num_rows == 3
    again = client.create_table((ns, "t"), ROWS.schema)  # a third one: free again
    assert again.location() not in (old.location(), new.location())


class _CountingIO(PyArrowFileIO):
    """A FileIO noting every file opened for reading."""

    def __init__(self, reads: list[str]) -> None:
        super().__init__()
        self.reads = reads

    def new_input(self, location: str) -> InputFile:
        file = super().new_input(location)
        opened = file.open

        def counted(seekable: bool = True) -> InputStream:
            self.reads.append(location)
            return opened(seekable)

        file.open = counted  # type: ignore[method-assign]
        return file


def test_a_commit_reads_only_its_new_manifests(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A confined commit reads the new manifest list, the parent's manifest list (unless
    this catalog checked it, as the previous commit's new list) and the new manifests,
    never the manifests the parent lists: 2 files for each append however many came
    before, 3 where another catalog made the parent."""
    library = OlympiaCatalog("lib", uri=str(tmp_path / "catalog"),
                             warehouse=f"file://{tmp_path}/wh", **{"olympia.create": "true"})
    confined = library.confined()
    confined.create_namespace("ns")
    table = confined.create_table(("ns", "t"), ROWS.schema)
    per_commit: list[list[str]] = []
    check = iceberg_catalog.check_commit

    def counted(before: Any, after: Any, updates: Any, io: Any, *rest: Any) -> int:
        per_commit.append([])
        return check(before, after, updates, _CountingIO(per_commit[-1]), *rest)

    monkeypatch.setattr(iceberg_catalog, "check_commit", counted)
    for _ in range(4):
        table.append(ROWS)
    assert [len(reads) for reads in per_commit] == [2, 2, 2, 2]
    other = OlympiaCatalog("other", uri=str(tmp_path / "catalog"),
                           warehouse=f"file://{tmp_path}/wh")  # remembers no manifest list
    later = other.confined().load_table(("ns", "t"))
    later.append(ROWS)
    assert len(per_commit[-1]) == 3
    for reads, snapshot in zip(per_commit, later.snapshots(), strict=True):
        new = {m.manifest_path for m in snapshot.manifests(later.io)}
        parent = later.snapshot_by_id(snapshot.parent_snapshot_id or -1)
        if parent is None or len(reads) == 2:
            assert reads[0] == snapshot.manifest_list
        else:
            assert set(reads[:2]) == {snapshot.manifest_list, parent.manifest_list}
            new -= {m.manifest_path for m in parent.manifests(later.io)}
        assert set(reads[-1:]) <= new  # a manifest the parent did not list
    other.close()
    library.close()
