"""``POST /v1/transactions/commit``: the changes of several tables land as ONE Olympia version,
or nothing lands.

pyiceberg 0.12's RestCatalog has no call for this endpoint, so each table's changes are
built by a pyiceberg transaction (data files and manifests written by the client as usual)
and sent as the specification's ``CommitTransactionRequest``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import CommitTableRequest, Table, TableIdentifier
from pyiceberg.table.update import AssertCurrentSchemaId
from restserver import RestServer, assert_error, request, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.versions.history import history

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    with RestServer.on_new_catalog(tmp_path_factory.mktemp("rest")) as started:
        yield started


@pytest.fixture
def tables(server: RestServer) -> tuple[RestCatalog, str]:
    client = server.client()
    ns = f"txn_{uuid.uuid4().hex[:10]}"
    client.create_namespace(ns)
    for name in ("orders", "items"):
        client.create_table((ns, name), ROWS.schema)
    return client, ns


def appended(table: Table, rows: pa.Table) -> CommitTableRequest:
    """The change an append to ``table`` makes, not committed."""
    txn = table.transaction()
    txn.append(rows)
    namespace, name = table.name()
    # the staged requirements and updates of a pyiceberg transaction (no public accessor)
    return CommitTableRequest(identifier=TableIdentifier(namespace=[namespace], name=name),
                              requirements=txn._requirements, updates=txn._updates)


def body(*changes: CommitTableRequest) -> str:
    return json.dumps({"table-changes": [json.loads(c.model_dump_json()) for c in changes]})


def test_two_tables_change_in_one_version(server: RestServer,
                                          tables: tuple[RestCatalog, str]) -> None:
    client, ns = tables
    orders, items = client.load_table((ns, "orders")), client.load_table((ns, "items"))
    before = version(server)
    status, _, _ = request(server, "POST", "/v1/transactions/commit",
                           body(appended(orders, ROWS), appended(items, ROWS)))
    assert status == 204
    assert version(server) == before + 1
    for name in ("orders", "items"):
        assert client.load_table((ns, name)).scan().to_arrow().num_rows == 3
    store = OlympiaStore.open(server.catalog_uri)
    try:
        (latest,) = history(store, limit=1)
        assert sorted(latest.info) == [f"iceberg.{ns}.items", f"iceberg.{ns}.orders"]
    finally:
        store.close()


def test_one_failed_requirement_lands_nothing(server: RestServer,
                                              tables: tuple[RestCatalog, str]) -> None:
    client, ns = tables
    orders, items = client.load_table((ns, "orders")), client.load_table((ns, "items"))
    stale = appended(items, ROWS)
    stale = stale.model_copy(update={"requirements": (
        *stale.requirements, AssertCurrentSchemaId(current_schema_id=7))})
    before = version(server)
    assert_error(request(server, "POST", "/v1/transactions/commit",
                         body(appended(orders, ROWS), stale)),
                 409, "CommitFailedException", "current schema id has changed")
    assert version(server) == before
    for name in ("orders", "items"):
        assert client.load_table((ns, name)).scan().to_arrow().num_rows == 0


def test_a_missing_table_lands_nothing(server: RestServer,
                                       tables: tuple[RestCatalog, str]) -> None:
    client, ns = tables
    orders = client.load_table((ns, "orders"))
    ghost = appended(orders, ROWS).model_copy(update={
        "identifier": TableIdentifier(namespace=[ns], name="ghost")})
    before = version(server)
    assert_error(request(server, "POST", "/v1/transactions/commit",
                         body(appended(orders, ROWS), ghost)),
                 404, "NoSuchTableException", f"{ns}.ghost")
    assert version(server) == before
    assert client.load_table((ns, "orders")).scan().to_arrow().num_rows == 0


@pytest.mark.parametrize(("payload", "words"), [
    ('{"table-changes": []}', "table-changes"),
    ('{"table-changes": [{"updates": []}]}', "identifier"),
    ('{"table-changes": [{"identifier": {"namespace": ["a", "b"], "name": "t"}}]}',
     "one level"),
])
def test_malformed_transactions_are_bad_requests(server: RestServer, payload: str,
                                                 words: str) -> None:
    assert_error(request(server, "POST", "/v1/transactions/commit", payload), 400,
                 "BadRequestException", words)


def test_commit_tables_in_process(tmp_path: Path) -> None:
    """The library call the endpoint uses: OlympiaCatalog.commit_tables."""
    catalog = OlympiaCatalog("in-process", uri=f"{tmp_path}/catalog",
                             warehouse=f"file://{tmp_path}/warehouse",
                             **{"olympia.create": "true"})
    with catalog:
        catalog.create_namespace("ns")
        a = catalog.create_table(("ns", "a"), ROWS.schema)
        b = catalog.create_table(("ns", "b"), ROWS.schema)
        before = catalog.olympia.version
        responses = catalog.commit_tables([appended(a, ROWS), appended(b, ROWS)])
        assert catalog.olympia.version == before + 1
        assert [r.metadata_location for r in responses] == [
            catalog.load_table(("ns", name)).metadata_location for name in ("a", "b")]
