"""`olympia serve` with real clients: pyiceberg's RestCatalog, and raw HTTP for what a client
library would never send (malformed JSON, unknown updates, hostile names, huge bodies).

One server per module over a catalog on local disk; names are unique per test.
"""

from __future__ import annotations

import base64
import itertools
import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    NoSuchNamespaceError,
    NoSuchTableError,
)
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, StringType
from restserver import RestServer, assert_error, request, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.catalog.commit import CommitOptions
from olympia.catalog.files import LATEST
from olympia.cli.serve import hint_writer
from olympia.exceptions import CommitConflict
from olympia.iceberg import OlympiaCatalog
from olympia.server.commits import retry_lost_races
from olympia.server.operations import identifiers_json
from olympia.versions.history import history

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    root = tmp_path_factory.mktemp("rest")
    with RestServer.on_new_catalog(root, "--client-property", "client.marker=given",
                                   "--max-body-bytes", "100000") as started:
        yield started
    # every refusal of this module's tests was answered without a traceback, also in the log
    assert not any("Traceback" in line for line in started.log), "".join(started.log)


@pytest.fixture
def client(server: RestServer) -> RestCatalog:
    return server.client()


@pytest.fixture
def ns(client: RestCatalog) -> str:
    name = f"rest_{uuid.uuid4().hex[:10]}"
    client.create_namespace(name)
    return name


# --- config and namespaces ---------------------------------------------------------------


def test_config_lists_the_endpoints_and_the_operators_client_properties(
        server: RestServer) -> None:
    status, _, body = request(server, "GET", "/v1/config")
    assert status == 200 and body["defaults"] == {"client.marker": "given"}
    assert "POST /v1/{prefix}/transactions/commit" in body["endpoints"]
    assert "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}" in body["endpoints"]
    quoted = quote(server.warehouse, safe="")
    assert request(server, "GET", f"/v1/config?warehouse={quoted}")[0] == 200
    assert_error(request(server, "GET", "/v1/config?warehouse=s3%3A%2F%2Fother"), 400,
                 "BadRequestException", "one warehouse")


def test_namespaces_list_page_by_page(server: RestServer, client: RestCatalog) -> None:
    prefix = f"page_{uuid.uuid4().hex[:8]}"
    mine = [f"{prefix}_{i}" for i in range(5)]
    for name in mine:
        client.create_namespace(name)
    seen: list[str] = []
    token = ""  # an empty token means the first page
    while True:
        status, _, body = request(server, "GET",
                                  f"/v1/namespaces?pageSize=2&pageToken={quote(token)}")
        assert status == 200 and len(body["namespaces"]) <= 2
        seen += [levels[0] for levels in body["namespaces"]]
        token = body["next-page-token"]
        if not token:
            break
    assert len(seen) == len(set(seen)) and seen == sorted(seen)
    assert [name for name in seen if name.startswith(prefix)] == mine
    paged = server.client("paged", **{"rest-page-size": "2"})
    assert all((name,) in paged.list_namespaces() for name in mine)
    assert_error(request(server, "GET", "/v1/namespaces?pageSize=0"), 400,
                 "BadRequestException", "pageSize")
    assert_error(request(server, "GET", "/v1/namespaces?pageToken=%21%21"), 400,
                 "BadRequestException", "pageToken")


def test_tables_list_page_by_page(server: RestServer, client: RestCatalog, ns: str) -> None:
    for name in ("c", "a", "b"):
        client.create_table((ns, name), ROWS.schema)
    status, _, first = request(server, "GET", f"/v1/namespaces/{ns}/tables?pageSize=2")
    assert status == 200 and [t["name"] for t in first["identifiers"]] == ["a", "b"]
    token = quote(first["next-page-token"])
    _, _, rest = request(server, "GET", f"/v1/namespaces/{ns}/tables?pageSize=2&pageToken={token}")
    assert [t["name"] for t in rest["identifiers"]] == ["c"] and rest["next-page-token"] is None
    assert server.client("paged", **{"rest-page-size": "1"}).list_tables(ns) == [
        (ns, "a"), (ns, "b"), (ns, "c")]
    # a token is refused (never approximated) where it was not given out: another
    # namespace's tables, the views of this one, the namespaces, or no token of this server
    client.create_namespace(f"{ns}_other")
    for path in (f"{ns}_other/tables", f"{ns}/views"):
        assert_error(request(server, "GET", f"/v1/namespaces/{path}?pageToken={token}"), 400,
                     "BadRequestException", "another listing")
    assert_error(request(server, "GET", f"/v1/namespaces?pageToken={token}"), 400,
                 "BadRequestException", "another listing")
    forged = quote(base64.urlsafe_b64encode(b"b").decode())
    assert_error(request(server, "GET", f"/v1/namespaces/{ns}/tables?pageToken={forged}"),
                 400, "BadRequestException", "not a page token")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(namespace=st.lists(st.text(), min_size=1, max_size=4),
       names=st.lists(st.text(), max_size=6), token=st.one_of(st.none(), st.text()))
def test_a_listing_answer_is_what_json_dumps_writes(namespace: list[str], names: list[str],
                                                    token: str | None) -> None:
    """A listing's JSON text, written without a dict per name, is the text ``json.dumps``
    writes of the answer as dicts, for any names (quotes, backslashes, control characters,
    any code point), an empty page and any token."""
    answer = {"identifiers": [{"namespace": namespace, "name": name} for name in names],
              "next-page-token": token}
    assert identifiers_json(namespace, names, token) == json.dumps(answer)


def test_head_answers_without_a_body(server: RestServer, client: RestCatalog, ns: str) -> None:
    client.create_table((ns, "t"), ROWS.schema)
    assert request(server, "HEAD", f"/v1/namespaces/{ns}")[::2] == (204, None)
    assert request(server, "HEAD", f"/v1/namespaces/{ns}_missing")[::2] == (404, None)
    assert request(server, "HEAD", f"/v1/namespaces/{ns}/tables/t")[::2] == (204, None)
    assert request(server, "HEAD", f"/v1/namespaces/{ns}/tables/u")[::2] == (404, None)


# --- tables ----------------------------------------------------------------------------


def test_a_table_lives_through_the_server(server: RestServer, client: RestCatalog,
                                          ns: str) -> None:
    """Create, append, overwrite, evolve the schema: each commit is ONE Olympia version."""
    table = client.create_table((ns, "t"), ROWS.schema)
    assert table.config == {"client.marker": "given"}  # what the operator gives clients
    before = version(server)
    table.append(ROWS)
    table.overwrite(pa.table({"id": pa.array([9], pa.int64()), "name": ["z"]}))
    with table.update_schema() as update:
        update.add_column("extra", StringType())
    table.append(pa.table({"id": pa.array([10], pa.int64()), "name": ["y"], "extra": ["e"]}))
    assert version(server) == before + 4
    read = client.load_table((ns, "t")).scan().to_arrow().sort_by("id")
    assert read.column("id").to_pylist() == [9, 10]
    assert read.column("extra").to_pylist() == [None, "e"]
    store = OlympiaStore.open(server.catalog_uri)
    try:
        assert [v.info for v in history(store, limit=1)] == [
            {f"iceberg.{ns}.t": f"append snapshot {table.current_snapshot().snapshot_id}"}]
    finally:
        store.close()


def test_load_table_with_only_the_referenced_snapshots(server: RestServer,
                                                       client: RestCatalog, ns: str) -> None:
    table = client.create_table((ns, "t"), ROWS.schema)
    table.append(ROWS)
    table.append(ROWS)
    _, _, every = request(server, "GET", f"/v1/namespaces/{ns}/tables/t?snapshots=all")
    _, _, refs = request(server, "GET", f"/v1/namespaces/{ns}/tables/t?snapshots=refs")
    assert len(every["metadata"]["snapshots"]) == 2
    assert [s["snapshot-id"] for s in refs["metadata"]["snapshots"]] == [
        table.current_snapshot().snapshot_id]
    # the server keeps each encoded answer apart: asked again, each mode answers the same
    assert request(server, "GET", f"/v1/namespaces/{ns}/tables/t?snapshots=all")[2] == every
    assert request(server, "GET", f"/v1/namespaces/{ns}/tables/t?snapshots=refs")[2] == refs
    referenced = server.client("refs", **{"snapshot-loading-mode": "refs"})
    assert len(referenced.load_table((ns, "t")).metadata.snapshots) == 1
    assert_error(request(server, "GET", f"/v1/namespaces/{ns}/tables/t?snapshots=some"),
                 400, "BadRequestException", "all or refs")


def test_two_clients_commit_one_table_one_gets_409_and_nothing_is_lost(
        client: RestCatalog, ns: str) -> None:
    client.create_table((ns, "t"), ROWS.schema,
                        properties={"commit.retry.num-retries": "0"})  # no client retry
    client.load_table((ns, "t")).append(ROWS)
    first, second = client.load_table((ns, "t")), client.load_table((ns, "t"))
    first.append(ROWS)
    with pytest.raises(CommitFailedException, match="branch main has changed"):
        second.append(ROWS)
    assert client.load_table((ns, "t")).scan().to_arrow().num_rows == 6
    second.refresh().append(ROWS)  # what a client's retry does
    assert client.load_table((ns, "t")).scan().to_arrow().num_rows == 9
    schema_a, schema_b = client.load_table((ns, "t")), client.load_table((ns, "t"))
    with schema_a.update_schema() as update:
        update.add_column("a", IntegerType())
    with pytest.raises(CommitFailedException, match="current schema id has changed"), \
            schema_b.update_schema() as update:
        update.add_column("b", IntegerType())
    assert [f.name for f in client.load_table((ns, "t")).schema().fields] == ["id", "name", "a"]


def test_concurrent_commits_whose_requirements_still_hold_all_land(
        server: RestServer, client: RestCatalog, ns: str) -> None:
    """Eight clients set properties of one table at once: each asserts only the table's
    uuid, so a commit that loses the race to another is retried inside the server."""
    client.create_table((ns, "t"), ROWS.schema)
    before = version(server)
    tables = [server.client(f"c{i}").load_table((ns, "t")) for i in range(8)]
    start, failures = threading.Barrier(len(tables)), []

    def set_property(i: int) -> None:
        start.wait()
        try:
            tables[i].transaction().set_properties({f"p{i}": str(i)}).commit_transaction()
        except Exception as exc:  # reported below, with the others
            failures.append(exc)

    threads = [threading.Thread(target=set_property, args=(i,)) for i in range(len(tables))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    properties = client.load_table((ns, "t")).properties
    assert {f"p{i}": str(i) for i in range(8)}.items() <= properties.items()
    assert version(server) == before + 8


def test_the_latest_hint_of_the_last_commit_is_written_before_the_server_stops(
        tmp_path: Path) -> None:
    """``olympia serve`` writes vn/latest off its answers' path (one worker thread), and
    waits for the last of those writes when it is stopped."""
    with RestServer.on_new_catalog(tmp_path) as started:
        client = started.client()
        client.create_namespace("ns")
        table = client.create_table(("ns", "t"), ROWS.schema)
        for i in range(5):
            table.transaction().set_properties({"i": str(i)}).commit_transaction()
    store = OlympiaStore.open(str(tmp_path / "catalog"))
    assert store.version == 7 and store.files.read_hint(LATEST) == 7


def test_a_hint_write_that_fails_unexpectedly_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    """A hint write that raises what is no storage error (a bug) reaches the server's log
    instead of staying in its worker."""
    def broken() -> None:
        raise RuntimeError("a bug in the hint write")

    with ThreadPoolExecutor(1) as hints:
        hint_writer(hints)(broken)
    logged = [(r.levelname, str(r.exc_info[1])) for r in caplog.records
              if r.name == "olympia.cli.serve" and r.exc_info]
    assert logged == [("ERROR", "a bug in the hint write")]


def test_drop_with_purge_deletes_the_files(client: RestCatalog, ns: str) -> None:
    table = client.create_table((ns, "t"), ROWS.schema)
    table.append(ROWS)
    client.drop_table((ns, "t"), purge_requested=True)
    assert not table.io.new_input(table.metadata_location).exists()
    with pytest.raises(NoSuchTableError):
        client.load_table((ns, "t"))


def test_metrics_reports_are_accepted(server: RestServer, client: RestCatalog,
                                      ns: str) -> None:
    client.create_table((ns, "t"), ROWS.schema)
    report = json.dumps({"report-type": "commit-report", "table-name": f"{ns}.t",
                         "snapshot-id": 1, "sequence-number": 1, "operation": "append",
                         "metrics": {}})
    path = f"/v1/namespaces/{ns}/tables/t/metrics"
    assert request(server, "POST", path, report)[0] == 204
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/tables/u/metrics", report),
                 404, "NoSuchTableException", f"{ns}.u")
    assert_error(request(server, "POST", path, '{"report-type": "guess"}'), 400,
                 "BadRequestException", "report-type")


# --- what the server refuses ------------------------------------------------------------


@pytest.mark.parametrize(("body", "words"), [
    ("{not json", "malformed JSON"),
    ("[1, 2]", "JSON object"),
    (b"\xff\xfe", "JSON"),
    ('{"updates": [{"action": "drop-everything"}]}', "drop-everything"),
    ('{"requirements": [{"type": "assert-nothing"}]}', "assert-nothing"),
    ('{"updates": "all"}', "updates"),
])
def test_a_malformed_commit_is_a_bad_request(server: RestServer, client: RestCatalog, ns: str,
                                             body: str | bytes, words: str) -> None:
    client.create_table((ns, "t"), ROWS.schema)
    before = version(server)
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/tables/t", body), 400,
                 "BadRequestException", words)
    assert version(server) == before


def test_a_huge_body_is_refused_unread(server: RestServer, ns: str) -> None:
    body = json.dumps({"namespace": [f"{ns}_big"], "properties": {"x": "y" * 200_000}})
    assert_error(request(server, "POST", "/v1/namespaces", body), 413,
                 "BadRequestException", "larger than")


def test_names_stay_names(server: RestServer, client: RestCatalog, ns: str) -> None:
    """``/`` and ``..`` are names like any other, their files inside the warehouse; NUL is
    a name the format forbids."""
    for name in ("a/b", "..", "../../escape", "données/é", 'q"uote\\'):
        table = client.create_table((ns, name), ROWS.schema)
        assert table.location().startswith(f"{server.warehouse}/{ns}/")
        assert "/../" not in table.location() and not table.location().endswith("/..")
        if name != "..":  # pyiceberg sends .. unencoded and its HTTP library drops the step
            assert client.load_table((ns, name)).name() == (ns, name)
    assert sorted(client.list_tables(ns)) == [
        (ns, ".."), (ns, "../../escape"), (ns, "a/b"), (ns, "données/é"), (ns, 'q"uote\\')]
    status, _, body = request(server, "GET", f"/v1/namespaces/{ns}/tables/..")
    # escaped twice: decoded once, still one folder name
    assert status == 200 and body["metadata"]["location"].endswith("/%252E%252E")
    assert_error(request(server, "GET", f"/v1/namespaces/{ns}/tables/a%00b"), 400,
                 "BadRequestException", "forbidden characters")
    create = json.dumps({"name": "x\u0000y", "schema": {"type": "struct", "fields": []}})
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/tables", create), 400,
                 "BadRequestException", "forbidden characters")
    assert_error(request(server, "GET", f"/v1/namespaces/{ns}/tables/%FF"), 400,
                 "BadRequestException", "UTF-8")


def test_multi_level_namespaces_cannot_be_written_and_hold_nothing(
        server: RestServer, client: RestCatalog, ns: str) -> None:
    """Creates and writes in a multi-level namespace are 400; a read there finds nothing
    (404 of the kind read), as clients expect of a name that does not exist: Iceberg's Spark
    catalog reads ``ns.t.snapshots`` as table ``snapshots`` of namespace ``ns.t`` first."""
    client.create_table((ns, "t"), ROWS.schema)
    with pytest.raises(BadRequestError, match="one level"):
        client.create_namespace((ns, "inner"))
    with pytest.raises(BadRequestError, match="one level"):
        client.create_table((ns, "inner", "t"), ROWS.schema)
    deep, table = f"/v1/namespaces/{ns}%1Finner", f"/v1/namespaces/{ns}%1Finner/tables/t"
    create = json.dumps({"name": "t", "schema": {"type": "struct", "fields": []}})
    for method, path, body in (
            ("POST", table, '{"requirements": [], "updates": []}'),
            ("DELETE", table, None), ("DELETE", deep, None),
            ("POST", f"{deep}/properties", '{"updates": {"a": "b"}}'),
            ("POST", f"{deep}/tables", create),
            ("DELETE", f"{deep}/views/v", None)):
        assert_error(request(server, method, path, body), 400, "BadRequestException",
                     f"namespace '{ns}.inner' has 2 levels")

    with pytest.raises(NoSuchTableError, match=f"table {ns}.inner.t does not exist"):
        client.load_table((ns, "inner", "t"))
    assert not client.table_exists((ns, "inner", "t"))
    assert not client.view_exists((ns, "inner", "v"))
    with pytest.raises(NoSuchNamespaceError, match="one level"):
        client.load_namespace_properties((ns, "inner"))
    with pytest.raises(NoSuchNamespaceError, match="one level"):
        client.list_tables((ns, "inner"))
    for path, kind in ((table, "NoSuchTableException"),
                       (f"{deep}/views/v", "NoSuchViewException"),
                       (f"{deep}/tables", "NoSuchNamespaceException"),
                       (f"{deep}/views", "NoSuchNamespaceException"),
                       (deep, "NoSuchNamespaceException"),
                       (f"/v1/namespaces?parent={ns}%1Finner", "NoSuchNamespaceException")):
        assert_error(request(server, "GET", path), 404, kind, "Olympia namespaces have one level")
    for path in (deep, table, f"{deep}/views/v"):
        assert request(server, "HEAD", path)[0] == 404
    # the same in a catalog version
    at = f"/v1/version-{version(server)}/namespaces/{ns}%1Finner/tables/t"
    assert_error(request(server, "GET", at), 404, "NoSuchTableException", "one level")


def test_clients_place_nothing_outside_the_warehouse(server: RestServer, client: RestCatalog,
                                                     ns: str, tmp_path: Path) -> None:
    outside = f"file://{tmp_path}/elsewhere"
    with pytest.raises(BadRequestError, match="outside the server's warehouse"):
        client.create_table((ns, "t"), ROWS.schema, location=outside)
    with pytest.raises(BadRequestError, match="write.metadata.path .* is outside its location"):
        client.create_table((ns, "t"), ROWS.schema,
                            properties={"write.metadata.path": outside})
    with pytest.raises(BadRequestError, match="file access"):
        client.create_table((ns, "t"), ROWS.schema, properties={"s3.endpoint": "http://x"})
    table = client.create_table((ns, "t"), ROWS.schema)
    with pytest.raises(BadRequestError, match="py-io-impl"):
        table.transaction().set_properties({"py-io-impl": "some.module.IO"}).commit_transaction()
    with pytest.raises(BadRequestError, match="outside the server's warehouse"):
        client.register_table((ns, "r"), f"{outside}/00000-x.metadata.json")
    # a metadata file inside the warehouse describing a table outside it
    moved = f"{table.location()}/metadata/99999-moved.metadata.json"
    ToOutputFile.table_metadata(table.metadata.model_copy(update={"location": outside}),
                                table.io.new_output(moved))
    with pytest.raises(BadRequestError, match=f"location of table {ns}.r, {outside}, is out"):
        client.register_table((ns, "r"), moved)
    assert client.list_tables(ns) == [(ns, "t")]


def test_unknown_routes_and_methods_answer_an_error_model(server: RestServer) -> None:
    assert_error(request(server, "GET", "/v1/nothing/here"), 404, "NoSuchRouteException",
                 "/v1/nothing/here")
    assert_error(request(server, "PUT", "/v1/namespaces"), 405, "MethodNotAllowedException",
                 "PUT")



def test_a_table_whose_metadata_file_is_gone_or_corrupt(server: RestServer, client: RestCatalog,
                                                        ns: str) -> None:
    """The table exists (HEAD says so); a reader that never read its metadata file cannot
    serve it: a 500 naming the table and the file, not a 404 that clients would read as a
    missing table. The server that wrote the file keeps answering its committed content
    (the definition records its digest: nothing the store holds now is needed)."""
    for name, damage in (("gone", b""), ("corrupt", b"{not metadata")):
        table = client.create_table((ns, name), ROWS.schema)
        path = Path(urlsplit(table.metadata_location).path)
        if damage:
            path.write_bytes(damage)
        else:
            path.unlink()
        assert request(server, "HEAD", f"/v1/namespaces/{ns}/tables/{name}")[0] == 204
        assert request(server, "GET", f"/v1/namespaces/{ns}/tables/{name}")[0] == 200
        with RestServer(server.catalog_uri, server.warehouse) as other:
            assert_error(request(other, "GET", f"/v1/namespaces/{ns}/tables/{name}"), 500,
                         "CorruptFileException", f"table {ns}.{name}")


def test_a_metadata_file_replaced_after_its_commit(server: RestServer, client: RestCatalog,
                                                   ns: str) -> None:
    """A load serves the content the commit recorded: the server that wrote the file
    answers it from memory; a reader that never read it refuses the replacement (its
    bytes do not have the digest the definition records)."""
    table = client.create_table((ns, "t"), ROWS.schema)
    first = Path(urlsplit(table.metadata_location).path).read_bytes()
    table.append(ROWS)
    _, _, body = request(server, "GET", f"/v1/namespaces/{ns}/tables/t")
    assert len(body["metadata"]["snapshots"]) == 1
    Path(urlsplit(body["metadata-location"]).path).write_bytes(first)
    _, _, body = request(server, "GET", f"/v1/namespaces/{ns}/tables/t")
    assert len(body["metadata"]["snapshots"]) == 1
    with RestServer(server.catalog_uri, server.warehouse) as other:
        assert_error(request(other, "GET", f"/v1/namespaces/{ns}/tables/t"), 500,
                     "CorruptFileException", "do not have the SHA-256 its definition records")


def test_a_client_leaving_mid_request_changes_nothing(server: RestServer, client: RestCatalog,
                                                      ns: str) -> None:
    """The body never ends: nothing lands, and the server answers others as before (its
    log is checked for tracebacks when the module's server stops)."""
    table = client.create_table((ns, "t"), ROWS.schema)
    before = version(server)
    address = urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as conn:
        conn.sendall(f"POST /v1/namespaces/{ns}/tables/t HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n"
                     '{"updates": ['.encode())
    table.append(ROWS)
    assert version(server) == before + 1
    assert client.load_table((ns, "t")).scan().to_arrow().num_rows == 3


def _eight_appends_at_once(server: RestServer, ns: str, tables: int) -> int:
    """Eight clients append at once, to one table or to one table each (losers of a race
    to one table get 409s and retry, as pyiceberg does on its own; the tables allow 20
    retries, as eight writers can beat one client more often than pyiceberg's default four).
    Every append lands; returns the catalog's version before them."""
    client = server.client()
    for i in range(tables):
        client.create_table((ns, f"t{i}"), ROWS.schema,
                            properties={"commit.retry.num-retries": "20"})
    before = version(server)
    loaded = [server.client(f"c{i}").load_table((ns, f"t{i % tables}")) for i in range(8)]
    start, failures = threading.Barrier(len(loaded)), []

    def append(table: Table) -> None:
        start.wait()
        try:
            table.append(ROWS)
        except Exception as exc:  # reported below, with the others
            failures.append(exc)

    threads = [threading.Thread(target=append, args=(t,)) for t in loaded]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sum(client.load_table((ns, f"t{i}")).scan().to_arrow().num_rows
               for i in range(tables)) == 8 * ROWS.num_rows
    return before


def _appends_by_version(server: RestServer, ns: str, tables: int, before: int
                        ) -> list[int]:
    """For each version after ``before``, how many appends it holds, counted as the new
    snapshots of the tables ``t<i>`` of ``ns`` against the version before it."""
    store = OlympiaStore.open(server.catalog_uri)
    try:
        catalog = OlympiaCatalog.over(store)

        def snapshots(at: int) -> int:
            pinned = catalog.at_version(at)
            return sum(len(pinned.load_table((ns, f"t{i}")).snapshots())
                       for i in range(tables))
        counts = [snapshots(v) for v in range(before, store.version + 1)]
    finally:
        store.close()
    return [b - a for a, b in itertools.pairwise(counts)]


def test_eight_clients_append_to_one_table_one_version_each(
        server: RestServer, ns: str) -> None:
    """Appends to one table never share a version: each is its own, in some order."""
    before = _eight_appends_at_once(server, ns, 1)
    assert _appends_by_version(server, ns, 1, before) == [1] * 8


def test_eight_clients_append_to_eight_tables_and_versions_hold_every_append(
        server: RestServer, ns: str) -> None:
    """Appends to different tables arriving together may share a version (the server
    coalesces commits, ``--coalesce-commits``): every version after the appends holds at
    least one of them, and together exactly the eight."""
    before = _eight_appends_at_once(server, ns, 8)
    held = _appends_by_version(server, ns, 8, before)
    assert sum(held) == 8 and all(n >= 1 for n in held), held


def test_without_coalescing_every_commit_is_a_version_of_its_own(tmp_path: Path) -> None:
    with RestServer.on_new_catalog(tmp_path, "--no-coalesce-commits") as started:
        ns = "ns"
        started.client().create_namespace(ns)
        before = _eight_appends_at_once(started, ns, 8)
        assert _appends_by_version(started, ns, 8, before) == [1] * 8


def test_a_purge_never_deletes_outside_the_warehouse(client: RestCatalog, ns: str,
                                                     tmp_path: Path) -> None:
    """A client may not commit metadata naming a file outside the table's location (here
    one added outside the warehouse): a 400, the table unchanged; its purge deletes only
    its own files. (A trusted writer's such commit: tests/test_confinement.py.)"""
    outside = tmp_path / "elsewhere.parquet"
    pq.write_table(ROWS, outside)
    table = client.create_table((ns, "t"), ROWS.schema)
    with pytest.raises(BadRequestError, match=f"{ns}.t: its data file, file://{outside}, is "
                                              "outside its location"):
        table.add_files([f"file://{outside}"])
    assert client.load_table((ns, "t")).current_snapshot() is None
    client.purge_table((ns, "t"))
    assert outside.exists() and not client.table_exists((ns, "t"))


def test_a_commit_of_unknown_outcome_is_answered_as_iceberg_clients_read_it() -> None:
    """CommitOutcomeUnknown (a caller interrupted after its change was handed to a batch) is
    the 500 ``CommitStateUnknownException`` that pyiceberg and Java clients map to their
    commit-state-unknown error, never a 400 or a generic bug answer."""
    from olympia.exceptions import CommitOutcomeUnknown
    from olympia.server.errors import response_for

    answer = response_for(CommitOutcomeUnknown("commit of s.t: outcome unknown"))
    assert answer.status_code == 500
    assert json.loads(bytes(answer.body))["error"] == {
        "message": "commit of s.t: outcome unknown", "type": "CommitStateUnknownException",
        "code": 500}


def test_a_lost_race_is_retried_with_the_librarys_pause_and_budget() -> None:
    """The server retries a commit that lost a race to the same table after the library's
    jittered, doubling pause, within the library's budget from the first try; a failed
    requirement (no lost race behind it) is answered at once."""
    now, slept = [0.0], []
    options = CommitOptions(timeout_s=1.0, backoff_s=0.1, max_backoff_s=0.4,
                            clock=lambda: now[0], sleep=slept.append, jitter=lambda b: b)

    def losing(times: int) -> Callable[[], str]:
        left = [times]

        def commit() -> str:
            if left[0]:
                left[0] -= 1
                now[0] += 0.2
                raise CommitFailedException("lost") from CommitConflict("raced")
            return "landed"
        return commit

    assert retry_lost_races(losing(3), options) == "landed"
    assert slept == [0.1, 0.2, 0.4]
    slept.clear()
    now[0] = 0.0
    with pytest.raises(CommitFailedException):
        retry_lost_races(losing(10), options)  # 0.2 s a try: the budget ends at the 6th
    assert len(slept) == 5

    def unmet() -> str:
        raise CommitFailedException("requirement failed")

    slept.clear()
    with pytest.raises(CommitFailedException):
        retry_lost_races(unmet, options)
    assert slept == []
