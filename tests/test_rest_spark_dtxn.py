"""Spark SQL with Iceberg's own runtime writes two tables inside ONE distributed transaction
through `olympia serve`, from two Spark applications (this run's session and a second one
in its own process): by the reference implementation's ``sys.dtxns.<id>`` names, Spark SQL
alone (begin, INSERT, MERGE, commit), and by the transaction warehouse
``<warehouse>@txn:<id>`` with the statements unchanged; DuckDB and pyiceberg join the same
transaction as Spark. Readers outside see no change until the commit, then all of them in
one version; an abort leaves nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from iceberg_helpers import ICEBERG_SPARK_JARS
from restserver import RestServer, duckdb_connection, version
from test_rest_spark import catalog

pytestmark = pytest.mark.spark

MERGE = ("MERGE INTO {t} AS t USING (SELECT * FROM VALUES (1L, 15L), (3L, 30L) AS s(id, "
         "amount)) AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
         "WHEN NOT MATCHED THEN INSERT *")

#: A second Spark application: its own process and JVM, the same Iceberg runtime.
SECOND_APP = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    jars, uri, warehouse, statements = json.loads(sys.argv[1])
    spark = (SparkSession.builder.master("local[1]").appName("second-job")
             .config("spark.ui.enabled", "false").config("spark.jars", jars)
             .config("spark.sql.extensions",
                     "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.sql.catalog.lake", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.lake.type", "rest")
             .config("spark.sql.catalog.lake.uri", uri)
             .config("spark.sql.catalog.lake.warehouse", warehouse)
             .config("spark.sql.catalog.lake.cache-enabled", "false").getOrCreate())
    for statement in statements:
        spark.sql(statement)
    spark.stop()
""")


def second_app(server: RestServer, warehouse: str, *statements: str) -> None:
    """Run ``statements`` (on catalog ``lake``) in a Spark application of its own."""
    jars = ",".join(map(str, ICEBERG_SPARK_JARS))
    done = subprocess.run([sys.executable, "-c", SECOND_APP,
                           json.dumps([jars, server.url, warehouse, list(statements)])],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    with RestServer.on_new_catalog(tmp_path_factory.mktemp("rest")) as server:
        yield server


def rows(spark: Any, query: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in spark.sql(query).collect())


def tables(spark: Any, cat: str, ns: str) -> None:
    spark.sql(f"CREATE NAMESPACE {cat}.{ns}")
    for name in ("orders", "payments"):
        spark.sql(f"CREATE TABLE {cat}.{ns}.{name} (id BIGINT, amount BIGINT) USING iceberg")
        spark.sql(f"INSERT INTO {cat}.{ns}.{name} VALUES (1, 10), (2, 20)")


BEFORE = [(1, 10), (2, 20)]
AFTER_INSERT = [(1, 10), (2, 20), (7, 70)]
AFTER_MERGE = [(1, 15), (2, 20), (3, 30)]


def test_spark_sql_alone_begins_writes_and_commits_through_sys_dtxns(
        spark: Any, server: RestServer) -> None:
    cat = catalog(spark, server)
    tables(spark, cat, "shop")
    txn = f"{cat}.sys.dtxns.nightly"
    spark.sql(f"CREATE NAMESPACE {txn} WITH DBPROPERTIES ('ttl-millis'='3600000', "
              "'dag_run'='r9')")
    began = version(server)
    assert ("sys.dtxns.nightly",) in rows(spark, f"SHOW NAMESPACES IN {cat}.sys.dtxns")
    described = str(rows(spark, f"DESCRIBE NAMESPACE EXTENDED {txn}"))
    assert "(state,open)" in described.replace(" ", "").replace("'", ""), described
    spark.sql(f"INSERT INTO {txn}.shop.orders VALUES (7, 70)")
    second_app(server, server.warehouse, MERGE.format(t="lake.sys.dtxns.nightly.shop.payments"))
    assert rows(spark, f"SELECT * FROM {txn}.shop.payments") == AFTER_MERGE  # inside
    assert rows(spark, f"SELECT * FROM {cat}.shop.orders") == BEFORE  # outside: nothing
    assert rows(spark, f"SELECT * FROM {cat}.shop.payments") == BEFORE
    assert version(server) == began

    spark.sql(f"ALTER NAMESPACE {txn} SET DBPROPERTIES ('commit'='true')")
    assert version(server) == began + 1  # both tables in ONE version
    assert rows(spark, f"SELECT * FROM {cat}.shop.orders") == AFTER_INSERT
    assert rows(spark, f"SELECT * FROM {cat}.shop.payments") == AFTER_MERGE


def test_a_transaction_warehouse_runs_unchanged_sql_and_abort_leaves_nothing(
        spark: Any, server: RestServer) -> None:
    cat = catalog(spark, server)
    tables(spark, cat, "wh")
    spark.sql(f"CREATE NAMESPACE {cat}.sys.dtxns.wap")
    began = version(server)
    inside = catalog(spark, server, f"{server.warehouse}@txn:wap")
    spark.sql(f"INSERT INTO {inside}.wh.orders VALUES (7, 70)")  # the job's usual SQL
    second_app(server, f"{server.warehouse}@txn:wap", MERGE.format(t="lake.wh.payments"))
    assert rows(spark, f"SELECT * FROM {inside}.wh.orders") == AFTER_INSERT
    assert rows(spark, f"SELECT * FROM {inside}.wh.payments") == AFTER_MERGE
    assert rows(spark, f"SELECT * FROM {cat}.wh.payments") == BEFORE

    spark.sql(f"DROP NAMESPACE {cat}.sys.dtxns.wap")  # abort
    assert version(server) == began
    assert rows(spark, f"SELECT * FROM {cat}.wh.orders") == BEFORE
    assert rows(spark, f"SELECT * FROM {cat}.wh.payments") == BEFORE


def test_spark_duckdb_and_pyiceberg_write_in_one_transaction(
        spark: Any, server: RestServer) -> None:
    cat = catalog(spark, server)
    tables(spark, cat, "mix")
    spark.sql(f"CREATE NAMESPACE {cat}.sys.dtxns.mix")
    began = version(server)
    inside = catalog(spark, server, f"{server.warehouse}@txn:mix")
    spark.sql(f"INSERT INTO {inside}.mix.orders VALUES (7, 70)")
    con = duckdb_connection()
    con.execute(f"ATTACH '{server.warehouse}@txn:mix' AS lake (TYPE iceberg, "
                f"ENDPOINT '{server.url}', AUTHORIZATION_TYPE 'none')")
    con.execute("INSERT INTO lake.mix.payments VALUES (3, 30)")
    job = server.client(warehouse=f"{server.warehouse}@txn:mix")
    job.load_table(("mix", "payments")).append(
        pa.table({"id": pa.array([4], pa.int64()), "amount": pa.array([40], pa.int64())}))
    assert rows(spark, f"SELECT * FROM {cat}.mix.payments") == BEFORE
    assert version(server) == began

    spark.sql(f"ALTER NAMESPACE {cat}.sys.dtxns.mix SET DBPROPERTIES ('commit'='true')")
    assert version(server) == began + 1
    assert rows(spark, f"SELECT * FROM {cat}.mix.orders") == AFTER_INSERT
    assert rows(spark, f"SELECT * FROM {cat}.mix.payments") == [*BEFORE, (3, 30), (4, 40)]
