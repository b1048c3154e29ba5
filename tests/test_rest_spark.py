"""Spark SQL with Apache Iceberg's own Spark runtime (``iceberg-spark-runtime-4.1_2.13``,
fetched by ``make install``) as a client of ``olympia serve``, on local disk and on the real
S3 server (Iceberg's ``S3FileIO`` from ``iceberg-aws-bundle``): each statement is one Olympia
catalog version, a version prefix reads every table as it was in an earlier version, and
Structured Streaming writes and reads tables."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner
from iceberg_helpers import ICEBERG_SPARK_JARS, s3_properties
from restserver import RestServer, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.cli import main

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).parent.parent / "examples" / "spark-sql" / "spark-defaults.conf"
#: What clients get from the server for their own file access on S3. The test S3 server
#: has no identities configured, so it cannot check the per-chunk signatures of the AWS SDK's
#: streaming uploads (STREAMING-AWS4-HMAC-SHA256-PAYLOAD over plain HTTP) and refuses them
#: ("Signed request requires setting up SeaweedFS S3 authentication"): S3FileIO signs whole
#: payloads instead.
S3_CLIENT_KEYS = ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key")
S3_CLIENT_FIXED = {"s3.path-style-access": "true", "client.region": "us-east-1",
                   "s3.chunked-encoding-enabled": "false"}


@pytest.fixture(autouse=True)
def _iceberg_runtime() -> None:
    if len(ICEBERG_SPARK_JARS) != 2:
        pytest.fail(f"Iceberg's Spark runtime and AWS bundle are not both in {sys.prefix}/jars "
                    "(make install fetches them)")


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    """``olympia serve`` over a new catalog on local disk or on the S3 server."""
    if request.param == "local":
        started = RestServer.on_new_catalog(tmp_path_factory.mktemp("rest"))
    else:
        started = _on_s3(request.getfixturevalue("s3_server"))
    with started:
        yield started


def _on_s3(s3_server: Any, *extra: str) -> RestServer:
    props = s3_properties(s3_server, uuid.uuid4().hex[:12])
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    given = {**{key: props[key] for key in S3_CLIENT_KEYS}, **S3_CLIENT_FIXED}
    clients = [f"--client-property={key}={value}" for key, value in given.items()]
    return RestServer(props["uri"], props["warehouse"], s3_server.storage_options,
                      (*clients, *extra))


def catalog(spark: Any, server: RestServer, warehouse: str | None = None) -> str:
    """A new Spark catalog of Iceberg's runtime over ``server``; returns its name.

    Names are never reused: Spark keeps a catalog object per name for the session's life.
    The catalog's table cache is off, as for any Spark that shares tables with other writers.
    """
    name = f"olympia_{uuid.uuid4().hex[:8]}"
    settings = {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "rest",
                ".uri": server.url, ".warehouse": warehouse or server.warehouse,
                ".cache-enabled": "false"}
    for key, value in settings.items():
        spark.conf.set(f"spark.sql.catalog.{name}{key}", value)
    return name


def rows(spark: Any, query: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in spark.sql(query).collect()]


def test_each_statement_is_one_olympia_version(spark: Any, server: RestServer) -> None:
    cat = catalog(spark, server)
    t = f"{cat}.shop.events"
    statements = [
        f"CREATE NAMESPACE {cat}.shop",
        f"CREATE TABLE {t} (id BIGINT, day DATE, kind STRING) USING iceberg PARTITIONED BY (day)",
        f"INSERT INTO {t} VALUES (1, DATE'2026-01-01', 'view'), (2, DATE'2026-01-01', 'buy'), "
        "(3, DATE'2026-01-02', 'view')",
        f"MERGE INTO {t} AS t USING (SELECT * FROM VALUES (2L, DATE'2026-01-01', 'refund'), "
        "(4L, DATE'2026-01-02', 'buy') AS s(id, day, kind)) AS s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        f"UPDATE {t} SET kind = 'click' WHERE id = 1",
        f"DELETE FROM {t} WHERE id = 3",
        f"INSERT OVERWRITE {t} PARTITION (day = '2026-01-02') VALUES (5, 'view'), (6, 'buy')",
    ]
    landed = []
    for statement in statements:
        before = version(server)
        spark.sql(statement)
        assert version(server) == before + 1, statement
        landed.append(before + 1)
    assert rows(spark, f"SELECT id, CAST(day AS STRING), kind FROM {t} ORDER BY id") == [
        (1, "2026-01-01", "click"), (2, "2026-01-01", "refund"),
        (5, "2026-01-02", "view"), (6, "2026-01-02", "buy")]
    # the same rows through pyiceberg's RestCatalog
    read = server.client().load_table("shop.events").scan().to_arrow().sort_by("id")
    assert read.column("id").to_pylist() == [1, 2, 5, 6]
    # and `olympia log` shows one version per statement, each naming what it changed
    log = CliRunner().invoke(main, ["log", "-c", server.catalog_uri, "--json", "-n", "7"],
                             env={"OLYMPIA_STORAGE_OPTIONS": json.dumps(server.storage_options)})
    assert log.exit_code == 0, log.output
    entries = json.loads(log.output)
    assert sorted(entry["version"] for entry in entries) == landed
    assert all("shop" in json.dumps(entry["actions"]) for entry in entries)


def test_metadata_tables_time_travel_and_procedures(spark: Any, server: RestServer) -> None:
    cat = catalog(spark, server)
    ns = f"ns_{uuid.uuid4().hex[:6]}"
    t = f"{cat}.{ns}.t"
    spark.sql(f"CREATE NAMESPACE {cat}.{ns}")
    spark.sql(f"CREATE TABLE {t} (id BIGINT, kind STRING) USING iceberg")
    for batch in ((1, 2), (3,), (4,)):
        spark.sql(f"INSERT INTO {t} VALUES " + ", ".join(f"({i}, 'k{i}')" for i in batch))
    snapshots = rows(spark, f"SELECT snapshot_id, operation FROM {t}.snapshots "
                            "ORDER BY committed_at")
    assert [operation for _, operation in snapshots] == ["append"] * 3
    first, second, _ = (snapshot for snapshot, _ in snapshots)
    assert rows(spark, f"SELECT id FROM {t} VERSION AS OF {first} ORDER BY id") == [(1,), (2,)]
    # every file the three appends added, with all four rows (Spark may split an INSERT's
    # rows over several files, one per task)
    added = rows(spark, f"SELECT sum(CAST(summary['added-data-files'] AS INT)) "
                        f"FROM {t}.snapshots")
    assert rows(spark, f"SELECT count(*), sum(record_count) FROM {t}.files") == [
        (added[0][0], 4)]

    before = version(server)
    spark.sql(f"CALL {cat}.system.rollback_to_snapshot('{ns}.t', {second})")
    assert version(server) == before + 1
    assert rows(spark, f"SELECT id FROM {t} ORDER BY id") == [(1,), (2,), (3,)]

    # the first and the rolled-back append are what catalog versions in the retention window
    # read: expiring them is refused (tests/test_rest_spark_retention.py expires snapshots
    # that no kept version reads)
    before = version(server)
    with pytest.raises(Exception, match=f"snapshot {first}: catalog versions .* read it"):
        spark.sql(f"CALL {cat}.system.expire_snapshots(table => '{ns}.t', "
                  "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)").collect()
    assert version(server) == before
    assert len(rows(spark, f"SELECT snapshot_id FROM {t}.snapshots")) == 3
    assert rows(spark, f"SELECT id FROM {t} ORDER BY id") == [(1,), (2,), (3,)]


def test_branches_tags_views_and_table_ddl(spark: Any, server: RestServer) -> None:
    """Branches and tags, Spark views (Olympia views), schema and sort order changes, CTAS,
    RTAS, rename and DROP ... PURGE: each statement one Olympia version."""
    cat = catalog(spark, server)
    ns = f"ns_{uuid.uuid4().hex[:6]}"
    t = f"{cat}.{ns}.t"
    spark.sql(f"CREATE NAMESPACE {cat}.{ns}")
    spark.sql(f"CREATE TABLE {t} (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1)")

    def one_version(statement: str) -> list[tuple[Any, ...]]:
        before = version(server)
        answer = rows(spark, statement)
        assert version(server) == before + 1, statement
        return answer

    one_version(f"ALTER TABLE {t} CREATE BRANCH audit")
    one_version(f"INSERT INTO {t}.branch_audit VALUES (2)")
    one_version(f"ALTER TABLE {t} CREATE TAG before_audit")
    assert rows(spark, f"SELECT id FROM {t}.branch_audit ORDER BY id") == [(1,), (2,)]
    assert rows(spark, f"SELECT id FROM {t} ORDER BY id") == [(1,)]
    one_version(f"CALL {cat}.system.fast_forward('{ns}.t', 'main', 'audit')")
    assert rows(spark, f"SELECT id FROM {t} ORDER BY id") == [(1,), (2,)]
    assert rows(spark, f"SELECT id FROM {t} VERSION AS OF 'before_audit'") == [(1,)]
    assert sorted(r[0] for r in rows(spark, f"SELECT name FROM {t}.refs")) == [
        "audit", "before_audit", "main"]

    one_version(f"ALTER TABLE {t} ADD COLUMN kind STRING")
    one_version(f"ALTER TABLE {t} WRITE ORDERED BY id")
    one_version(f"CREATE VIEW {cat}.{ns}.v AS SELECT id FROM {t} WHERE id > 1")
    assert rows(spark, f"SELECT * FROM {cat}.{ns}.v") == [(2,)]
    assert [r[1] for r in rows(spark, f"SHOW VIEWS IN {cat}.{ns}")] == ["v"]
    store = OlympiaStore.open(server.catalog_uri, server.storage_options)
    try:  # an Olympia view, seen by the library
        assert "WHERE id > 1" in store.load_view((ns, "v")).sql
    finally:
        store.close()
    one_version(f"DROP VIEW {cat}.{ns}.v")

    one_version(f"CREATE TABLE {cat}.{ns}.c USING iceberg AS SELECT id FROM {t}")
    one_version(f"CREATE OR REPLACE TABLE {cat}.{ns}.c USING iceberg AS "
                f"SELECT id FROM {t} WHERE id = 1")
    assert rows(spark, f"SELECT id FROM {cat}.{ns}.c") == [(1,)]
    one_version(f"ALTER TABLE {cat}.{ns}.c RENAME TO {ns}.d")  # Spark: relative to the catalog
    assert rows(spark, f"SELECT id FROM {cat}.{ns}.d") == [(1,)]
    one_version(f"DROP TABLE {cat}.{ns}.d PURGE")
    assert sorted(r[1] for r in rows(spark, f"SHOW TABLES IN {cat}.{ns}")) == ["t"]


def test_a_version_prefix_reads_every_table_as_it_was(spark: Any, server: RestServer) -> None:
    cat = catalog(spark, server)
    ns = f"ns_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE {cat}.{ns}")
    for name in ("orders", "customers"):
        spark.sql(f"CREATE TABLE {cat}.{ns}.{name} (id BIGINT) USING iceberg")
        spark.sql(f"INSERT INTO {cat}.{ns}.{name} VALUES (1), (2)")
    then = version(server)
    spark.sql(f"INSERT INTO {cat}.{ns}.orders VALUES (3)")
    spark.sql(f"DELETE FROM {cat}.{ns}.customers WHERE id = 1")
    spark.sql(f"CREATE TABLE {cat}.{ns}.later (id BIGINT) USING iceberg")

    past = catalog(spark, server, f"{server.warehouse}@{then}")
    assert rows(spark, f"SELECT id FROM {past}.{ns}.orders ORDER BY id") == [(1,), (2,)]
    assert rows(spark, f"SELECT id FROM {past}.{ns}.customers ORDER BY id") == [(1,), (2,)]
    assert sorted(r[1] for r in rows(spark, f"SHOW TABLES IN {past}.{ns}")) == [
        "customers", "orders"]
    with pytest.raises(Exception, match=f"version {then}"):
        spark.sql(f"INSERT INTO {past}.{ns}.orders VALUES (9)")
    assert rows(spark, f"SELECT count(*) FROM {cat}.{ns}.orders") == [(3,)]


@pytest.mark.s3
def test_the_example_configuration_works_as_written(spark: Any, s3_server: Any,
                                                   tmp_path: Path) -> None:
    """examples/spark-sql/spark-defaults.conf, its ``<...>`` values filled in: OAuth2 client
    credentials, the S3 file IO, the latest catalog and a version prefix."""
    tokens = tmp_path / "tokens"
    tokens.write_text("etl read-write etl-secret-5d1e\n")
    with _on_s3(s3_server, "--token-file", str(tokens)) as server:
        bucket = server.warehouse.removeprefix("s3://").split("/", 1)[0]
        prefix = server.warehouse.removeprefix(f"s3://{bucket}/").removesuffix("/warehouse")
        name = f"olympia_{uuid.uuid4().hex[:8]}"
        past = f"{name}_v41"
        conf = dict(line.split(None, 1) for line in EXAMPLE.read_text().splitlines()
                    if line.startswith("spark."))
        # the session runs the artifacts the example names, with the same SQL extensions
        assert sorted("{1}-{2}.jar".format(*artifact.split(":")) for artifact in
                      conf["spark.jars.packages"].split(",")) == [
            jar.name for jar in ICEBERG_SPARK_JARS]
        assert conf["spark.sql.extensions"] == spark.conf.get("spark.sql.extensions")
        settings: dict[str, str] = {}
        for key, value in conf.items():
            if not key.startswith("spark.sql.catalog."):
                continue
            key = re.sub(r"^spark\.sql\.catalog\.olympia_v41", f"spark.sql.catalog.{past}", key)
            key = re.sub(r"^spark\.sql\.catalog\.olympia\b", f"spark.sql.catalog.{name}", key)
            value = (value.replace("http://127.0.0.1:8181", server.url)
                     .replace("<bucket>/warehouse", f"{bucket}/{prefix}/warehouse")
                     .replace("<client-id>:<secret>", "etl:etl-secret-5d1e"))
            assert "<" not in value, key
            settings[key] = value
        later = settings.pop(f"spark.sql.catalog.{past}.warehouse")
        statements = [line.strip().removesuffix(";") for line in
                      (EXAMPLE.parent / "README.md").read_text().split("```sql")[1]
                      .split("```")[0].splitlines() if line.strip()]
        for key, value in settings.items():
            spark.conf.set(key, value)
        spark.sql(f"USE {name}")
        try:
            for statement in statements[:3]:
                spark.sql(statement)
            pinned = version(server)
            spark.sql("INSERT INTO shop.events VALUES (3, 'view')")
            spark.conf.set(f"spark.sql.catalog.{past}.warehouse",
                           later.replace("@41", f"@{pinned}"))
            assert rows(spark, "SELECT count(*) FROM shop.events.snapshots") == [(2,)]
            assert rows(spark, f"SELECT id FROM {past}.shop.events ORDER BY id") == [(1,), (2,)]
            assert rows(spark, "SELECT id FROM shop.events ORDER BY id") == [(1,), (2,), (3,)]
        finally:
            spark.sql("USE spark_catalog")


def test_maintenance_procedures(spark: Any, server: RestServer) -> None:
    """Iceberg's table maintenance through the server: compaction and manifest rewrites are
    one Olympia version each and keep every row; removing orphan files deletes a file no
    snapshot references and commits nothing."""
    cat = catalog(spark, server)
    ns = f"ns_{uuid.uuid4().hex[:6]}"
    t = f"{cat}.{ns}.t"
    spark.sql(f"CREATE NAMESPACE {cat}.{ns}")
    spark.sql(f"CREATE TABLE {t} (id BIGINT, kind STRING) USING iceberg")
    for i in range(4):
        spark.sql(f"INSERT INTO {t} VALUES ({i}, 'k{i}')")
    files_before = rows(spark, f"SELECT count(*) FROM {t}.files")[0][0]
    assert files_before >= 4

    before = version(server)
    rewritten = spark.sql(f"CALL {cat}.system.rewrite_data_files(table => '{ns}.t', "
                          "options => map('min-input-files', '2'))").collect()[0]
    assert version(server) == before + 1
    assert rewritten["rewritten_data_files_count"] == files_before
    assert rewritten["added_data_files_count"] == 1
    assert rows(spark, f"SELECT count(*) FROM {t}.files") == [(1,)]
    assert rows(spark, f"SELECT id FROM {t} ORDER BY id") == [(0,), (1,), (2,), (3,)]

    before = version(server)
    manifests = spark.sql(f"CALL {cat}.system.rewrite_manifests('{ns}.t')").collect()[0]
    assert version(server) == before + 1
    assert manifests["added_manifests_count"] == 1
    assert rows(spark, f"SELECT count(*) FROM {t}.manifests") == [(1,)]

    # Iceberg removes only orphans older than a day; a local file can be made that old, an
    # S3 object cannot (its modification time is the server's)
    if not server.warehouse.startswith("file:"):
        return
    table = server.client().load_table(f"{ns}.t")
    orphan = f"{table.location()}/data/orphan-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(orphan).create() as out:
        out.write(b"not referenced by any snapshot")
    two_days_ago = time.time() - 2 * 86400
    os.utime(urlsplit(orphan).path, (two_days_ago, two_days_ago))
    before = version(server)
    cutoff = time.strftime("%Y-%m-%d %H:%M:%S+00:00", time.gmtime(time.time() - 1.5 * 86400))
    removed = rows(spark, f"CALL {cat}.system.remove_orphan_files(table => '{ns}.t', "
                          f"older_than => TIMESTAMP '{cutoff}')")
    # Spark names it as Hadoop does (file:/...)
    assert [urlsplit(path).path for (path,) in removed] == [urlsplit(orphan).path]
    assert not table.io.new_input(orphan).exists()
    assert version(server) == before
    assert rows(spark, f"SELECT id FROM {t} ORDER BY id") == [(0,), (1,), (2,), (3,)]


def test_structured_streaming_writes_and_reads(spark: Any, server: RestServer,
                                               tmp_path: Path) -> None:
    """Structured Streaming through the server: a streaming write commits each micro-batch
    as one Olympia version and, restarted from its checkpoint, writes only new input; a
    streaming read of the table copies each row once, also when restarted after more
    commits."""
    cat = catalog(spark, server)
    ns = f"ns_{uuid.uuid4().hex[:6]}"
    t, copy = f"{cat}.{ns}.events", f"{cat}.{ns}.copy"
    spark.sql(f"CREATE NAMESPACE {cat}.{ns}")
    for name in (t, copy):
        spark.sql(f"CREATE TABLE {name} (id BIGINT, kind STRING) USING iceberg")
    incoming = tmp_path / "incoming"
    incoming.mkdir()

    def run(source: Any, target: str, checkpoint: str) -> int:
        """Run a streaming query over what is there now; the versions it committed."""
        before = version(server)
        query = (source.writeStream.format("iceberg").outputMode("append")
                 .trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / checkpoint)).toTable(target))
        query.awaitTermination()
        return version(server) - before

    def files() -> Any:
        return spark.readStream.schema("id BIGINT, kind STRING").json(str(incoming))

    (incoming / "1.json").write_text('{"id": 1, "kind": "view"}\n{"id": 2, "kind": "buy"}\n')
    assert run(files(), t, "write") == 1
    (incoming / "2.json").write_text('{"id": 3, "kind": "view"}\n')
    assert run(files(), t, "write") == 1
    assert rows(spark, f"SELECT id, kind FROM {t} ORDER BY id") == [
        (1, "view"), (2, "buy"), (3, "view")]

    assert run(spark.readStream.format("iceberg").load(t), copy, "read") >= 1
    spark.sql(f"INSERT INTO {t} VALUES (4, 'buy')")
    assert run(spark.readStream.format("iceberg").load(t), copy, "read") >= 1
    assert rows(spark, f"SELECT id, kind FROM {copy} ORDER BY id") == [
        (1, "view"), (2, "buy"), (3, "view"), (4, "buy")]


def test_another_spelling_of_the_warehouse_and_format_version_3(
        spark: Any, server: RestServer) -> None:
    """A Spark catalog may spell the server's warehouse another way (a plain path for
    ``file:///...``, a trailing ``/``). Iceberg table format version 3 is refused, on create
    (406) and as an upgrade (400), and nothing is committed."""
    spelt = server.warehouse.removeprefix("file://") + "/"
    cat = catalog(spark, server, spelt)
    ns = f"ns_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE {cat}.{ns}")
    spark.sql(f"CREATE TABLE {cat}.{ns}.t (id BIGINT) USING iceberg")
    before = version(server)
    with pytest.raises(Exception, match="code: 406, type: UnsupportedOperationException.*V3"):
        spark.sql(f"CREATE TABLE {cat}.{ns}.v3 (id BIGINT) USING iceberg "
                  "TBLPROPERTIES ('format-version' = '3')")
    with pytest.raises(Exception, match="BadRequestException.*format version: 3"):
        spark.sql(f"ALTER TABLE {cat}.{ns}.t SET TBLPROPERTIES ('format-version' = '3')")
    assert version(server) == before
    assert server.client().load_table(f"{ns}.t").format_version == 2
