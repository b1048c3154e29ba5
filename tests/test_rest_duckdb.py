"""DuckDB (its iceberg extension, from the pinned ``duckdb-ext-*`` packages, no download) as a
client of ``olympia serve``: it attaches the server as an Iceberg catalog, lists and reads a
table pyiceberg wrote, inserts into it (DuckDB commits through ``/v1/transactions/commit``),
and the rows read back through pyiceberg and through the Olympia Spark source."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from iceberg_helpers import s3_properties
from restserver import RestServer, duckdb_connection, version

import olympia.spark
from olympia.catalog.catalog import Catalog as OlympiaStore

ROWS = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    with RestServer.on_new_catalog(tmp_path_factory.mktemp("rest")) as started:
        yield started


@pytest.fixture
def written(server: RestServer) -> str:
    """A namespace holding table ``t`` with ROWS, written by pyiceberg through the server."""
    ns = f"duck_{uuid.uuid4().hex[:8]}"
    client = server.client()
    client.create_namespace(ns)
    client.create_table((ns, "t"), ROWS.schema).append(ROWS)
    return ns


def attached(server: RestServer) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the server attached as catalog ``ol``."""
    con = duckdb_connection()
    con.execute(f"ATTACH '{server.warehouse}' AS ol (TYPE iceberg, ENDPOINT '{server.url}', "
                "AUTHORIZATION_TYPE 'none')")
    return con


def test_duckdb_lists_reads_and_inserts(server: RestServer, written: str) -> None:
    ns = written
    con = attached(server)
    try:
        tables = con.execute("SELECT database, schema, name FROM (SHOW ALL TABLES)").fetchall()
        assert ("ol", ns, "t") in tables
        assert con.execute(f"SELECT id, name FROM ol.{ns}.t ORDER BY id").fetchall() == [
            (1, "a"), (2, "b")]
        before = version(server)
        con.execute(f"INSERT INTO ol.{ns}.t VALUES (3, 'c'), (4, 'd')")
        assert version(server) == before + 1  # one statement, one catalog version
        assert con.execute(f"SELECT count(*) FROM ol.{ns}.t").fetchall() == [(4,)]
    finally:
        con.close()
    read = server.client().load_table((ns, "t")).scan().to_arrow().sort_by("id")
    assert read.column("id").to_pylist() == [1, 2, 3, 4]
    assert read.column("name").to_pylist() == ["a", "b", "c", "d"]


@pytest.mark.spark
def test_rows_duckdb_inserted_read_back_through_the_spark_source(
        spark: Any, server: RestServer, written: str) -> None:
    con = attached(server)
    try:
        con.execute(f"INSERT INTO ol.{written}.t VALUES (3, 'c')")
    finally:
        con.close()
    olympia.spark.register(spark)
    df = spark.read.format("olympia").options(catalog=server.catalog_uri,
                                              warehouse=server.warehouse).load(f"{written}.t")
    assert sorted((r.id, r.name) for r in df.collect()) == [(1, "a"), (2, "b"), (3, "c")]


def test_duckdb_signs_in_with_client_credentials(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("etl read-write writer-secret\nanalyst read-only reader-secret\n")
    with RestServer.on_new_catalog(tmp_path, "--token-file", str(tokens)) as server:
        for client_id, secret in (("etl", "writer-secret"), ("analyst", "reader-secret")):
            con = duckdb_connection()
            con.execute(f"ATTACH '{server.warehouse}' AS ol (TYPE iceberg, ENDPOINT "
                        f"'{server.url}', CLIENT_ID '{client_id}', CLIENT_SECRET '{secret}', "
                        f"OAUTH2_SERVER_URI '{server.url}/v1/oauth/tokens')")
            try:
                if client_id == "etl":
                    con.execute("CREATE SCHEMA ol.made_by_duckdb")
                else:
                    with pytest.raises(duckdb.Error, match="read-only"):
                        con.execute("CREATE SCHEMA ol.refused")
                schemas = con.execute("SELECT schema_name FROM information_schema.schemata "
                                      "WHERE catalog_name = 'ol'").fetchall()
                assert ("made_by_duckdb",) in schemas and ("refused",) not in schemas
            finally:
                con.close()


@pytest.mark.s3
def test_duckdb_reads_and_inserts_on_s3(s3_server: Any) -> None:
    """The same on the S3 server: DuckDB reaches the table files with the S3 settings the
    server gives clients (``--client-property``, returned in each loaded table's config);
    DuckDB attaches a remote path read-only unless told otherwise."""
    props = s3_properties(s3_server, uuid.uuid4().hex[:12])
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    clients = [f"--client-property={key}={props[key]}" for key in (
        "s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.region", "py-io-impl")]
    clients.append("--client-property=s3.path-style-access=true")
    with RestServer(props["uri"], props["warehouse"], s3_server.storage_options,
                    tuple(clients)) as server:
        client = server.client()
        client.create_namespace("shop")
        client.create_table(("shop", "t"), ROWS.schema).append(ROWS)
        con = duckdb_connection()
        try:
            con.execute(f"ATTACH '{server.warehouse}' AS ol (TYPE iceberg, ENDPOINT "
                        f"'{server.url}', AUTHORIZATION_TYPE 'none', READ_ONLY false)")
            assert con.execute("SELECT id, name FROM ol.shop.t ORDER BY id").fetchall() == [
                (1, "a"), (2, "b")]
            before = version(server)
            con.execute("INSERT INTO ol.shop.t VALUES (3, 'c')")
            assert version(server) == before + 1
        finally:
            con.close()
        read = client.load_table(("shop", "t")).scan().to_arrow().sort_by("id")
        assert read.column("id").to_pylist() == [1, 2, 3]
