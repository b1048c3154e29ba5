"""A purge through the server's service deletes exactly the files it checked: a commit that
lands between the listing of the table's files and the drop (here one naming a file outside
the warehouse) makes the purge fail with nothing dropped or deleted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from olympia import exceptions as oe
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg import catalog as iceberg_catalog
from olympia.iceberg.locations import Place
from olympia.server import CatalogService

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


def test_a_commit_between_the_check_and_the_drop_stops_the_purge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    props = {"uri": str(tmp_path / "catalog"), "warehouse": f"file://{tmp_path}/warehouse",
             "olympia.create": "true"}
    server_side, other = OlympiaCatalog("server", **props), OlympiaCatalog("other", **props)
    server_side.create_namespace("ns")
    server_side.create_table(("ns", "t"), ROWS.schema).append(ROWS)
    outside = tmp_path / "elsewhere.parquet"
    pq.write_table(ROWS, outside)
    listed: list[str] = []
    list_files = iceberg_catalog.table_files

    def list_then_commit(table: Table, check: Callable[[str, str], Place],
                         ) -> dict[str, dict[str, Place]]:
        files = list_files(table, check)
        listed.extend(p for paths in files.values() for p in paths)
        # another client commits before the drop: its metadata names a file outside
        other.load_table(("ns", "t")).add_files([f"file://{outside}"])
        return files

    monkeypatch.setattr(iceberg_catalog, "table_files", list_then_commit)
    service = CatalogService(server_side, {})
    with pytest.raises(CommitFailedException, match="changed after its files were listed"):
        service.drop_table("ns", "t", purge=True)
    assert listed and all(Path(p.removeprefix("file://")).exists() for p in listed)
    assert outside.exists()
    assert other.load_table(("ns", "t")).scan().to_arrow().num_rows == 6
    monkeypatch.setattr(iceberg_catalog, "table_files", list_files)
    with pytest.raises(oe.TableLocationError, match="outside its location"):  # seen now
        service.drop_table("ns", "t", purge=True)
    assert outside.exists() and server_side.table_exists(("ns", "t"))
    server_side.close()
    other.close()
