"""A kept catalog version stays readable when Iceberg's own Spark procedures maintain a table
through `olympia serve` (Iceberg's Spark runtime, local disk): ``expire_snapshots`` of a
snapshot a kept version reads fails with the server's 409, one no kept version reads works,
and ``remove_orphan_files`` deletes no file a kept version needs — every kept
``<warehouse>@<version>`` still scans its rows."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from iceberg_helpers import ICEBERG_SPARK_JARS
from restserver import RestServer, version
from test_rest_spark import catalog, rows

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.versions import export
from olympia.versions.policy import ExpirePolicy, save_defaults

pytestmark = pytest.mark.spark

FUTURE = "TIMESTAMP '2999-01-01 00:00:00'"  # every snapshot counts as old enough to go
DAY = 86400.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RestServer]:
    if len(ICEBERG_SPARK_JARS) != 2:
        pytest.fail(f"Iceberg's Spark runtime and AWS bundle are not both in {sys.prefix}/jars "
                    "(make install fetches them)")
    with RestServer.on_new_catalog(tmp_path) as started:
        yield started


def ids(server: RestServer, at: int | str) -> list[int]:
    """The ids pyiceberg's RestCatalog scans in table ns.t through ``<warehouse>@<at>``."""
    client = server.client(warehouse=f"{server.warehouse}@{at}")
    return sorted(client.load_table("ns.t").scan().to_arrow().column("id").to_pylist())


def orphans(spark: Any, cat: str, location: Path, dry_run: bool) -> set[str]:
    """What remove_orphan_files finds (and, unless ``dry_run``, deletes) in ns.t, as paths.

    The procedure refuses an ``older_than`` less than a day ago, so every file under the
    table's ``location`` is made ten days old first and ``older_than`` is two days ago: every
    file counts as old enough to go."""
    aged = time.time() - 10 * DAY
    for path in location.rglob("*"):
        os.utime(path, (aged, aged))
    cutoff = datetime.fromtimestamp(time.time() - 2 * DAY, UTC).strftime("%Y-%m-%d %H:%M:%S")
    found = rows(spark, f"CALL {cat}.system.remove_orphan_files(table => 'ns.t', "
                        f"older_than => TIMESTAMP '{cutoff}', dry_run => {str(dry_run).lower()})")
    return {path.removeprefix("file:") for (path,) in found}


def test_spark_maintenance_keeps_kept_versions_readable(spark: Any, server: RestServer,
                                                         tmp_path: Path) -> None:
    cat = catalog(spark, server)
    t = f"{cat}.ns.t"
    spark.sql(f"CREATE NAMESPACE {cat}.ns")
    # pyiceberg would keep one previous metadata file in the log: the server keeps them all
    spark.sql(f"CREATE TABLE {t} (id BIGINT) USING iceberg "
              "TBLPROPERTIES ('write.metadata.previous-versions-max' = '1')")
    versions: dict[int, list[int]] = {version(server): []}  # version -> the ids it reads
    for value in (1, 2, 3):
        spark.sql(f"INSERT INTO {t} VALUES ({value})")
        versions[version(server)] = list(range(1, value + 1))
    snapshots = [s for (s,) in rows(spark, f"SELECT snapshot_id FROM {t}.snapshots "
                                           "ORDER BY committed_at")]
    first, second, _ = snapshots

    def all_kept_read() -> None:
        assert {v: ids(server, v) for v in versions} == versions

    # every version is in the retention window: Spark's commit gets the 409, tries again
    # (commit.retry.num-retries) and fails
    before = version(server)
    with pytest.raises(Exception, match=f"snapshot {first}: catalog versions .* read it as main"):
        spark.sql(f"CALL {cat}.system.expire_snapshots(table => 'ns.t', older_than => {FUTURE}, "
                  "retain_last => 1)").collect()
    assert version(server) == before
    all_kept_read()

    # a stray file is an orphan; no file of a kept version is, old metadata files included
    location = Path(server.client().load_table("ns.t").metadata.location.removeprefix("file://"))
    stray = location / "data" / "stray.parquet"
    stray.write_bytes(b"not referenced by anything")
    assert orphans(spark, cat, location, dry_run=True) == {str(stray)}
    assert orphans(spark, cat, location, dry_run=False) == {str(stray)}
    assert not stray.exists()
    all_kept_read()

    # keep only the latest version, and the first insert's version through an export
    store = OlympiaStore.open(server.catalog_uri)
    try:
        first_insert = min(v for v, expected in versions.items() if expected == [1])
        export(store, "pinned", str(tmp_path / "export"), "minimal", version=first_insert)
        save_defaults(store, ExpirePolicy(keep_last=1, older_than_ms=0, force=True))
        files = {v: store.at_version(v).load_table(("ns", "t")).location
                 for v in versions}
    finally:
        store.close()
    with pytest.raises(Exception, match=f"snapshot {first}: export pinned .* read it as main"):
        spark.sql(f"CALL {cat}.system.expire_snapshots(table => 'ns.t', older_than => {FUTURE}, "
                  "retain_last => 1)").collect()

    # the second insert's snapshot is read by no kept version: it expires, with its files
    before = version(server)
    expired = spark.sql(f"CALL {cat}.system.expire_snapshots(table => 'ns.t', "
                        f"snapshot_ids => array({second}))").collect()[0]
    assert version(server) == before + 1
    assert expired["deleted_manifest_lists_count"] == 1
    assert [s for (s,) in rows(spark, f"SELECT snapshot_id FROM {t}.snapshots "
                                      "ORDER BY committed_at")] == [first, snapshots[2]]

    # orphans now: the metadata files of versions no longer kept (the creation's, the second
    # insert's), never those of the export's version or of the versions kept since
    kept = {first_insert, max(versions)}
    gone = orphans(spark, cat, location, dry_run=True)
    dropped = {files[v].removeprefix("file:").removeprefix("//") for v in versions
               if v not in kept}
    assert dropped <= gone
    assert not {files[v].removeprefix("file:").removeprefix("//") for v in kept} & gone
    assert orphans(spark, cat, location, dry_run=False) == gone
    assert ids(server, "export:pinned") == [1]
    assert ids(server, first_insert) == [1]
    assert ids(server, version(server)) == [1, 2, 3]
