"""The example DAGs under a real Airflow: API server, scheduler, DAG processor and triggerer
run as subprocesses on one throwaway home (SQLite metadata DB, LocalExecutor); runs are
started with ``airflow dags trigger`` and followed with the CLI.

Airflow 3.3 facts this relies on: LocalExecutor works on SQLite (SequentialExecutor is
gone); task processes reach the metadata DB only through the API server's execution API, so
``[core] execution_api_server_url`` must point at it and every process must share
``[api_auth] jwt_secret``; the DAG processor picks up files present when it starts (it looks
for new ones every ``[dag_processor] refresh_interval``, 300 s by default).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_provider_e2e import cli_json

from olympia import Catalog

pytestmark = pytest.mark.airflow
ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
WAIT = 600.0  # seconds any one state may take on a busy 2-core machine

# Sensors whose timeout passes: a failed one must not be retried, a soft_fail one skips.
# Airflow 3.3's scheduler fails a resumed task (state queued) when it handles the executor's
# "success" event of the task's deferral exit only after the trigger fired ("finished with
# state success, but the task instance's state attribute is queued"; seen with a 5 s
# timeout and the scheduler 6 s behind under load): 30 s timeouts leave it time, and one
# retry each absorbs the race if it happens anyway (a retry is reported, not hidden).
TIMEOUT_DAG = '''
from datetime import datetime, timedelta

from airflow.sdk import DAG

from olympia_provider.sensors.olympia import OlympiaVersionSensor

with DAG("olympia_sensor_timeout", schedule=None, start_date=datetime(2026, 1, 1)):
    # one after the other: with both deferred at once, one was failed without resuming
    # (seen twice in ~5 runs; likely the scheduler race above)
    hard = OlympiaVersionSensor(task_id="hard", target_version=10_000, deferrable=True,
                                poke_interval=1, timeout=30, retries=1,
                                retry_delay=timedelta(seconds=1))
    soft = OlympiaVersionSensor(task_id="soft", target_version=10_000, deferrable=True,
                                poke_interval=1, timeout=30, soft_fail=True, retries=1,
                                retry_delay=timedelta(seconds=1), trigger_rule="all_done")
    hard >> soft
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Airflow:
    """One Airflow home with its services running; CLI calls against it."""

    def __init__(self, home: Path, env: dict[str, str], warehouse: Catalog) -> None:
        self.home, self.env, self.warehouse = home, env, warehouse
        self.processes: list[subprocess.Popen[bytes]] = []

    def cli(self, *args: str) -> str:
        proc = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"airflow {' '.join(args)}:\n{proc.stderr[-3000:]}"
        return proc.stdout

    def json(self, *args: str) -> list[dict[str, Any]]:
        return cli_json(self.cli(*args, "--output", "json"))

    def start(self, *args: str) -> None:
        log = (self.home / f"{args[0]}.log").open("wb")
        # its own session (process group): stopping it also stops the workers it forks
        self.processes.append(subprocess.Popen([AIRFLOW, *args], env=self.env, stdout=log,
                                               stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def stop(self) -> None:
        """Stop the services this test started, by their process group ids."""
        for proc in self.processes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def wait_for(self, what: str, check: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + WAIT
        while True:
            for proc in self.processes:
                assert proc.poll() is None, f"{proc.args[1]} exited; see {self.home}"
            result = check()
            if result:
                return result
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(1)

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        args = ["dags", "trigger", dag_id] + (["--conf", json.dumps(conf)] if conf else [])
        (run,) = self.json(*args)
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        runs = {r["run_id"]: r["state"] for r in self.json("dags", "list-runs", dag_id)}
        return runs.get(run_id, "")

    def finished(self, dag_id: str, run_id: str) -> str:
        """The run's final state, once it has one."""
        return self.wait_for(f"{dag_id} {run_id}", lambda: (
            state if (state := self.run_state(dag_id, run_id)) in ("success", "failed")
            else ""))

    def task_states(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        return {t["task_id"]: t for t in self.json("tasks", "states-for-dag-run", dag_id,
                                                  run_id)}

    def query(self, sql: str, *args: str) -> list[tuple[Any, ...]]:
        """Rows of the metadata DB, for what the CLI does not show (XCom, try numbers)."""
        with sqlite3.connect(self.home / "airflow.db", timeout=30) as db:
            return list(db.execute(sql, args))

    def attempt_logs(self, dag_id: str, run_id: str, task_id: str) -> dict[int, str]:
        """Each try's log (the task's and its triggers'), by try number."""
        folder = (self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
                  / f"task_id={task_id}")
        logs: dict[int, str] = {}
        for path in sorted(folder.glob("attempt=*.log*")):
            attempt = int(path.name.split("=", 1)[1].split(".", 1)[0])
            logs[attempt] = logs.get(attempt, "") + path.read_text(errors="replace")
        return logs

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        return "\n".join(self.attempt_logs(dag_id, run_id, task_id).values())


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    home = tmp_path_factory.mktemp("airflow_services")
    warehouse = home / "warehouse"
    Catalog.create(str(warehouse))
    dags = home / "dags"
    dags.mkdir()
    for example in (ROOT / "examples" / "dags").glob("*.py"):
        shutil.copy(example, dags)
    (dags / "olympia_sensor_timeout.py").write_text(TIMEOUT_DAG)
    api_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(16).hex(),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "2",
        "AIRFLOW_CONN_OLYMPIA_DEFAULT": json.dumps({"conn_type": "olympia",
                                                    "host": str(warehouse)}),
        "AIRFLOW_VAR_OLYMPIA_SPEC_DIR": str(ROOT / "examples" / "catalog"),
        "AIRFLOW_VAR_OLYMPIA_EXPORT_TARGET": str(home / "exports"),
    })
    service = Airflow(home, env, Catalog.open(str(warehouse)))
    service.cli("db", "migrate")
    try:
        service.start("api-server", "--host", "127.0.0.1", "--port", str(api_port),
                      "--workers", "1")
        for name in ("scheduler", "dag-processor", "triggerer"):
            service.start(name)
        wanted = {"olympia_apply", "olympia_maintenance", "olympia_orders_changed",
                  "olympia_export_version", "olympia_rollback", "olympia_sensor_timeout"}
        service.wait_for("the DAGs to be parsed", lambda: wanted <= {
            d["dag_id"] for d in service.json("dags", "list")})
        yield service
    finally:
        service.stop()


def test_scheduler_runs_the_examples(airflow: Airflow) -> None:
    warehouse = airflow.warehouse
    timeout_run = airflow.trigger("olympia_sensor_timeout")  # runs beside the rest

    # apply -> its Asset events start the maintenance DAG and the orders table's DAG
    apply_run = airflow.trigger("olympia_apply")
    assert airflow.finished("olympia_apply", apply_run) == "success"
    assert warehouse.refresh() >= 1
    maintenance = airflow.wait_for("the Asset-triggered maintenance run", lambda: [
        r["run_id"] for r in airflow.json("dags", "list-runs", "olympia_maintenance")])
    orders = airflow.wait_for("the orders table's run", lambda: [
        r["run_id"] for r in airflow.json("dags", "list-runs", "olympia_orders_changed")])
    assert len(maintenance) == 1 and maintenance[0].startswith("asset_triggered__")
    assert airflow.finished("olympia_orders_changed", orders[0]) == "success"
    assert airflow.finished("olympia_maintenance", maintenance[0]) == "success"
    expire_log = airflow.task_log("olympia_maintenance", maintenance[0], "expire")
    assert "Expired 0 versions" in expire_log
    spark = [json.loads(line) for line in expire_log.splitlines()
             if line.startswith("{") and '"spark: ' in line]
    assert spark and {e["level"] for e in spark} <= {"info", "warning"}  # not all errors
    warehouse.refresh()
    (export,) = warehouse.catalog_def.exported_snapshots
    assert export.startswith("maintenance-")
    (reported,) = airflow.query("SELECT CAST(value AS TEXT) FROM xcom WHERE dag_id = ? AND "
                                "run_id = ? AND key = 'return_value'", "olympia_orders_changed",
                                orders[0])
    assert json.loads(reported[0]) == [{"version": 1, "action": "create"}]

    # a version the catalog has reached: the sensor returns without deferring
    reached = airflow.trigger("olympia_export_version", {"version": 1})
    assert airflow.finished("olympia_export_version", reached) == "success"
    assert "DEFERRED" not in airflow.task_log("olympia_export_version", reached,
                                              "wait_for_version")

    # a future version: the sensor defers, and resumes after a commit from outside Airflow
    target = warehouse.refresh() + 1
    future = airflow.trigger("olympia_export_version", {"version": target})
    airflow.wait_for("the sensor to defer", lambda: airflow.task_states(
        "olympia_export_version", future)["wait_for_version"]["state"] == "deferred")
    # commit only once the scheduler has handled the deferral exit (the race named above)
    event = ("Received executor event with state success for task instance TaskInstanceKey("
             f"dag_id='olympia_export_version', task_id='wait_for_version', run_id='{future}'")
    airflow.wait_for("the scheduler to handle the deferral", lambda: event in (
        airflow.home / "scheduler.log").read_text(errors="replace"))
    warehouse.create_namespace("committed_outside_airflow")
    assert airflow.finished("olympia_export_version", future) == "success"
    log = airflow.task_log("olympia_export_version", future, "wait_for_version")
    assert "DEFERRED" in log and f"Catalog condition met at version {target}" in log

    # the timed-out sensor failed without a retry; the soft_fail one was skipped
    # the run's leaf is the skipped soft sensor, so Airflow calls the run a success
    assert airflow.finished("olympia_sensor_timeout", timeout_run) == "success"
    states = dict(airflow.query("SELECT task_id, state || ' ' || try_number FROM "
                                "task_instance WHERE dag_id = ? AND run_id = ?",
                                "olympia_sensor_timeout", timeout_run))
    logs = {task: airflow.attempt_logs("olympia_sensor_timeout", timeout_run, task)
            for task in ("hard", "soft")}
    evidence = (states, {f"{task} {n}": log[-4000:] for task, tries in logs.items()
                         for n, log in tries.items()})
    # each sensor's timeout is its last try: never retried. An earlier try that failed
    # otherwise (the scheduler race above; each is allowed one retry) is shown, not hidden.
    for task, outcome, marker in (("hard", "failed", "AirflowSensorTimeout"),
                                  ("soft", "skipped", '"event":"Skipping task."')):
        tries = logs[task]
        assert [n for n, log in tries.items() if marker in log] == [max(tries)], evidence
        assert states[task] == f"{outcome} {max(tries)}", evidence
        if len(tries) > 1:
            warnings.warn(f"sensor {task!r} was retried before its timeout: {evidence}",
                          stacklevel=1)
