"""Distributed transactions through `olympia serve` with pyiceberg's RestCatalog and DuckDB:
the transaction warehouse ``<warehouse>@txn:<id>`` and the reference implementation's
system namespace ``sys.dtxns.<id>``; one version at commit, nothing at abort."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyiceberg.exceptions import NoSuchTableError, RESTError
from restserver import RestServer, assert_error, duckdb_connection, request, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.versions.history import history

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
SYS = ("sys", "dtxns")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    with RestServer.on_new_catalog(tmp_path_factory.mktemp("rest")) as server:
        client = server.client()
        client.create_namespace("ns")
        for name in ("orders", "payments"):
            client.create_table(("ns", name), ROWS.schema).append(ROWS)
        yield server


def rows(catalog: object, namespace: tuple[str, ...], name: str) -> int:
    return catalog.load_table((*namespace, name)).scan().to_arrow().num_rows  # type: ignore[attr-defined, no-any-return]


def test_a_transaction_warehouse_writes_many_tables_as_one_version(server: RestServer) -> None:
    store = OlympiaStore.open(server.catalog_uri)
    store.begin_transaction("wh-1", info={"job": "nightly"})
    began = version(server)
    inside = server.client(warehouse=f"{server.warehouse}@txn:wh-1")
    assert inside.properties["prefix"] == "txn-wh-1"
    inside.load_table(("ns", "orders")).append(ROWS)
    inside.create_table(("ns", "refunds"), ROWS.schema).append(ROWS)
    second = server.client(warehouse=f"{server.warehouse}@txn:wh-1")  # another job
    assert rows(second, ("ns",), "orders") == 6  # sees the first job's writes
    second.load_table(("ns", "payments")).append(ROWS)
    outside = server.client()
    assert (rows(outside, ("ns",), "orders"), rows(outside, ("ns",), "payments")) == (3, 3)
    assert not outside.table_exists(("ns", "refunds"))
    assert version(server) == began

    outside.update_namespace_properties((*SYS, "wh-1"), updates={"commit": "true"})
    assert version(server) == began + 1  # ONE version
    assert (rows(outside, ("ns",), "orders"), rows(outside, ("ns",), "payments")) == (6, 6)
    assert rows(outside, ("ns",), "refunds") == 3
    (entry,) = history(OlympiaStore.open(server.catalog_uri), limit=1)
    assert entry.info["job"] == "nightly" and entry.info["transaction"] == "wh-1"
    with pytest.raises(NoSuchTableError, match="no distributed transaction 'wh-1'"):
        inside.load_table(("ns", "orders")).append(ROWS)  # it is gone: no more writes
    assert version(server) == began + 1


def test_the_system_namespace_begins_lists_writes_and_aborts(server: RestServer) -> None:
    client = server.client()
    began = version(server)
    client.create_namespace((*SYS, "sys-1"), {"ttl-millis": "600000", "dag_run": "r1"})
    assert (*SYS, "sys-1") in client.list_namespaces(SYS)
    props = client.load_namespace_properties((*SYS, "sys-1"))
    assert props["state"] == "open" and props["dag_run"] == "r1"
    assert int(props["expire-at-millis"]) - int(props["began-at-millis"]) == 600000
    assert client.list_namespaces((*SYS, "sys-1")) == [(*SYS, "sys-1", "ns")]
    client.load_table((*SYS, "sys-1", "ns", "orders")).append(ROWS)
    client.create_table((*SYS, "sys-1", "ns", "fresh"), ROWS.schema)
    listed = client.list_tables((*SYS, "sys-1", "ns"))
    assert (*SYS, "sys-1", "ns", "fresh") in listed
    assert all(found[:4] == (*SYS, "sys-1", "ns") for found in listed)
    client.rename_table((*SYS, "sys-1", "ns", "fresh"), (*SYS, "sys-1", "ns", "renamed"))
    assert client.table_exists((*SYS, "sys-1", "ns", "renamed"))
    assert not client.table_exists(("ns", "renamed"))
    before = rows(client, ("ns",), "orders")

    client.drop_namespace((*SYS, "sys-1"))  # abort
    assert version(server) == began
    assert rows(client, ("ns",), "orders") == before
    assert (*SYS, "sys-1") not in client.list_namespaces(SYS)
    with pytest.raises(NoSuchTableError, match="no distributed transaction 'sys-1'"):
        client.load_table((*SYS, "sys-1", "ns", "orders"))


def test_a_conflicting_write_outside_fails_the_commit(server: RestServer) -> None:
    client = server.client()
    client.create_namespace((*SYS, "late"))
    client.load_table((*SYS, "late", "ns", "payments")).append(ROWS)
    client.load_table(("ns", "payments")).append(ROWS)  # outside, after it began
    latest = version(server)
    with pytest.raises(RESTError, match="CommitFailedException: .*ns.payments"):
        client.update_namespace_properties((*SYS, "late"), updates={"commit": "true"})
    assert version(server) == latest
    assert (*SYS, "late") not in client.list_namespaces(SYS)


def test_duckdb_and_pyiceberg_write_in_one_transaction(server: RestServer) -> None:
    client = server.client()
    client.create_namespace((*SYS, "duck"))
    client.load_table((*SYS, "duck", "ns", "orders")).append(ROWS)
    began = version(server)
    con = duckdb_connection()
    con.execute(f"ATTACH '{server.warehouse}@txn:duck' AS lake (TYPE iceberg, "
                f"ENDPOINT '{server.url}', AUTHORIZATION_TYPE 'none')")
    con.execute("INSERT INTO lake.ns.payments VALUES (40), (41)")
    inside = rows(client, (*SYS, "duck", "ns"), "orders")
    assert con.execute("SELECT count(*) FROM lake.ns.orders").fetchone() == (inside,)
    outside = rows(client, ("ns",), "payments")
    client.update_namespace_properties((*SYS, "duck"), updates={"commit": "true"})
    assert version(server) == began + 1
    assert rows(client, ("ns",), "payments") == outside + 2


def test_hostile_or_unknown_transactions_are_refused(server: RestServer) -> None:
    before = version(server)
    for warehouse, status in ((f"{server.warehouse}@txn:nope", 404),
                              (f"{server.warehouse}@txn:../x", 400),
                              (f"{server.warehouse}@txn:a%2Fb", 400)):
        assert request(server, "GET", f"/v1/config?warehouse={warehouse}")[0] == status
    assert_error(request(server, "GET", "/v1/txn-nope/namespaces"), 404,
                 "NoSuchNamespaceException", "no distributed transaction 'nope'")
    assert request(server, "GET", "/v1/txn-..%2Fx/namespaces")[0] == 400
    client = server.client()
    assert request(server, "POST", "/v1/namespaces", '{"namespace": ["sys", "dtxns"]}')[0] == 400
    assert_error(request(server, "POST", "/v1/namespaces",
                         '{"namespace": ["sys", "dtxns", "a", "b"]}'), 404,
                 "NoSuchNamespaceException", "no distributed transaction 'a'")
    client.create_namespace("sys")  # one level: a stored namespace like any other
    assert client.list_namespaces("sys") == [SYS]
    client.drop_namespace("sys")
    before = version(server)
    client.create_namespace((*SYS, "props"))
    assert_error(request(server, "POST", "/v1/namespaces/sys%1Fdtxns%1Fprops/properties",
                         '{"updates": {"owner": "x"}}'), 400, "BadRequestException",
                 "commit=true")
    assert request(server, "DELETE", "/v1/namespaces/sys%1Fdtxns")[0] == 403
    assert request(server, "GET", "/v1/version-1/namespaces/sys%1Fdtxns%1Fprops")[0] == 404
    client.drop_namespace((*SYS, "props"))
    assert version(server) == before
