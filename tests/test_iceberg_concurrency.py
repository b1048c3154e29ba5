"""Many processes appending through OlympiaCatalog (to their own tables, and all to one table),
Olympia's expiry next to Iceberg files, and the object-changed sensor's condition."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows
from pyiceberg.exceptions import CommitFailedException

from olympia import versions
from olympia.cli import main
from olympia.expire.local import expire_local
from olympia.iceberg import OlympiaCatalog
from olympia.versions.policy import ExpirePolicy

WORKERS = 4
APPENDS = 25
# fast retries: contention is the point here, waiting is not
RETRY = {"commit.retry.num-retries": "50", "commit.retry.min-wait-ms": "1",
         "commit.retry.max-wait-ms": "20", "commit.retry.total-timeout-ms": "120000"}


def append_worker(properties: dict[str, str], table_name: str, worker: int) -> int:
    """Append APPENDS one-row batches; returns how many commits failed and were retried."""
    catalog = OlympiaCatalog(f"w{worker}", **properties)
    table = catalog.load_table(table_name)
    failures = 0
    for i in range(APPENDS):
        while True:
            try:
                table.append(rows(worker * 1000 + i, 1))
                break
            except CommitFailedException:
                failures += 1
                table.refresh()
    return failures


def run_workers(properties: dict[str, str], tables: list[str]) -> list[int]:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(WORKERS) as pool:
        return pool.starmap(append_worker,
                            [(properties, tables[w], w) for w in range(WORKERS)])


def check_history(catalog: OlympiaCatalog, start: int, tables: list[str]) -> None:
    """One new version per append, each changing exactly one table; `olympia verify` OK."""
    end = catalog.olympia.refresh()
    assert end == start + WORKERS * APPENDS
    changed = [info for info in versions.history(catalog.olympia, limit=end + 1)
               if info.version > start]
    assert sorted(info.version for info in changed) == list(range(start + 1, end + 1))
    for info in changed:
        (action,) = [a for a in info.actions if a.object.name]
        assert f"sales.{action.object.name}" in tables
    result = CliRunner().invoke(main, ["verify", "-c", catalog.olympia.uri])
    assert result.exit_code == 0 and "OK: version" in result.output, result.output


def expected_ids(workers: range) -> list[int]:
    return sorted(w * 1000 + i for w in workers for i in range(APPENDS))


def test_four_processes_append_to_four_tables(tmp_path: Path) -> None:
    props = local_properties(tmp_path)
    catalog = open_catalog(props)
    catalog.create_namespace("sales")
    tables = [f"sales.t{w}" for w in range(WORKERS)]
    for name in tables:
        catalog.create_table(name, SCHEMA, properties=RETRY)
    start = catalog.olympia.refresh()
    run_workers(props, tables)
    for w, name in enumerate(tables):
        table = catalog.load_table(name)
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == expected_ids(range(w, w + 1))
        assert len(table.metadata.snapshots) == APPENDS
    check_history(catalog, start, tables)


def test_four_processes_append_to_one_table(tmp_path: Path) -> None:
    props = local_properties(tmp_path)
    catalog = open_catalog(props)
    catalog.create_namespace("sales")
    catalog.create_table("sales.t", SCHEMA, properties=RETRY)
    start = catalog.olympia.refresh()
    run_workers(props, ["sales.t"] * WORKERS)
    table = catalog.load_table("sales.t")
    ids = table.scan().to_arrow()["id"].to_pylist()
    assert len(ids) == WORKERS * APPENDS and sorted(ids) == expected_ids(range(WORKERS))
    # the Iceberg snapshots form one chain, as the catalog versions do
    snapshots = table.metadata.snapshots
    assert len(snapshots) == WORKERS * APPENDS
    parents = [s.parent_snapshot_id for s in snapshots]
    assert parents == [None, *[s.snapshot_id for s in snapshots[:-1]]]
    check_history(catalog, start, ["sales.t"])


# --- expiry and the object-changed sensor -------------------------------------------------


def files_under(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def test_expiry_never_touches_iceberg_files(tmp_path: Path) -> None:
    """Olympia expiry lists only its own folders (vn/, node/, def/, dtxn/): a warehouse beside
    the catalog, or even inside its prefix, keeps every Iceberg file."""
    outside = open_catalog(local_properties(tmp_path))
    inside = open_catalog({**local_properties(tmp_path),
                           "warehouse": f"file://{tmp_path}/catalog/warehouse"}, "inside")
    outside.create_namespace("sales")
    for catalog, name in ((outside, "sales.a"), (inside, "sales.b")):
        table = catalog.create_table(name, SCHEMA)
        for i in range(5):
            table.append(rows(i * 10))
        table.overwrite(rows(100))  # leaves unreferenced data files behind, as Iceberg does
    iceberg = files_under(tmp_path / "warehouse") | files_under(tmp_path / "catalog/warehouse")
    assert len(iceberg) > 20
    policy = ExpirePolicy(keep_last=1, older_than_ms=0, grace_ms=0, force=True)
    result = expire_local(outside.olympia, policy, now_ms=2**42, settle_ms=0)
    assert result.versions_expired > 0 and result.files_deleted > 0
    assert iceberg <= files_under(tmp_path / "warehouse") | files_under(
        tmp_path / "catalog/warehouse")
    for name in ("sales.a", "sales.b"):
        assert sorted(outside.load_table(name).scan().to_arrow()["id"].to_pylist()) == [
            100, 101, 102]


def test_object_changed_sensor_fires_when_the_metadata_location_moves(tmp_path: Path) -> None:
    pytest.importorskip("airflow")
    from olympia_provider.hooks.olympia import Condition

    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.t", SCHEMA)
    other = catalog.create_table("sales.other", SCHEMA)
    baseline = catalog.olympia.refresh()
    condition = Condition(after_version=baseline, kind="table", namespace="sales", name="t")
    uri = catalog.olympia.uri
    other.append(rows(0))  # another table's data changes: no event for sales.t
    assert condition.check(uri, {}) is None
    table.append(rows(0))  # its metadata location moves: the sensor fires
    assert condition.check(uri, {}) == catalog.olympia.refresh()
    assert os.path.basename(catalog.olympia.load_table("sales", "t").location).startswith("00001-")
