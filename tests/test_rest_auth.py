"""Who may call ``olympia serve``: bearer tokens from ``--token-file`` (read-only or
read-write), OAuth2 client credentials through ``POST /v1/oauth/tokens`` (pyiceberg's
``credential=``), and the refusal to serve a non-loopback address unauthenticated."""

from __future__ import annotations

import base64
import json
import resource
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pyiceberg.exceptions import ForbiddenError, OAuthError, UnauthorizedError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from pyiceberg.view import View
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion
from restserver import RestServer, assert_error, request, version
from starlette.routing import Mount

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.cli import main
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.server import CatalogService, create_app
from olympia.server.access import Access
from olympia.server.auth import Tokens

READER, WRITER = "reader-secret-1f3a", "writer-secret-9c2e"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True))
SCHEMA_JSON = SCHEMA.model_dump_json()


def _sql_version(namespace: str) -> ViewVersion:
    return ViewVersion(  # type: ignore[call-arg]
        version_id=1, schema_id=0, summary={"engine-name": "test"},
        representations=[ViewRepresentation(SQLViewRepresentation(
            type="sql", sql="SELECT 1 AS id", dialect="spark"))],
        default_namespace=[namespace])


def _replace_view(view: View, namespace: str) -> dict[str, Any]:
    """A body replacing a view's SQL (what an engine sends)."""
    return {"requirements": [{"type": "assert-view-uuid", "uuid": str(view.metadata.view_uuid)}],
            "updates": [{"action": "add-view-version", "view-version": {
                "version-id": 7, "schema-id": 0, "timestamp-ms": 1700000000000,
                "summary": {"engine-name": "test"}, "default-namespace": [namespace],
                "representations": [{"type": "sql", "sql": "SELECT 2 AS id",
                                     "dialect": "spark"}]}},
                {"action": "set-current-view-version", "view-version-id": -1}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    root = tmp_path_factory.mktemp("rest")
    tokens = root / "tokens"
    tokens.write_text(f"# clients\nanalyst read-only {READER}\n\netl read-write {WRITER}\n")
    with RestServer.on_new_catalog(root, "--token-file", str(tokens)) as started:
        yield started
    assert not any(secret in "".join(started.log) for secret in (READER, WRITER))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_without_a_valid_token_nothing_is_served(server: RestServer) -> None:
    for headers in ({}, bearer("guess"), {"Authorization": f"Basic {WRITER}"}):
        status, answer_headers, body = request(server, "GET", "/v1/config", headers=headers)
        assert status == 401 and answer_headers["www-authenticate"] == "Bearer"
        assert body["error"]["type"] == "NotAuthorizedException"
    with pytest.raises(UnauthorizedError):
        server.client()
    with pytest.raises(UnauthorizedError):
        server.client(token="guess")


def test_a_read_only_token_reads_and_reports_but_changes_nothing(server: RestServer) -> None:
    ns = f"auth_{uuid.uuid4().hex[:8]}"
    server.client(token=WRITER).create_namespace(ns)
    reader = server.client(token=READER)
    assert (ns,) in reader.list_namespaces() and reader.namespace_exists(ns)
    with pytest.raises(ForbiddenError, match="client analyst is read-only"):
        reader.create_namespace(f"{ns}_2")
    with pytest.raises(ForbiddenError, match="read-only"):
        reader.drop_namespace(ns)
    assert server.client(token=WRITER).namespace_exists(ns)
    metrics = f"/v1/namespaces/{ns}/tables/t/metrics"
    report = '{"report-type": "scan-report"}'
    assert_error(request(server, "POST", metrics, report, bearer(READER)), 404,
                 "NoSuchTableException", f"{ns}.t")  # let through; the table is missing


def test_client_credentials_are_traded_for_an_access_token(server: RestServer) -> None:
    ns = f"auth_{uuid.uuid4().hex[:8]}"
    writer = server.client(credential=f"etl:{WRITER}",
                           **{"oauth2-server-uri": f"{server.url}/v1/oauth/tokens"})
    writer.create_namespace(ns)
    reader = server.client(credential=f"analyst:{READER}",
                           **{"oauth2-server-uri": f"{server.url}/v1/oauth/tokens"})
    with pytest.raises(ForbiddenError):
        reader.drop_namespace(ns)
    with pytest.raises(OAuthError, match="invalid_client"):
        server.client(credential=f"etl:{READER}",
                      **{"oauth2-server-uri": f"{server.url}/v1/oauth/tokens"})


def test_the_token_endpoint_speaks_oauth2(server: RestServer) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    basic = base64.b64encode(f"etl:{WRITER}".encode()).decode()
    status, _, body = request(server, "POST", "/v1/oauth/tokens",
                              "grant_type=client_credentials&scope=catalog",
                              {**form, "Authorization": f"Basic {basic}"})
    assert status == 200 and body["token_type"] == "bearer" and body["expires_in"] > 0
    assert request(server, "GET", "/v1/config", headers=bearer(body["access_token"]))[0] == 200
    status, _, body = request(server, "POST", "/v1/oauth/tokens",
                              "grant_type=password&username=x", form)
    assert (status, body["error"]) == (400, "unsupported_grant_type")
    status, _, body = request(server, "POST", "/v1/oauth/tokens",
                              f"grant_type=client_credentials&client_id=nobody"
                              f"&client_secret={WRITER}", form)
    assert (status, body["error"]) == (401, "invalid_client")


def _serve(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["serve", *args])
    return result.exit_code, result.output


def test_serve_refuses_what_it_cannot_do_safely(tmp_path: Path) -> None:
    catalog = str(tmp_path / "catalog")
    OlympiaStore.create(catalog).close()
    code, output = _serve("-c", catalog, "--warehouse", f"file://{tmp_path}/wh",
                          "--host", "0.0.0.0")
    assert code == 1 and "not a loopback address" in output and "--token-file" in output
    code, output = _serve("-c", catalog)
    assert code == 1 and "needs a warehouse" in output
    tokens = tmp_path / "tokens"
    tokens.write_text("etl read-write s3cr3t-value\nanalyst sometimes another-s3cr3t\n")
    code, output = _serve("-c", catalog, "--warehouse", f"file://{tmp_path}/wh",
                          "--token-file", str(tokens))
    assert code == 1 and "line 2" in output and "s3cr3t" not in output
    code, output = _serve("-c", str(tmp_path / "missing"), "--warehouse", "file:///wh")
    assert code == 1 and "Traceback" not in output
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    code, output = _serve("-c", catalog, "--warehouse", f"file://{tmp_path}/wh",
                          "--max-connections", str(limit))
    assert code == 1 and f"this process may open {limit}" in output and "ulimit -n" in output


def _declared(route: APIRoute) -> set[str]:
    """The access kinds a route's dependencies declare (its own and theirs)."""
    found, todo = set(), [route.dependant]
    while todo:
        dependant = todo.pop()
        if isinstance(dependant.call, Access):
            found.add(dependant.call.access)
        todo += dependant.dependencies
    return found


def _undeclared(app: FastAPI) -> list[str]:
    """Routes of ``app`` and of the apps mounted in it that declare no access, or two."""
    wrong = []
    for route in app.routes:
        if isinstance(route, APIRoute) and len(_declared(route)) != 1:
            wrong.append(f"{sorted(route.methods)} {route.path}")
        elif isinstance(route, Mount) and isinstance(route.app, FastAPI):
            wrong += [f"{route.path}{path}" for path in _undeclared(route.app)]
    return wrong


@pytest.mark.parametrize("with_tokens", [True, False])
def test_every_route_declares_whether_it_reads_or_writes(tmp_path: Path,
                                                        with_tokens: bool) -> None:
    store = OlympiaStore.create(str(tmp_path / "catalog"))
    catalog = OlympiaCatalog.over(store)
    catalog.properties["warehouse"] = f"file://{tmp_path}/warehouse"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"analyst read-only {READER}\n")
    wrapped = create_app(CatalogService(catalog, {}),
                         tokens=Tokens.load(tokens) if with_tokens else None)
    app: Any = wrapped
    while not isinstance(app, FastAPI):  # the ASGI wrappers around it
        app = app.app
    assert _undeclared(app) == []
    writes = {f"{method} {route.path.removeprefix('/v1')}" for route in app.routes
              if isinstance(route, APIRoute) and route.path.startswith(
                  ("/v1/namespaces", "/v1/tables", "/v1/views", "/v1/transactions"))
              for method in route.methods if _declared(route) == {"write"}}
    assert writes == {
        "POST /namespaces", "DELETE /namespaces/{namespace}",
        "POST /namespaces/{namespace}/properties", "POST /namespaces/{namespace}/tables",
        "POST /namespaces/{namespace}/tables/{table}",
        "DELETE /namespaces/{namespace}/tables/{table}", "POST /namespaces/{namespace}/register",
        "POST /tables/rename", "POST /transactions/commit", "POST /namespaces/{namespace}/views",
        "POST /namespaces/{namespace}/views/{view}",
        "DELETE /namespaces/{namespace}/views/{view}", "POST /views/rename"}
    # the walk finds a route that declares nothing
    app.add_api_route("/v1/forgotten", lambda: None, methods=["POST"])
    assert _undeclared(app) == ["['POST'] /v1/forgotten"]
    store.close()


SUFFIXES = ("metrics", "rename", "register", "plan")


def test_objects_named_like_route_suffixes_are_safe_from_read_only_clients(
        server: RestServer) -> None:
    """Issue 44: a read-only client changed a table and a view named ``metrics``, because
    the server took every POST whose path ended in ``/metrics`` for a read."""
    writer = server.client(token=WRITER)
    ns = f"auth_{uuid.uuid4().hex[:8]}"
    vns = f"{ns}_views"  # a table and a view cannot share a name
    writer.create_namespace(ns)
    writer.create_namespace(vns)
    views = []
    for name in SUFFIXES:
        writer.create_table((ns, name), SCHEMA)
        views.append(writer.create_view((vns, name), SCHEMA, _sql_version(vns)))
    for name in SUFFIXES:  # a namespace of that name too
        writer.create_namespace(f"{ns}_{name}")
    before = version(server)
    reader = bearer(READER)
    for name, view in zip(SUFFIXES, views, strict=True):
        table = f"/v1/namespaces/{ns}/tables/{name}"
        refused = [
            ("POST", table, {"requirements": [], "updates": [
                {"action": "set-properties", "updates": {"owner": "mallory"}}]}),
            ("POST", table, {"requirements": [{"type": "assert-create"}], "updates": []}),
            ("DELETE", table, None),
            ("POST", f"/v1/namespaces/{ns}/tables", {"name": name,
                                                     "schema": json.loads(SCHEMA_JSON)}),
            ("POST", f"/v1/namespaces/{vns}/views/{name}", _replace_view(view, vns)),
            ("DELETE", f"/v1/namespaces/{vns}/views/{name}", None),
            ("POST", f"/v1/namespaces/{ns}_{name}/properties",
             {"removals": [], "updates": {"owner": "mallory"}}),
            ("POST", f"/v1/namespaces/{ns}/register",
             {"name": name, "metadata-location": "file:///nowhere/metadata.json"}),
            ("POST", f"/v1/{name}/rename", {"source": {"namespace": [ns], "name": name},
                                            "destination": {"namespace": [ns], "name": "x"}}),
        ]
        for method, path, payload in refused:
            answer = request(server, method, path,
                             None if payload is None else json.dumps(payload), reader)
            if path.startswith(f"/v1/{name}/"):  # no such route: nothing to authorize
                assert answer[0] == 404, (method, path)
                continue
            assert_error(answer, 403, "ForbiddenException", "client analyst is read-only")
        # reads still work on them, and a metrics report on a table named like a suffix
        assert request(server, "GET", table, headers=reader)[0] == 200
        assert request(server, "GET", f"/v1/namespaces/{vns}/views/{name}",
                       headers=reader)[0] == 200
        assert request(server, "POST", f"{table}/metrics", '{"report-type": "scan-report"}',
                       reader)[0] == 204
    assert version(server) == before  # no catalog version came of any of it
