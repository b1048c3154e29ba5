"""End to end: Airflow 3 runs the example DAGs (`airflow dags test`) on a SQLite metadata DB."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from olympia import Catalog, versions
from olympia.expire import ExpirePolicy, expire_local
from olympia.spec import load_spec
from olympia_provider.assets import catalog_asset, object_asset

pytestmark = pytest.mark.airflow
ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
EXAMPLE_VARS = yaml.safe_load((ROOT / "examples" / "vars.yaml").read_text())
EXAMPLE_NAMESPACES = sorted(load_spec(ROOT / "examples" / "catalog", EXAMPLE_VARS).namespaces)
SECRET = f"e2e-secret-{uuid.uuid4().hex}"  # the connection's password (S3 secret key)

# A sensor in reschedule mode: every poke is a new run of the task, with its XCom cleared.
RESCHEDULE_DAG = '''
from datetime import datetime

from airflow.sdk import DAG

from olympia_provider.sensors.olympia import OlympiaObjectChangedSensor

with DAG("olympia_e2e_reschedule", schedule=None, start_date=datetime(2026, 1, 1)):
    OlympiaObjectChangedSensor(task_id="wait_for_orders", olympia_conn_id="olympia_sensor",
                               kind="table", namespace="s", name="orders",
                               mode="reschedule", poke_interval=1, timeout=300)
'''


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("airflow_home")
    warehouse = home / "warehouse"
    Catalog.create(str(warehouse))
    dags = home / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "examples" / "dags" / "olympia_catalog.py", dags)
    (dags / "olympia_e2e_reschedule.py").write_text(RESCHEDULE_DAG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_CONN_OLYMPIA_DEFAULT": json.dumps({
            "conn_type": "olympia", "host": str(warehouse), "login": "e2e-key-id",
            "password": SECRET,
            "extra": {"storage_options": {"max_concurrency": 4}, "spark_master": "local[2]"}}),
        "AIRFLOW_VAR_OLYMPIA_EXPORT_TARGET": str(home / "exports"),
        "AIRFLOW_VAR_OLYMPIA_SPEC_DIR": str(ROOT / "examples" / "catalog"),
        "AIRFLOW_VAR_OLYMPIA_FINANCE_RETENTION": EXAMPLE_VARS["finance_retention"],
        "WAREHOUSE": str(warehouse),
    })
    run(env, "db", "migrate")
    yield env


def run(env: dict[str, str], *args: str, stderr: bool = True) -> str:
    """The command's output (without stderr when ``stderr`` is false); it must succeed."""
    proc = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True,
                          timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{output[-4000:]}"
    return output if stderr else proc.stdout


def cli_json(output: str) -> list[dict[str, Any]]:
    """The JSON list an Airflow CLI command printed with ``--output json`` (on one line,
    after any warnings Airflow logs to stdout)."""
    lines = [line for line in output.splitlines() if line.startswith(("[{", "[]"))]
    assert lines, f"no JSON in the output:\n{output[-2000:]}"
    return list(json.loads(lines[-1]))


def metadata_db(env: dict[str, str]) -> sqlite3.Connection:
    return sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db", timeout=30)


def queued_runs(db: sqlite3.Connection) -> set[tuple[str, str]]:
    """(DAG, asset URI) pairs whose Asset events wait for the scheduler to start a run."""
    return set(db.execute("SELECT q.target_dag_id, a.uri FROM asset_dag_run_queue q "
                          "JOIN asset a ON a.id = q.asset_id"))


def start_queued_runs(db: sqlite3.Connection) -> None:
    """What the scheduler does when it starts the runs queued by Asset events."""
    with db:
        db.execute("DELETE FROM asset_dag_run_queue")


def test_examples_import_wherever_copied(tmp_path: Path) -> None:
    """The example files alone in a fresh dags folder, with no connection and no Variables:
    the DAG processor imports them without errors and registers every DAG."""
    dags = tmp_path / "dags"
    dags.mkdir()
    for example in (ROOT / "examples" / "dags").glob("*.py"):
        shutil.copy(example, dags)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}"})
    run(env, "db", "migrate")
    run(env, "dag-processor", "--num-runs", "1")

    def listed(*args: str) -> list[dict[str, Any]]:
        return cli_json(run(env, *args, "--output", "json", stderr=False))

    assert listed("dags", "list-import-errors") == []
    assert {d["dag_id"] for d in listed("dags", "list")} >= {  # other example files add more
        "olympia_apply", "olympia_maintenance", "olympia_orders_changed",
        "olympia_export_version", "olympia_rollback"}


def test_provider_is_discovered(airflow_env: dict[str, str]) -> None:
    info = run(airflow_env, "providers", "get", "olympia-catalog", "--output", "json")
    assert "olympia-catalog" in info
    hooks = run(airflow_env, "providers", "hooks", "--output", "json")
    assert "olympia_provider.hooks.olympia.OlympiaHook" in hooks


def test_example_dags_end_to_end(airflow_env: dict[str, str]) -> None:
    warehouse = airflow_env["WAREHOUSE"]
    run(airflow_env, "dags", "reserialize")
    # maintenance is scheduled on the catalog Asset: unpaused, its runs get queued (no
    # scheduler runs here, so nothing starts them)
    run(airflow_env, "dags", "unpause", "olympia_maintenance")
    run(airflow_env, "dags", "unpause", "olympia_orders_changed")
    db = metadata_db(airflow_env)
    catalog_uri = catalog_asset(warehouse).uri
    orders_uri = object_asset(warehouse, "sales.orders").uri
    outputs = [run(airflow_env, "dags", "test", "olympia_apply")]
    catalog = Catalog.open(warehouse)
    assert catalog.version == 1
    assert catalog.list_namespaces() == EXAMPLE_NAMESPACES
    info = versions.history(catalog, limit=1)[0].info
    assert (info["airflow_dag"], info["user"]) == ("olympia_apply", "airflow:olympia_apply")
    assert queued_runs(db) == {("olympia_maintenance", catalog_uri),
                               ("olympia_orders_changed", orders_uri)}
    start_queued_runs(db)

    outputs.append(run(airflow_env, "dags", "test", "olympia_apply"))  # nothing to change
    assert catalog.refresh() == 1
    assert queued_runs(db) == set()  # no Asset event: maintenance is not started

    outputs.append(run(airflow_env, "dags", "test", "olympia_maintenance"))
    catalog.refresh()
    assert catalog.version == 2  # the export's bookkeeping version
    (name,) = catalog.catalog_def.exported_snapshots
    assert name.startswith("maintenance-") and catalog.catalog_def.exports[name].version == 1
    exported = Catalog.open(catalog.catalog_def.exports[name].target)
    assert exported.list_namespaces() == EXAMPLE_NAMESPACES
    assert queued_runs(db) == set()  # its export's commit does not start it again

    run(airflow_env, "dags", "test", "olympia_export_version")  # deferrable sensor inline
    catalog.refresh()
    assert catalog.version == 3
    (name,) = set(catalog.catalog_def.exported_snapshots) - {name}
    assert name.startswith("v1-") and catalog.catalog_def.exports[name].version == 1

    run(airflow_env, "dags", "test", "olympia_rollback")
    catalog.refresh()
    assert catalog.version == 4 and versions.history(catalog, limit=1)[0].is_rollback
    assert queued_runs(db) == {("olympia_maintenance", catalog_uri)}

    uris = [row[0] for row in db.execute(
        "SELECT asset.uri FROM asset_event JOIN asset ON asset.id = asset_event.asset_id")]
    # the catalog Asset: the first apply and the rollback; not the no-change apply, and
    # not the exports (maintenance is scheduled on that Asset and must not retrigger itself)
    assert uris.count(catalog_uri) == 2
    assert uris.count(orders_uri) == 1  # one event for the one object a DAG watches
    assert len(uris) == 3

    # the connection's secret reaches no task log and no XCom of apply, export or expire
    # (`dags test` prints the task logs; any log files land under AIRFLOW_HOME/logs)
    assert re.search(r"Applied \d+ changes as version 1", outputs[0])
    assert "Expired 0 versions" in outputs[2]
    logs = [p.read_text(errors="replace")
            for p in (Path(airflow_env["AIRFLOW_HOME"]) / "logs").rglob("*") if p.is_file()]
    xcoms = list(db.execute("SELECT dag_id, task_id, CAST(value AS TEXT) FROM xcom"))
    assert {("olympia_apply", "apply"), ("olympia_maintenance", "export"),
            ("olympia_maintenance", "expire")} <= {(dag, task) for dag, task, _ in xcoms}
    rendered = [row[0] for row in db.execute(
        "SELECT CAST(rendered_fields AS TEXT) FROM rendered_task_instance_fields")]
    for text in [*outputs, *logs, *(value for _, _, value in xcoms), *rendered]:
        assert SECRET not in text


def test_rescheduled_sensor_keeps_its_baseline(airflow_env: dict[str, str],
                                               tmp_path: Path) -> None:
    """Each poke of a reschedule-mode sensor is a new run of the task: the baseline (and the
    object's definition at it) must survive that, and the expiry of the baseline version."""
    catalog = Catalog.create(str(tmp_path / "sensed"))
    catalog.create_namespace("s")
    catalog.create_table("s", "orders", columns=[{"name": "id", "type": "int8"}])
    env = {**airflow_env, "AIRFLOW_CONN_OLYMPIA_SENSOR": json.dumps(
        {"conn_type": "olympia", "host": catalog.uri})}
    db = metadata_db(airflow_env)

    def reschedules() -> int:
        return db.execute("SELECT count(*) FROM task_reschedule r JOIN task_instance t "
                          "ON t.id = r.ti_id WHERE t.dag_id = 'olympia_e2e_reschedule'"
                          ).fetchone()[0]

    def wait_for_reschedules(count: int) -> None:
        deadline = time.monotonic() + 120
        while reschedules() < count:
            assert proc.poll() is None, proc.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the sensor was not rescheduled"
            time.sleep(0.2)

    proc = subprocess.Popen([AIRFLOW, "dags", "test", "olympia_e2e_reschedule"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_reschedules(1)  # poked once at the baseline, rescheduled
        baseline = catalog.refresh()
        catalog.create_table("s", "other", columns=[{"name": "id", "type": "int8"}])
        expire_local(catalog, ExpirePolicy(keep_last=1, older_than_ms=0, grace_ms=0,
                                           force=True), settle_ms=0)
        assert catalog.files.oldest_version() > baseline  # the baseline version is gone
        wait_for_reschedules(reschedules() + 2)  # later pokes need not read it
        catalog.alter_table("s.orders", set_properties={"owner": "sales"})
        output = proc.communicate(timeout=300)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output[-4000:]
    (value,) = db.execute("SELECT CAST(value AS TEXT) FROM xcom WHERE dag_id = "
                          "'olympia_e2e_reschedule' AND key = 'return_value'").fetchone()
    assert json.loads(value) == catalog.refresh()
