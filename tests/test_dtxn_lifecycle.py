"""The life of a distributed transaction (issue 45, item 5): expiry never deletes what an
open, unexpired transaction references; the files of aborted and expired transactions go;
``olympia txn list/show`` say who opened a transaction, when, and what it touched."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows

from olympia.exceptions import NoSuchTransactionError
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.txnfiles import abort_transaction


@pytest.fixture
def ice(tmp_path: Path) -> OlympiaCatalog:
    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("sales")
    for name in ("a", "b"):
        catalog.create_table(("sales", name), SCHEMA).append(rows(0))
    return catalog


def warehouse(tmp_path: Path) -> set[str]:
    return {str(p) for p in (tmp_path / "warehouse").rglob("*") if p.is_file()}


def ids(catalog: OlympiaCatalog, name: str) -> list[int]:
    return sorted(catalog.load_table(("sales", name)).scan().to_arrow()["id"].to_pylist())


def test_abort_removes_the_iceberg_files_the_transaction_wrote(
        ice: OlympiaCatalog, tmp_path: Path) -> None:
    """Every file the statements wrote goes; every file a committed version names stays,
    also one committed after the transaction began."""
    before = warehouse(tmp_path)
    ice.olympia.begin_transaction("t1")
    inside = ice.in_transaction("t1")
    inside.load_table("sales.a").append(rows(100))
    inside.load_table("sales.a").append(rows(110))
    inside.create_table(("sales", "c"), SCHEMA).append(rows(50))
    written = warehouse(tmp_path) - before
    ice.load_table("sales.b").append(rows(300))  # committed meanwhile, outside
    committed = warehouse(tmp_path) - before - written
    assert written and committed

    removed = abort_transaction(ice, "t1")
    with pytest.raises(NoSuchTransactionError):
        ice.olympia.distributed_transaction("t1")
    assert warehouse(tmp_path) == before | committed
    assert removed.count == len(written)
    assert removed.left == [] and set(removed.deleted) == {"sales.a", "sales.c"}
    assert ids(ice, "a") == [0, 1, 2] and ids(ice, "b") == [0, 1, 2, 300, 301, 302]
    assert not ice.table_exists(("sales", "c"))


def test_abort_never_deletes_outside_the_table_location(
        ice: OlympiaCatalog, tmp_path: Path) -> None:
    """A data file the transaction added from elsewhere (``add_files``: a trusted catalog
    allows it) is left, and the result says so."""
    outside = tmp_path / "elsewhere" / "extra.parquet"
    outside.parent.mkdir()
    pq.write_table(rows(900), outside)
    ice.olympia.begin_transaction("t2")
    ice.in_transaction("t2").load_table("sales.a").add_files([f"file://{outside}"])
    removed = abort_transaction(ice, "t2")
    assert outside.exists()
    assert [m for m in removed.left if str(outside) in m and "outside" in m]
    assert removed.deleted["sales.a"]  # its metadata file, manifest list and manifest
    assert ids(ice, "a") == [0, 1, 2]
