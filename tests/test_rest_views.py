"""Views through `olympia serve`: pyiceberg's RestCatalog where it has the call (list, create,
load, exists, drop), raw HTTP where it has none (replace, rename), and the Olympia library
reading the views the server wrote.

One server per module over a catalog on local disk; names are unique per test.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchViewError, ViewAlreadyExistsError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion
from restserver import RestServer, assert_error, request, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.iceberg import OlympiaCatalog

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True),
                NestedField(2, "name", StringType(), required=False))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    root = tmp_path_factory.mktemp("rest_views")
    with RestServer.on_new_catalog(root) as started:
        yield started
    assert not any("Traceback" in line for line in started.log), "".join(started.log)


@pytest.fixture
def client(server: RestServer) -> RestCatalog:
    return server.client()


@pytest.fixture
def ns(client: RestCatalog) -> str:
    name = f"views_{uuid.uuid4().hex[:10]}"
    client.create_namespace(name)
    return name


def sql_version(sql: str, namespace: str, dialect: str = "spark") -> ViewVersion:
    """A view version with one SQL representation."""
    return ViewVersion(  # type: ignore[call-arg]
        version_id=1, schema_id=0, summary={"engine-name": "test"},
        representations=[ViewRepresentation(SQLViewRepresentation(
            type="sql", sql=sql, dialect=dialect))],
        default_namespace=[namespace])


def olympia_view(server: RestServer, ns: str, name: str) -> Any:
    """The Olympia view as the library reads it (not through the server)."""
    store = OlympiaStore.open(server.catalog_uri)
    try:
        return store.load_view(ns, name)
    finally:
        store.close()


def replace_body(uuid_: str, sql: str, ns: str, **more: Any) -> dict[str, Any]:
    """What an engine sends to replace a view's SQL: a schema, a version, make it current."""
    return {"requirements": [{"type": "assert-view-uuid", "uuid": uuid_}],
            "updates": [
                {"action": "add-schema", "schema": json.loads(SCHEMA.model_dump_json())},
                {"action": "add-view-version", "view-version": {
                    "version-id": 7, "schema-id": -1, "timestamp-ms": 1700000000000,
                    "summary": {"engine-name": "test"}, "default-namespace": [ns],
                    "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}]}},
                {"action": "set-current-view-version", "view-version-id": -1},
                *more.get("updates", [])]}


def test_config_lists_the_view_endpoints(server: RestServer) -> None:
    _, _, body = request(server, "GET", "/v1/config")
    for endpoint in ("GET /v1/{prefix}/namespaces/{namespace}/views",
                     "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
                     "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
                     "POST /v1/{prefix}/views/rename"):
        assert endpoint in body["endpoints"]


def test_a_view_lives_through_the_server(server: RestServer, client: RestCatalog,
                                         ns: str) -> None:
    before = version(server)
    created = client.create_view((ns, "recent"), SCHEMA,
                                 sql_version("SELECT id, name FROM t", ns),
                                 properties={"comment": "the recent rows", "owner": "ana"})
    assert version(server) == before + 1
    assert client.list_views(ns) == [(ns, "recent")]
    assert client.view_exists((ns, "recent")) and not client.view_exists((ns, "nope"))
    loaded = client.load_view((ns, "recent"))
    assert loaded.metadata == created.metadata
    assert loaded.current_version().representations[0].root.sql == "SELECT id, name FROM t"
    assert loaded.schema().as_struct() == SCHEMA.as_struct()
    assert loaded.properties == {"comment": "the recent rows", "owner": "ana"}
    assert loaded.location().startswith(server.warehouse)
    # the Olympia view mirrors it: SQL, dialect, columns, default namespace, comment
    view = olympia_view(server, ns, "recent")
    assert (view.sql, view.dialect, view.default_namespace, view.comment) == (
        "SELECT id, name FROM t", "spark", ns, "the recent rows")
    assert [c.name for c in view.columns] == ["id", "name"]
    with pytest.raises(ViewAlreadyExistsError):
        client.create_view((ns, "recent"), SCHEMA, sql_version("SELECT 1", ns))
    client.drop_view((ns, "recent"))
    assert client.list_views(ns) == [] and not client.view_exists((ns, "recent"))
    with pytest.raises(NoSuchViewError):
        client.load_view((ns, "recent"))
    with pytest.raises(NoSuchViewError):
        client.drop_view((ns, "recent"))


def test_the_server_and_olympia_catalog_serve_the_same_views(server: RestServer,
                                                             client: RestCatalog,
                                                             ns: str) -> None:
    """A view created through the server is loaded in-process by OlympiaCatalog, one created
    in-process is loaded through the server, and a replace through the server is what
    OlympiaCatalog loads next: both read and write the same stored view metadata."""
    local = OlympiaCatalog("local", uri=server.catalog_uri, warehouse=server.warehouse)
    try:
        served = client.create_view((ns, "served"), SCHEMA, sql_version("SELECT 1 AS id", ns))
        assert local.load_view((ns, "served")).metadata == served.metadata
        made = local.create_view((ns, "made"), SCHEMA, sql_version("SELECT 2 AS id", ns),
                                 properties={"owner": "ana"})
        assert client.load_view((ns, "made")).metadata == made.metadata
        assert client.list_views(ns) == local.list_views(ns) == [(ns, "made"), (ns, "served")]
        status, _, body = request(server, "POST", f"/v1/namespaces/{ns}/views/made",
                                  json.dumps(replace_body(made.metadata.view_uuid,
                                                          "SELECT 3 AS id", ns)))
        assert status == 200, body
        replaced = local.load_view((ns, "made"))
        assert replaced.current_version().representations[0].root.sql == "SELECT 3 AS id"
        assert replaced.metadata == client.load_view((ns, "made")).metadata
        local.drop_view((ns, "served"))
        assert not client.view_exists((ns, "served"))
    finally:
        local.close()


def test_views_list_page_by_page(server: RestServer, client: RestCatalog, ns: str) -> None:
    for name in ("c", "a", "b"):
        client.create_view((ns, name), SCHEMA, sql_version("SELECT 1 AS id", ns))
    status, _, first = request(server, "GET", f"/v1/namespaces/{ns}/views?pageSize=2")
    assert status == 200 and [v["name"] for v in first["identifiers"]] == ["a", "b"]
    token = quote(first["next-page-token"])
    _, _, rest = request(server, "GET", f"/v1/namespaces/{ns}/views?pageSize=2&pageToken={token}")
    assert [v["name"] for v in rest["identifiers"]] == ["c"] and rest["next-page-token"] is None
    assert server.client("paged", **{"rest-page-size": "1"}).list_views(ns) == [
        (ns, "a"), (ns, "b"), (ns, "c")]
    assert_error(request(server, "GET", f"/v1/namespaces/{ns}/tables?pageToken={token}"), 400,
                 "BadRequestException", "another listing")


def test_replace_keeps_the_uuid_and_the_history(server: RestServer, client: RestCatalog,
                                                 ns: str) -> None:
    created = client.create_view((ns, "v"), SCHEMA, sql_version("SELECT 1 AS id", ns))
    uuid_ = created.metadata.view_uuid
    before = version(server)
    status, _, body = request(server, "POST", f"/v1/namespaces/{ns}/views/v", json.dumps(
        replace_body(uuid_, "SELECT 2 AS id", ns, updates=[
            {"action": "set-properties", "updates": {"owner": "bo"}}])))
    assert status == 200, body
    assert version(server) == before + 1
    metadata = client.load_view((ns, "v")).metadata
    assert body["metadata"]["view-uuid"] == metadata.view_uuid == uuid_
    assert [v.version_id for v in metadata.versions] == [1, 2]
    assert metadata.current_version_id == 2
    assert [e.version_id for e in metadata.version_log] == [1, 2]
    assert metadata.properties == {"owner": "bo"}
    assert olympia_view(server, ns, "v").sql == "SELECT 2 AS id"
    # going back to the first SQL reuses version 1
    status, _, body = request(server, "POST", f"/v1/namespaces/{ns}/views/v",
                              json.dumps(replace_body(uuid_, "SELECT 1 AS id", ns)))
    assert status == 200 and body["metadata"]["current-version-id"] == 1, body
    assert len(body["metadata"]["versions"]) == 2
    # a stale uuid (the view was dropped and created again) is a 409, nothing changes
    before = version(server)
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/views/v",
                         json.dumps(replace_body(str(uuid.uuid4()), "SELECT 3", ns))),
                 409, "CommitFailedException", "uuid")
    assert version(server) == before


def test_rename_within_and_across_namespaces(server: RestServer, client: RestCatalog,
                                             ns: str) -> None:
    client.create_view((ns, "a"), SCHEMA, sql_version("SELECT 1 AS id", ns))
    other = f"{ns}_other"
    client.create_namespace(other)

    def rename(src: tuple[str, str], dst: tuple[str, str]) -> tuple[int, Any, Any]:
        return request(server, "POST", "/v1/views/rename", json.dumps({
            "source": {"namespace": [src[0]], "name": src[1]},
            "destination": {"namespace": [dst[0]], "name": dst[1]}}))

    assert rename((ns, "a"), (ns, "b"))[0] == 204
    assert rename((ns, "b"), (other, "c"))[0] == 204
    assert client.list_views(ns) == [] and client.list_views(other) == [(other, "c")]
    assert client.load_view((other, "c")).current_version().representations[0].root.sql == (
        "SELECT 1 AS id")
    assert_error(rename((ns, "b"), (ns, "d")), 404, "NoSuchViewException", "b")
    assert_error(rename((other, "c"), ("missing_ns", "c")), 404, "NoSuchNamespaceException",
                 "missing_ns")
    client.create_view((ns, "taken"), SCHEMA, sql_version("SELECT 1 AS id", ns))
    assert_error(rename((other, "c"), (ns, "taken")), 409, "AlreadyExistsException", "taken")


def test_what_a_view_cannot_hold_is_refused(server: RestServer, client: RestCatalog,
                                            ns: str) -> None:
    two = sql_version("SELECT 1 AS id", ns)
    two.representations.append(ViewRepresentation(SQLViewRepresentation(
        type="sql", sql="SELECT 1 AS id", dialect="trino")))
    body = {"name": "v", "schema": json.loads(SCHEMA.model_dump_json()),
            "view-version": json.loads(two.model_dump_json()), "properties": {}}
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/views", json.dumps(body)),
                 400, "BadRequestException", "2 SQL representations")
    body["view-version"] = json.loads(sql_version("SELECT 1 AS id", ns).model_dump_json())
    body["location"] = "file:///elsewhere/v"
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/views", json.dumps(body)),
                 400, "BadRequestException", "outside the server's warehouse")
    del body["location"]
    body["properties"] = {"iceberg.metadata-location": "file:///x"}
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/views", json.dumps(body)),
                 400, "BadRequestException", "iceberg.metadata-location")
    assert not client.view_exists((ns, "v"))
    created = client.create_view((ns, "v"), SCHEMA, sql_version("SELECT 1 AS id", ns))
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/views/v", json.dumps({
        "updates": [{"action": "set-current-view-version", "view-version-id": 9}]})),
        400, "BadRequestException", "no version 9")
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/views/v", json.dumps({
        "updates": [{"action": "assign-uuid", "uuid": str(uuid.uuid4())}]})),
        400, "BadRequestException", "never changes")
    assert_error(request(server, "POST", f"/v1/namespaces/{ns}/views/v", json.dumps({
        "updates": [{"action": "add-spec"}]})), 400, "BadRequestException", "add-spec")
    assert client.load_view((ns, "v")).metadata == created.metadata


def test_views_of_olympias_own_tools(server: RestServer, client: RestCatalog,
                                     ns: str) -> None:
    store = OlympiaStore.open(server.catalog_uri)
    try:
        store.create_view((ns, "native"), sql="SELECT 1 AS one", dialect="ansi")
    finally:
        store.close()
    assert client.list_views(ns) == [(ns, "native")] and client.view_exists((ns, "native"))
    assert_error(request(server, "GET", f"/v1/namespaces/{ns}/views/native"), 406,
                 "UnsupportedOperationException", "Olympia's own tools")
    client.create_view((ns, "redefined"), SCHEMA, sql_version("SELECT 1 AS id", ns))
    store = OlympiaStore.open(server.catalog_uri)
    try:
        view = store.load_view(ns, "redefined")
        store.replace_view((ns, "redefined"), sql="SELECT 2 AS id", dialect=view.dialect,
                           columns=view.columns, default_namespace=view.default_namespace,
                           properties=view.properties, comment=view.comment)
    finally:
        store.close()
    assert_error(request(server, "GET", f"/v1/namespaces/{ns}/views/redefined"), 406,
                 "UnsupportedOperationException", "redefined with Olympia's own tools")
    client.drop_view((ns, "native"))
    assert not client.view_exists((ns, "native"))


def test_a_view_whose_metadata_file_is_gone(server: RestServer, client: RestCatalog,
                                            ns: str) -> None:
    client.create_view((ns, "v"), SCHEMA, sql_version("SELECT 1 AS id", ns))
    location = olympia_view(server, ns, "v").properties["iceberg.metadata-location"]
    Path(location.removeprefix("file://")).unlink()
    assert_error(request(server, "GET", f"/v1/namespaces/{ns}/views/v"), 500,
                 "CorruptFileException", "does not exist")
    assert client.view_exists((ns, "v"))


def test_a_catalog_version_serves_its_views_read_only(server: RestServer, client: RestCatalog,
                                                      ns: str) -> None:
    client.create_view((ns, "v"), SCHEMA, sql_version("SELECT 1 AS id", ns))
    pinned = version(server)
    client.drop_view((ns, "v"))
    old = server.client("old", warehouse=f"{server.warehouse}@{pinned}")
    assert old.list_views(ns) == [(ns, "v")]
    assert old.load_view((ns, "v")).current_version().representations[0].root.sql == (
        "SELECT 1 AS id")
    assert_error(request(server, "DELETE", f"/v1/version-{pinned}/namespaces/{ns}/views/v"),
                 403, "ForbiddenException", f"catalog version {pinned} is read-only")


def test_concurrent_replaces_all_land(server: RestServer, client: RestCatalog, ns: str) -> None:
    """Replaces racing on one view are tried again in the server (their uuid requirement
    still holds): each lands as its own view version."""
    uuid_ = client.create_view((ns, "v"), SCHEMA, sql_version("SELECT 0 AS id", ns)
                               ).metadata.view_uuid
    answers: list[int] = []

    def replace(i: int) -> None:
        status, _, _ = request(server, "POST", f"/v1/namespaces/{ns}/views/v",
                               json.dumps(replace_body(uuid_, f"SELECT {i} AS id", ns)))
        answers.append(status)

    threads = [threading.Thread(target=replace, args=(i,)) for i in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [200] * 4
    metadata = client.load_view((ns, "v")).metadata
    sqls = {v.representations[0].root.sql for v in metadata.versions}
    assert sqls == {f"SELECT {i} AS id" for i in range(5)}
    assert len(metadata.version_log) == 5
