"""``olympia serve`` over a catalog on the real S3 server: the server's own storage secret
never reaches a client or the log, and storage that fails is a 503 with ``Retry-After``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
from iceberg_helpers import s3_properties
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion
from restserver import RestServer, assert_error, request
from s3server import Fault, FaultProxy

from olympia.catalog.catalog import Catalog as OlympiaStore

pytestmark = pytest.mark.s3

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
CLIENT_KEYS = ("s3.endpoint", "s3.access-key-id", "s3.region", "py-io-impl")


@pytest.fixture
def proxied(s3_server: Any) -> Iterator[tuple[RestServer, FaultProxy]]:
    """A server whose storage (catalog files and table metadata) goes through a proxy that
    can fail requests; it gives up on a failing request after two quick tries."""
    props = s3_properties(s3_server, uuid.uuid4().hex[:12])
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    with FaultProxy(s3_server.endpoint_url) as proxy:
        options = {**proxy.storage_options(s3_server.storage_options), "retry_attempts": 2,
                   "retry_backoff": 0.01}
        clients = [f"--client-property={key}={props[key]}" for key in CLIENT_KEYS]
        with RestServer(props["uri"], props["warehouse"], options,
                        (*clients, "--client-property",
                         f"s3.secret-access-key={props['s3.secret-access-key']}")) as server:
            yield server, proxy


def test_the_servers_storage_secret_stays_on_the_server(s3_server: Any) -> None:
    """Clients get only what the operator gave them: here no secret at all, so a table's
    config and the server's answers and log never hold the server's own secret."""
    props = s3_properties(s3_server, uuid.uuid4().hex[:12])
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    secret = s3_server.storage_options["secret"]
    clients = [f"--client-property={key}={props[key]}" for key in CLIENT_KEYS]
    with RestServer(props["uri"], props["warehouse"], s3_server.storage_options,
                    tuple(clients)) as server:
        client = server.client()
        client.create_namespace("ns")
        table = client.create_table(("ns", "t"), ROWS.schema)
        assert table.config == {key: props[key] for key in CLIENT_KEYS}
        answers = [request(server, "GET", path) for path in (
            "/v1/config", "/v1/namespaces", "/v1/namespaces/ns", "/v1/namespaces/ns/tables",
            "/v1/namespaces/ns/tables/t", "/v1/namespaces/ns/tables/missing")]
        assert [status for status, _, _ in answers] == [200, 200, 200, 200, 200, 404]
        assert not any(secret in str(body) for _, _, body in answers)
    assert server.log and secret not in "".join(server.log)


def test_failing_storage_is_a_503_with_retry_after(
        proxied: tuple[RestServer, FaultProxy]) -> None:
    server, proxy = proxied
    client = server.client()
    client.create_namespace("ns")
    client.create_table(("ns", "t"), ROWS.schema).append(ROWS)
    proxy.fault = Fault(frozenset({"GET", "HEAD", "PUT", "POST"}), 503, "SlowDown")
    for method, path in (("GET", "/v1/namespaces"), ("GET", "/v1/namespaces/ns/tables/t"),
                         ("POST", "/v1/namespaces")):
        status, headers, body = request(server, method, path, '{"namespace": ["other"]}'
                                        if method == "POST" else None)
        assert_error((status, headers, body), 503, "ServiceUnavailableException",
                     "failed after 2 tries")
        assert headers["retry-after"] == "1"
    proxy.fault = None
    assert client.load_table(("ns", "t")).scan().to_arrow().num_rows == 3
    assert client.list_namespaces() == [("ns",)]
    assert "Traceback" not in "".join(server.log)


def test_a_view_on_s3_and_its_metadata_when_storage_fails(
        proxied: tuple[RestServer, FaultProxy]) -> None:
    """A view's metadata file lives on S3 with the catalog; failing storage while loading
    it is a 503, and the view is served again once storage answers."""
    server, proxy = proxied
    client = server.client()
    client.create_namespace("ns")
    version = ViewVersion(  # type: ignore[call-arg]
        version_id=1, schema_id=0, default_namespace=["ns"],
        representations=[ViewRepresentation(SQLViewRepresentation(
            type="sql", sql="SELECT 1 AS id", dialect="spark"))])
    created = client.create_view(("ns", "v"), ROWS.schema, version)
    assert created.metadata.location.startswith(server.warehouse)
    proxy.fault = Fault(frozenset({"GET", "HEAD"}), 503, "SlowDown")
    assert_error(request(server, "GET", "/v1/namespaces/ns/views/v"), 503,
                 "ServiceUnavailableException", "failed after 2 tries")
    proxy.fault = None
    assert client.load_view(("ns", "v")).metadata == created.metadata
    client.drop_view(("ns", "v"))
    assert client.list_views("ns") == []
    assert "Traceback" not in "".join(server.log)


def test_an_s3_warehouse_with_or_without_a_trailing_slash(s3_server: Any) -> None:
    """A client names the server's S3 warehouse with or without a trailing ``/`` (and as
    ``s3a://``, which the server's confinement also counts as ``s3://``), at the latest
    catalog or at a version; any other place is a 400 naming the served warehouse."""
    props = s3_properties(s3_server, uuid.uuid4().hex[:12])
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    warehouse = props["warehouse"]
    with RestServer(props["uri"], warehouse + "/", s3_server.storage_options) as server:
        for spelling in (warehouse, warehouse + "/", "s3a" + warehouse.removeprefix("s3")):
            for asked, prefix in ((spelling, {}), (f"{spelling}@0", {"prefix": "version-0"})):
                status, _, body = request(
                    server, "GET", f"/v1/config?warehouse={quote(asked, safe='')}")
                assert status == 200 and body["overrides"] == prefix, asked
        bucket, _, path = warehouse.removeprefix("s3://").partition("/")
        for other in (warehouse + "x", warehouse.rpartition("/")[0], f"s3://other-{bucket}/{path}",
                      f"{warehouse}/../warehouse", f"gs://{bucket}/{path}", f"/{bucket}/{path}"):
            assert_error(request(server, "GET", f"/v1/config?warehouse={quote(other, safe='')}"),
                         400, "BadRequestException",
                         f"this server serves one warehouse, {warehouse} (spelt with or "
                         "without a trailing /)")
