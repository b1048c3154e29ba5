"""Provider units with real catalogs: hook settings, sensors (poke and deferral), triggers
under asyncio, operators' execute()."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Asset, AssetAlias
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowSkipException,
    TaskDeferred,
)
from conftest import Location

from olympia import Catalog
from olympia.expire import ExpirePolicy, expire_local
from olympia_provider import get_provider_info
from olympia_provider.hooks.olympia import Condition, OlympiaHook
from olympia_provider.operators.olympia import (
    OlympiaApplyOperator,
    OlympiaExpireOperator,
    OlympiaExportOperator,
    OlympiaRollbackOperator,
)
from olympia_provider.sensors.olympia import (
    OlympiaObjectChangedSensor,
    OlympiaVersionSensor,
)
from olympia_provider.triggers.olympia import OlympiaCatalogTrigger

pytestmark = pytest.mark.airflow
ROOT = Path(__file__).resolve().parents[1]
COLS = [{"name": "id", "type": "int8"}]


@pytest.fixture
def conn(location: Location, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Catalog]:
    """An olympia connection (from an AIRFLOW_CONN_ JSON value) to a fresh catalog."""
    if location.kind == "memory":
        pytest.skip("operators reopen the catalog from the connection: disk or S3 only")
    catalog = Catalog.create(location.uri, location.storage_options)
    catalog.create_namespace("s")
    options = dict(location.storage_options)
    key, secret = options.pop("key", None), options.pop("secret", None)
    monkeypatch.setenv("AIRFLOW_CONN_OLYMPIA_TEST", json.dumps({
        "conn_type": "olympia", "host": location.uri, "login": key, "password": secret,
        "extra": {"storage_options": options}}))
    return "olympia_test", catalog


class Events(defaultdict):  # type: ignore[type-arg]
    """Records what operators emit on ``context["outlet_events"]``."""

    def __init__(self) -> None:
        super().__init__(_Accessor)


class _Accessor:
    def __init__(self) -> None:
        self.extra: dict[str, Any] = {}
        self.added: list[tuple[Asset, dict[str, Any]]] = []

    def add(self, asset: Asset, extra: dict[str, Any]) -> None:
        self.added.append((asset, extra))


class FakeDag:
    dag_id = "unit"


def context() -> dict[str, Any]:
    return {"outlet_events": Events(), "dag": FakeDag(), "run_id": "manual__1"}


def test_provider_info_declares_connection_fields() -> None:
    info = get_provider_info()
    assert info["package-name"] == "olympia-catalog"
    (conn_type,) = info["connection-types"]
    assert conn_type["connection-type"] == "olympia"
    assert {"catalog_uri", "storage_options"} <= set(conn_type["conn-fields"])
    assert conn_type["hook-class-name"] == "olympia_provider.hooks.olympia.OlympiaHook"


def test_hook_reads_connection(conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = conn
    hook = OlympiaHook(conn_id)
    uri, _options = hook.settings()
    assert uri == catalog.uri or catalog.uri.endswith(uri.split("://")[-1])
    ok, message = hook.test_connection()
    assert ok and "version 1" in message
    assert asyncio.run(hook.aget_latest_version()) == 1


def test_hook_reports_bad_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_OLYMPIA_BAD", json.dumps({"conn_type": "olympia"}))
    ok, message = OlympiaHook("olympia_bad").test_connection()
    assert not ok and "names no catalog" in message


def test_version_sensor_poke(conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = conn
    sensor = OlympiaVersionSensor(task_id="wait", olympia_conn_id=conn_id, after_version=1)
    sensor._condition = sensor.condition(1)
    assert not sensor.poke({}).is_done
    catalog.create_table("s", "t", columns=COLS)
    result = sensor.poke({})
    assert result.is_done and result.xcom_value == 2
    target = OlympiaVersionSensor(task_id="t", olympia_conn_id=conn_id, target_version=5)
    target._condition = target.condition(1)
    assert not target.poke({}).is_done


def test_version_sensor_defers_with_serialisable_trigger(conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = conn
    sensor = OlympiaVersionSensor(task_id="wait", olympia_conn_id=conn_id, after_version=1,
                                  deferrable=True, poke_interval=0.05, timeout=30)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, OlympiaCatalogTrigger)
    path, kwargs = trigger.serialize()
    assert path == "olympia_provider.triggers.olympia.OlympiaCatalogTrigger"
    rebuilt = OlympiaCatalogTrigger(**json.loads(json.dumps(kwargs)))
    catalog.create_table("s", "t", columns=COLS)

    async def first_event() -> Any:
        async for event in rebuilt.run():
            return event.payload

    payload = asyncio.run(first_event())
    assert payload == {"status": "success", "version": 2}
    assert sensor.execute_complete({}, payload) == 2


def test_trigger_timeout_and_soft_fail(conn: tuple[str, Catalog]) -> None:
    conn_id, _ = conn
    trigger = OlympiaCatalogTrigger(conn_id, Condition(after_version=99).to_dict(),
                                    poke_interval=0.05, timeout=0.2)

    async def first_event() -> Any:
        async for event in trigger.run():
            return event.payload

    payload = asyncio.run(first_event())
    assert payload["status"] == "timeout"
    soft = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id, soft_fail=True)
    with pytest.raises(AirflowSkipException):
        soft.execute_complete({}, payload)
    hard = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id)
    with pytest.raises(AirflowException, match="timeout"):
        hard.execute_complete({}, payload)


def test_object_changed_sensor(conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = conn
    catalog.create_table("s", "t", columns=COLS)
    sensor = OlympiaObjectChangedSensor(task_id="w", olympia_conn_id=conn_id, kind="table",
                                        namespace="s", name="t", after_version=2)
    sensor._condition = sensor.condition(2)
    catalog.create_table("s", "other", columns=COLS)  # unrelated change
    assert not sensor.poke({}).is_done
    catalog.alter_table("s.t", set_properties={"k": "v"})
    assert sensor.poke({}).xcom_value == catalog.version
    created = OlympiaObjectChangedSensor(task_id="c", olympia_conn_id=conn_id, kind="view",
                                         namespace="s", name="v", after_version=2)
    created._condition = created.condition(2)
    assert not created.poke({}).is_done
    catalog.create_view("s", "v", sql="SELECT 1")
    assert created.poke({}).is_done


class FakeRun:
    def __init__(self, start_date: datetime) -> None:
        self.start_date = start_date


def test_sensor_baseline_is_the_version_latest_when_the_run_started(
        conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = conn
    started = datetime.now(UTC)
    time.sleep(0.01)
    catalog.create_table("s", "t", columns=COLS)
    # a rescheduled or retried sensor is a new instance with no XCom: same baseline each time
    for _ in range(2):
        sensor = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id, timeout=5,
                                      poke_interval=0.05)
        assert sensor.execute({"dag_run": FakeRun(started)}) == catalog.version
    later = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id)
    assert later._baseline({"dag_run": FakeRun(datetime.now(UTC))}) == catalog.version
    early = datetime(2000, 1, 1, tzinfo=UTC)  # before the catalog: all versions new
    assert later._baseline({"dag_run": FakeRun(early)}) == -1


def test_object_sensor_outlives_the_expiry_of_its_baseline(conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = conn
    catalog.create_table("s", "t", columns=COLS)
    baseline = catalog.version
    sensor = OlympiaObjectChangedSensor(task_id="w", olympia_conn_id=conn_id, kind="table",
                                        namespace="s", name="t", after_version=baseline,
                                        deferrable=True, poke_interval=0.05, timeout=30)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    _path, kwargs = deferred.value.trigger.serialize()
    catalog.create_table("s", "other", columns=COLS)  # unrelated change
    result = expire_local(catalog, ExpirePolicy(keep_last=1, older_than_ms=0, grace_ms=0,
                                                force=True), settle_ms=0)
    assert result.new_oldest_version > baseline  # the baseline version is gone
    rebuilt = OlympiaCatalogTrigger(**json.loads(json.dumps(kwargs)))
    assert Condition(**rebuilt.condition).check(catalog.uri, catalog.storage.options) is None
    catalog.alter_table("s.t", set_properties={"k": "v"})

    async def first_event() -> Any:
        async for event in rebuilt.run():
            return event.payload

    assert asyncio.run(first_event()) == {"status": "success", "version": catalog.version}


def test_trigger_deadline_survives_reserialisation(conn: tuple[str, Catalog]) -> None:
    conn_id, _ = conn
    trigger = OlympiaCatalogTrigger(conn_id, Condition(after_version=99).to_dict(),
                                    poke_interval=0.05, timeout=0.3)
    time.sleep(0.3)  # a triggerer restart re-creates the trigger from its kwargs
    rebuilt = OlympiaCatalogTrigger(**json.loads(json.dumps(trigger.serialize()[1])))
    assert rebuilt.deadline == trigger.deadline

    async def first_event() -> Any:
        async for event in rebuilt.run():
            return event.payload

    assert asyncio.run(first_event())["status"] == "timeout"  # at its first check


def test_apply_operator_plan_only_then_apply(conn: tuple[str, Catalog], tmp_path: Path) -> None:
    conn_id, catalog = conn
    variables = {"finance_retention": "7y"}
    plan_op = OlympiaApplyOperator(task_id="plan", olympia_conn_id=conn_id, plan_only=True,
                                   spec_path=str(ROOT / "examples" / "catalog"),
                                   variables=variables, plan_out=str(tmp_path / "p.json"))
    planned = plan_op.execute(context())
    assert planned["has_changes"] and Path(planned["plan_path"]).exists()
    assert catalog.refresh() == 1  # planning writes nothing
    alias = AssetAlias("changes")
    apply_op = OlympiaApplyOperator(task_id="apply", olympia_conn_id=conn_id,
                                    plan_path=planned["plan_path"], expected_base_version=1,
                                    outlets=[Asset(name="cat", uri="olympia://cat/"), alias])
    ctx = context()
    result = apply_op.execute(ctx)
    assert result["version"] == 2 and "sales.orders" in result["changed_objects"]
    events = ctx["outlet_events"]
    assert events[Asset(name="cat", uri="olympia://cat/")].extra["version"] == 2
    assert {a.uri for a, _ in events[alias].added} >= {"olympia://olympia-test/",
                                                       "olympia://olympia-test/sales.orders"}
    again = OlympiaApplyOperator(task_id="again", olympia_conn_id=conn_id,
                                 spec_path=str(ROOT / "examples" / "catalog"),
                                 variables=variables, outlets=[alias])
    ctx = context()
    assert again.execute(ctx)["changes"] == []  # no-op when the plan is empty
    assert ctx["outlet_events"][alias].added == []  # and no Asset event: nothing committed
    stale = OlympiaApplyOperator(task_id="stale", olympia_conn_id=conn_id,
                                 plan_path=planned["plan_path"], expected_base_version=1)
    with pytest.raises(AirflowException, match="stale"):
        stale.execute(context())


def test_rollback_and_export_operators(conn: tuple[str, Catalog], location: Location) -> None:
    conn_id, catalog = conn
    catalog.create_table("s", "t", columns=COLS)
    version = OlympiaRollbackOperator(task_id="rb", olympia_conn_id=conn_id).execute(context())
    assert version == 3 and catalog.refresh() == 3
    assert catalog.list_tables("s") == []
    target = location.sub("exports/e1")
    record = OlympiaExportOperator(task_id="ex", olympia_conn_id=conn_id, export_name="e1",
                                   target_uri=target.uri, mode="full").execute(context())
    assert record["name"] == "e1" and record["committed_version"] == 4
    assert "secret" not in json.dumps(record)
    with pytest.raises(AirflowException, match="already exists"):
        OlympiaExportOperator(task_id="ex2", olympia_conn_id=conn_id, export_name="e1",
                              target_uri=target.uri).execute(context())


def test_expire_operator_runs_the_spark_job(conn: tuple[str, Catalog], spark: Any) -> None:
    conn_id, catalog = conn
    for i in range(4):
        catalog.create_table("s", f"t{i}", columns=COLS)
    before = {f.path for f in catalog.storage.list()}
    time.sleep(1.2)  # every file older than the 1s grace (storage mtimes may be whole seconds)
    settings = {"keep_last": 2, "older_than": "0s", "grace": "1s", "force": True}
    dry = OlympiaExpireOperator(task_id="dry", olympia_conn_id=conn_id, dry_run=True,
                                **settings).execute(context())
    assert dry["dry_run"] and dry["new_oldest_version"] == 4
    assert {f.path for f in catalog.storage.list()} == before  # a dry run deletes nothing
    result = OlympiaExpireOperator(task_id="expire", olympia_conn_id=conn_id,
                                   **settings).execute(context())
    assert result["engine"] == "spark" and result["versions_expired"] == 4
    assert result["files_deleted"] > 0 and "olympia-secret" not in json.dumps(result)
    assert catalog.files.oldest_version() == 4
    assert catalog.at_version(4).list_tables("s") == ["t0", "t1", "t2"]
    assert Catalog.open(catalog.uri, catalog.storage.options).list_tables("s") == [
        "t0", "t1", "t2", "t3"]
    with pytest.raises(AirflowException, match="safety minimum"):
        OlympiaExpireOperator(task_id="unsafe", olympia_conn_id=conn_id,
                              grace="1s").execute(context())
