"""Who may call ``olympia serve``: bearer tokens from ``--token-file`` (read-only or
read-write), OAuth2 client credentials through ``POST /v1/oauth/tokens`` (pyiceberg's
``credential=``), and the refusal to serve a non-loopback address unauthenticated."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyiceberg.exceptions import ForbiddenError, OAuthError, UnauthorizedError
from restserver import RestServer, assert_error, request

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.cli import main

READER, WRITER = "reader-secret-1f3a", "writer-secret-9c2e"


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
