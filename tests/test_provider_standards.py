"""The provider against the standard of Airflow's own providers: catalog-scoped Assets and
their registered normaliser, the connection's one catalog field, sensors that return
without deferring, trigger and UI plugin modules light enough to load in every process, and the
expiry job submitted with spark-submit (for real, on local[2]) with Spark's log levels."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import (
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferralError,
    TaskDeferred,
)
from airflow_context import task_context

from olympia import Catalog
from olympia_provider.assets import catalog_asset, catalog_asset_uri, object_asset
from olympia_provider.hooks.olympia import OlympiaHook, settings_from_connection
from olympia_provider.operators.olympia import OlympiaExpireOperator, OlympiaExportOperator
from olympia_provider.sensors.olympia import OlympiaVersionSensor
from olympia_provider.spark import SparkLogRelay

pytestmark = pytest.mark.airflow
COLS = [{"name": "id", "type": "int8"}]


@pytest.fixture
def local_conn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Catalog]:
    """An olympia connection to a fresh catalog on local disk."""
    catalog = Catalog.create(str(tmp_path / "catalog"))
    catalog.create_namespace("s")
    monkeypatch.setenv("AIRFLOW_CONN_OLYMPIA_LOCAL", json.dumps({
        "conn_type": "olympia", "host": catalog.uri,
        "extra": {"storage_options": {"max_concurrency": 4}}}))
    return "olympia_local", catalog


def context() -> dict[str, Any]:
    return task_context("unit")


def test_equal_catalogs_are_equal_assets(tmp_path: Path, local_conn: tuple[str, Catalog]
                                         ) -> None:
    conn_id, catalog = local_conn
    assert OlympiaHook(conn_id).catalog_asset() == catalog_asset(catalog.uri) == catalog_asset(
        str(tmp_path / "catalog"))
    assert catalog_asset("s3://bucket/lake") == catalog_asset("s3a://bucket//lake/")
    assert catalog_asset(str(tmp_path / "x" / ".." / "lake")) == catalog_asset(
        f"file://{tmp_path}/lake/")
    assert catalog_asset("s3://bucket/a_b") != catalog_asset("s3://bucket/a-b")
    assert catalog_asset("s3://bucket/lake").uri == "olympia://s3/bucket/lake"
    orders = object_asset("s3://bucket/lake/", "sales.orders")
    assert orders.uri == "olympia://s3/bucket/lake?object=sales.orders"
    # Airflow applies the registered normaliser to Assets written by hand too
    assert Asset("olympia://S3A/bucket//lake/").uri == "olympia://s3/bucket/lake"
    # every scheme of the scheme table names its catalogs, by its canonical name
    assert catalog_asset("gs://bucket//lake/") == catalog_asset("gs://bucket/lake")
    assert catalog_asset("gs://bucket/lake").uri == "olympia://gs/bucket/lake"
    for bad in ("olympia://ftp/bucket/lake", "olympia://s3/bucket/lake?table=x"):
        with pytest.raises(ValueError, match="olympia://"):
            Asset(bad)
    with pytest.raises(ValueError, match="unsupported catalog URI"):
        catalog_asset_uri("ftp://bucket/lake")


class _Conn:
    """The attributes of an Airflow connection that the hook reads."""

    def __init__(self, host: str | None, extra: dict[str, Any]) -> None:
        self.conn_id, self.host, self.extra_dejson = "c", host, extra
        self.login = self.password = None


def test_host_is_the_one_catalog_uri() -> None:
    assert settings_from_connection(_Conn("s3://b/lake", {}))[0] == "s3://b/lake"
    with pytest.warns(DeprecationWarning, match="catalog_uri is deprecated"):
        assert settings_from_connection(_Conn(None, {"catalog_uri": "s3://b/old"}))[0] == (
            "s3://b/old")
    with pytest.warns(DeprecationWarning):
        assert settings_from_connection(
            _Conn("s3://b/lake", {"catalog_uri": "s3://b/lake"}))[0] == "s3://b/lake"
    with pytest.raises(ValueError, match="names two catalogs"):
        settings_from_connection(_Conn("s3://b/lake", {"catalog_uri": "s3://b/other"}))


def test_deferrable_sensor_returns_at_once_when_the_condition_holds(
        local_conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = local_conn
    catalog.create_table("s", "t", columns=COLS)
    sensor = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id, target_version=2,
                                  deferrable=True, timeout=60)
    assert sensor.execute({}) == 2  # no TaskDeferred: no triggerer round trip


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={"AIRFLOW__CORE__UNIT_TEST_MODE": "True", **env,
                                            "PATH": "/usr/bin:/bin"})


def test_deferrable_defaults_from_airflow_config() -> None:
    code = ("from olympia_provider.sensors.olympia import OlympiaVersionSensor as S\n"
            "print(S(task_id='w').deferrable)")
    assert _python(code, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="True").stdout.split()[-1] \
        == "True"
    assert _python(code, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="False").stdout.split()[-1] \
        == "False"


def test_trigger_module_leaves_the_catalog_library_to_a_thread() -> None:
    """The triggerer imports trigger modules on its event loop: ours imports no Olympia
    (nor pyarrow) there; the trigger imports it in a worker thread when it runs."""
    assert _loaded_by("airflow.triggers.base", "olympia_provider.triggers.olympia",
                      ("olympia", "pyarrow")) == "[]"


def test_ui_plugin_is_light_where_no_ui_is_served() -> None:
    """Every Airflow process loads plugins (scheduler, workers, triggerer): loading ours
    imports neither the catalog library nor FastAPI; the API server builds the UI on its
    first request to it."""
    assert _loaded_by("airflow.sdk.plugins_manager", "olympia_provider.plugins.catalog_ui",
                      ("olympia", "pyarrow", "fastapi")) == "[]"


def _loaded_by(first: str, module: str, packages: tuple[str, ...]) -> str:
    """The modules of ``packages`` a fresh interpreter holds after importing ``first``
    (what the Airflow process has already) and then ``module``, as printed."""
    code = (f"import sys, {first}\nimport {module}\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {packages!r}))")
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split("\n")[-2]


def test_spark_log_lines_keep_their_level(caplog: pytest.LogCaptureFixture) -> None:
    relay = SparkLogRelay(logging.getLogger("spark-relay-test"))
    with caplog.at_level(logging.DEBUG, logger="spark-relay-test"):
        for line in ["26/11/23 10:00:00 INFO SparkContext: Running Spark version 4.3.0",
                     "26/11/23 10:00:01 WARN NativeCodeLoader: Unable to load native-hadoop",
                     "26/11/23 10:00:02 ERROR Executor: Exception in task 0.0",
                     "java.lang.RuntimeException: boom",  # a stack trace keeps ERROR
                     "26/11/23 10:00:03 DEBUG BlockManager: Removing RDD 3"]:
            relay.line(line + "\n")
    assert [r.levelno for r in caplog.records] == [
        logging.INFO, logging.WARNING, logging.ERROR, logging.ERROR, logging.DEBUG]


def test_export_operator_logs_what_it_exported(local_conn: tuple[str, Catalog], tmp_path: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    conn_id, _catalog = local_conn
    OlympiaExportOperator(task_id="ex", olympia_conn_id=conn_id, export_name="e1",
                          target_uri=str(tmp_path / "e1"), mode="full").execute(context())
    out = capfd.readouterr()
    assert f"Exported version 1 as 'e1' (full) to file://{tmp_path}/e1" in out.out + out.err


def test_expire_operator_submits_the_job_with_spark_submit(
        local_conn: tuple[str, Catalog], capfd: pytest.CaptureFixture[str]) -> None:
    """For real: pyspark's own spark-submit runs the job on --master local[2]."""
    conn_id, catalog = local_conn
    for i in range(4):
        catalog.create_table("s", f"t{i}", columns=COLS)
    time.sleep(1.2)  # every file older than the 1s grace (storage mtimes may be whole seconds)
    result = OlympiaExpireOperator(
        task_id="expire", olympia_conn_id=conn_id, spark_submit=True,
        spark_master="local[2]",
        spark_conf={"spark.ui.enabled": "false", "spark.log.level": "INFO"},
        keep_last=2, older_than="0s", grace="1s", force=True).execute(context())
    assert result["engine"] == "spark" and result["versions_expired"] == 4
    assert result["files_deleted"] > 0 and catalog.files.oldest_version() == 4
    assert Catalog.open(catalog.uri).list_tables("s") == ["t0", "t1", "t2", "t3"]
    out = capfd.readouterr()
    log = out.out + out.err
    assert "Submitting the expiry job:" in log and "--master local[2]" in log
    assert "max_concurrency" not in log  # storage options are not on the command line
    spark_lines = [line for line in log.splitlines() if "spark: " in line]
    # Spark's INFO lines stay info in the task log (Airflow would make stderr all errors)
    assert any("[info" in line and " INFO " in line for line in spark_lines), spark_lines[:5]
    assert not any("[error" in line and " INFO " in line for line in spark_lines)
    assert "Expired 4 versions" in log


class _Store(dict):  # type: ignore[type-arg]
    """The get/set of Airflow's task state store (the scheduler test uses the real one)."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


@pytest.mark.parametrize("soft_fail", [False, True])
def test_airflows_own_trigger_timeout_is_a_sensor_timeout(
        local_conn: tuple[str, Catalog], soft_fail: bool) -> None:
    """Airflow 3.3 hands its trigger timeout to the task as ``__fail__`` with no reason; after
    the sensor's deadline that is a timeout (failed without retries, or skipped), before it
    Airflow's deferral error."""
    conn_id, _catalog = local_conn
    sensor = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id, target_version=9,
                                  deferrable=True, poke_interval=0.05, timeout=0.1,
                                  soft_fail=soft_fail)
    store = _Store()
    with pytest.raises(TaskDeferred):
        sensor.execute({"task_state_store": store})
    with pytest.raises(TaskDeferralError if not soft_fail else AirflowSkipException):
        sensor.resume_execution("__fail__", {}, {"task_state_store": store})  # too early
    time.sleep(0.2)
    expected = AirflowSkipException if soft_fail else AirflowSensorTimeout
    with pytest.raises(expected, match="no trigger event by"):
        sensor.resume_execution("__fail__", {}, {"task_state_store": store})
