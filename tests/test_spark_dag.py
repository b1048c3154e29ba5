"""End to end under `airflow dags test`: a PySpark task writes an Iceberg table of an Olympia
catalog, the table's Asset event queues the report DAG, which reads the table at the catalog
version the write committed even after a later commit."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from olympia.iceberg import OlympiaCatalog

pytestmark = [pytest.mark.airflow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


def run(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True,
                          timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{output[-4000:]}"
    return output


def test_spark_write_then_asset_scheduled_read(tmp_path: Path) -> None:
    warehouse = tmp_path / "catalog"
    properties = {"uri": str(warehouse), "warehouse": f"file://{tmp_path}/tables",
                  "olympia.create": "true"}
    catalog = OlympiaCatalog("dag-test", **properties)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "olympia_spark.py").symlink_to(ROOT / "examples" / "dags" / "olympia_spark.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
        "AIRFLOW_CONN_OLYMPIA_DEFAULT": json.dumps({
            "conn_type": "olympia", "host": str(warehouse),
            "extra": {"spark_master": "local[2]",
                      "iceberg_properties": {"warehouse": properties["warehouse"]}}}),
    })
    run(env, "db", "migrate")
    run(env, "dags", "reserialize")
    run(env, "dags", "unpause", "olympia_spark_report")

    run(env, "dags", "test", "olympia_spark_write")
    version = catalog.olympia.refresh()
    table = catalog.load_table("sales.daily_orders")
    assert table.scan().count() == 1000
    db = sqlite3.connect(tmp_path / "airflow.db", timeout=30)
    asset = "olympia://file" + str(warehouse) + "?object=sales.daily_orders"
    (extra,) = [json.loads(row[0]) for row in db.execute(
        "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
        "WHERE a.uri = ?", (asset,))]
    assert extra["version"] == version
    assert extra["snapshot_id"] == table.metadata.current_snapshot_id
    queued = set(db.execute("SELECT q.target_dag_id, a.uri FROM asset_dag_run_queue q "
                            "JOIN asset a ON a.id = q.asset_id"))
    assert queued == {("olympia_spark_report", asset)}

    # a later commit: the report still reads the version the event names
    table.append(pa.table({"order_id": pa.array([-1], pa.int64()),
                           "day": pa.array([None], pa.date32()),
                           "amount": pa.array([1.0], pa.float64())}))
    assert catalog.olympia.refresh() == version + 1
    run(env, "dags", "test", "olympia_spark_report")
    (value,) = db.execute("SELECT CAST(value AS TEXT) FROM xcom WHERE dag_id = "
                          "'olympia_spark_report' AND key = 'return_value'").fetchone()
    expected_total = float(sum(i % 97 for i in range(1000)))
    assert json.loads(value) == {"version": version, "rows": 1000, "total": expected_total}
