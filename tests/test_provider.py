"""Provider units with real catalogs: hook settings, sensors (poke and deferral), triggers
under asyncio, operators' execute()."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)
from airflow_context import task_context
from conftest import Location
from s3server import Fault, FaultProxy

from olympia import Catalog, versions
from olympia.expire import ExpirePolicy, expire_local
from olympia_provider import get_provider_info
from olympia_provider.assets import catalog_asset, object_asset
from olympia_provider.hooks.olympia import Condition, OlympiaHook
from olympia_provider.operators.olympia import (
    OlympiaApplyOperator,
    OlympiaExpireOperator,
    OlympiaExportOperator,
    OlympiaRollbackOperator,
    OlympiaValidateOperator,
)
from olympia_provider.sensors.olympia import (
    TRIGGER_TIMEOUT_MARGIN,
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


def context(triggered_by: str | None = None) -> dict[str, Any]:
    return task_context("unit", triggered_by=triggered_by)


def alias_uris(ctx: dict[str, Any], alias: AssetAlias) -> set[str]:
    """The Assets an operator added events for under ``alias``."""
    return {e.dest_asset_key.uri for e in ctx["outlet_events"][alias].asset_alias_events}


async def first_event(trigger: OlympiaCatalogTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def test_provider_info_declares_connection_fields() -> None:
    info = get_provider_info()
    assert info["package-name"] == "olympia-catalog"
    (conn_type,) = info["connection-types"]
    assert conn_type["connection-type"] == "olympia"
    # one catalog URI field (Host), a placeholder for every field shown, the secret hidden
    assert set(conn_type["conn-fields"]) == {"storage_options", "spark_master", "rest_uri",
                                             "rest_warehouse"}
    behaviour = conn_type["ui-field-behaviour"]
    shown = {"host", "login", "password", *conn_type["conn-fields"]}
    assert shown - set(behaviour["hidden-fields"]) == set(behaviour["placeholders"])
    assert behaviour["relabeling"]["password"] == "Secret access key"
    assert conn_type["hook-class-name"] == "olympia_provider.hooks.olympia.OlympiaHook"
    assert info["asset-uris"] == [{"schemes": ["olympia"],
                                   "handler": "olympia_provider.assets.normalize_asset_uri"}]


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
    # Airflow's trigger timeout, a margin after the trigger's own deadline
    assert deferred.value.timeout == timedelta(seconds=30 + TRIGGER_TIMEOUT_MARGIN)
    assert trigger.deadline is not None and trigger.deadline - time.time() <= 30
    path, kwargs = trigger.serialize()
    assert path == "olympia_provider.triggers.olympia.OlympiaCatalogTrigger"
    rebuilt = OlympiaCatalogTrigger(**json.loads(json.dumps(kwargs)))
    catalog.create_table("s", "t", columns=COLS)
    payload = asyncio.run(first_event(rebuilt))
    assert payload == {"status": "success", "version": 2}
    assert sensor.execute_complete({}, payload) == 2


def test_trigger_timeout_and_soft_fail(conn: tuple[str, Catalog]) -> None:
    conn_id, _ = conn
    trigger = OlympiaCatalogTrigger(conn_id, Condition(after_version=99).to_dict(),
                                    poke_interval=0.05, timeout=0.2)
    payload = asyncio.run(first_event(trigger))
    assert payload["status"] == "timeout"
    soft = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id, soft_fail=True)
    with pytest.raises(AirflowSkipException):
        soft.execute_complete({}, payload)
    hard = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id)
    with pytest.raises(AirflowSensorTimeout, match="timed out"):  # failed, not retried
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


class TaskStateStore(dict):  # type: ignore[type-arg]
    """The get/set of Airflow's per-task-instance state store (the e2e test uses the real
    one, through a rescheduled sensor)."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


def test_sensor_baseline_is_the_version_seen_when_the_task_first_ran(
        conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = conn
    store = TaskStateStore()
    first = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id)
    first._condition = first._pinned({"task_state_store": store})
    assert first._condition.after_version == catalog.version
    assert not first.poke({}).is_done
    catalog.create_table("s", "t", columns=COLS)
    # a rescheduled or retried sensor is a new instance: it takes the baseline from the store
    again = OlympiaVersionSensor(task_id="w", olympia_conn_id=conn_id, timeout=5,
                                 poke_interval=0.05)
    assert again.execute({"task_state_store": store}) == catalog.version
    new_object = OlympiaObjectChangedSensor(task_id="o", olympia_conn_id=conn_id, kind="view",
                                            namespace="s", name="v", poke_interval=0.05)
    new_object._condition = new_object._pinned({})
    assert new_object._condition.before == ""  # absent at the baseline
    assert not new_object.poke({}).is_done
    catalog.create_view("s", "v", sql="SELECT 1")
    assert new_object.poke({}).is_done


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
    assert asyncio.run(first_event(rebuilt)) == {"status": "success",
                                                  "version": catalog.version}


def test_trigger_deadline_survives_reserialisation(conn: tuple[str, Catalog]) -> None:
    conn_id, _ = conn
    trigger = OlympiaCatalogTrigger(conn_id, Condition(after_version=99).to_dict(),
                                    poke_interval=600, timeout=0.3)
    time.sleep(0.3)  # a triggerer restart re-creates the trigger from its kwargs
    rebuilt = OlympiaCatalogTrigger(**json.loads(json.dumps(trigger.serialize()[1])))
    assert rebuilt.deadline == trigger.deadline
    # at its first check: a trigger that waited even one poke interval would not answer
    event = asyncio.run(asyncio.wait_for(first_event(rebuilt), 120))
    assert event["status"] == "timeout"


# S3 errors answered by the proxy. s3fs reads an object with a HEAD then a GET; a HEAD's error
# has no body, so s3fs sees only its status.
REQUEST_TIMEOUT = Fault(frozenset({"GET"}), 400, "RequestTimeout")
SLOW_DOWN = Fault(frozenset({"GET", "HEAD"}), 503, "SlowDown")  # throttling: transient


@pytest.fixture
def flaky_conn(s3_server: Any, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[tuple[str, Catalog, FaultProxy]]:
    """A connection reaching a catalog on the real S3 server through a FaultProxy."""
    catalog = Catalog.create(f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}",
                             s3_server.storage_options)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        options = proxy.storage_options(s3_server.storage_options)
        monkeypatch.setenv("AIRFLOW_CONN_OLYMPIA_FLAKY", json.dumps({
            "conn_type": "olympia", "host": catalog.uri,
            "extra": {"storage_options": options}}))
        yield "olympia_flaky", catalog, proxy


@pytest.mark.s3
@pytest.mark.parametrize("failure", [REQUEST_TIMEOUT, SLOW_DOWN])
def test_trigger_retries_transient_storage_errors(
        flaky_conn: tuple[str, Catalog, FaultProxy], failure: Fault) -> None:
    conn_id, catalog, proxy = flaky_conn
    trigger = OlympiaCatalogTrigger(conn_id, Condition(after_version=0).to_dict(),
                                    poke_interval=0.1, timeout=120)

    async def failing_then_committed() -> dict[str, Any]:
        proxy.fault = failure
        waiting = asyncio.ensure_future(first_event(trigger))
        # each check fails after the storage's own retries: wait for a few of them
        while proxy.refused < 20 and not waiting.done():
            await asyncio.sleep(0.1)
        assert not waiting.done(), waiting.result()  # a transient error does not end it
        proxy.fault = None
        await asyncio.to_thread(catalog.create_namespace, "n")  # straight to the server
        return await asyncio.wait_for(waiting, 60)

    assert asyncio.run(failing_then_committed()) == {"status": "success", "version": 1}


def test_trigger_fails_at_once_on_a_permanent_error(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_OLYMPIA_NOWHERE", json.dumps(
        {"conn_type": "olympia", "host": str(tmp_path / "no-catalog")}))
    trigger = OlympiaCatalogTrigger("olympia_nowhere", Condition(after_version=0).to_dict(),
                                    poke_interval=600, timeout=3600)
    # not retried: a retry would wait a whole poke interval
    payload = asyncio.run(asyncio.wait_for(first_event(trigger), 120))
    assert payload["status"] == "error" and "no-catalog" in payload["message"]
    with pytest.raises(AirflowException, match="no-catalog"):
        OlympiaVersionSensor(task_id="w", olympia_conn_id="olympia_nowhere").execute_complete(
            {}, payload)


def test_validate_operator(tmp_path: Path) -> None:
    spec = str(ROOT / "examples" / "catalog")
    summary = OlympiaValidateOperator(task_id="validate", spec_path=spec,
                                      variables={"finance_retention": "7y"}).execute(context())
    assert "4 namespaces" in summary
    (tmp_path / "bad.yaml").write_text("namespace: s\ntables:\n  t:\n    colums: []\n")
    with pytest.raises(AirflowException, match=r"bad\.yaml:\d+:\d+"):
        OlympiaValidateOperator(task_id="bad", spec_path=str(tmp_path)).execute(context())


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
                                    outlets=[catalog_asset(catalog.uri), alias],
                                    object_events=["sales.orders", "finance"])
    ctx = context()
    result = apply_op.execute(ctx)
    assert result["version"] == 2 and "sales.orders" in result["changed_objects"]
    events = ctx["outlet_events"]
    assert events[catalog_asset(catalog.uri)].extra == {"version": 2,
                                                         "changes": len(result["changes"])}
    # the catalog's Asset and the announced objects' only, each with a small extra
    orders = object_asset(catalog.uri, "sales.orders")
    assert alias_uris(ctx, alias) == {catalog_asset(catalog.uri).uri, orders.uri,
                                      object_asset(catalog.uri, "finance").uri}
    extras = {e.dest_asset_key.uri: e.extra for e in events[alias].asset_alias_events}
    assert extras[orders.uri] == {"version": 2, "action": "create"}
    again = OlympiaApplyOperator(task_id="again", olympia_conn_id=conn_id,
                                 spec_path=str(ROOT / "examples" / "catalog"),
                                 variables=variables, outlets=[alias])
    ctx = context()
    assert again.execute(ctx)["changes"] == []  # no-op when the plan is empty
    assert alias_uris(ctx, alias) == set()  # and no Asset event: nothing committed
    stale = OlympiaApplyOperator(task_id="stale", olympia_conn_id=conn_id,
                                 plan_path=planned["plan_path"], expected_base_version=1)
    with pytest.raises(AirflowException, match="stale"):
        stale.execute(context())


def test_apply_operator_takes_the_plan_from_xcom(conn: tuple[str, Catalog]) -> None:
    """Without ``plan_out`` the plan itself is the plan task's XCom: any worker applies it."""
    conn_id, catalog = conn
    spec = str(ROOT / "examples" / "catalog")
    planned = OlympiaApplyOperator(task_id="plan", olympia_conn_id=conn_id, plan_only=True,
                                   spec_path=spec, variables={"finance_retention": "7y"}
                                   ).execute(context())
    assert planned["has_changes"] and planned["summary"]["create"] > 0
    through_xcom = json.loads(json.dumps(planned))  # what XCom stores and hands back
    result = OlympiaApplyOperator(task_id="apply", olympia_conn_id=conn_id,
                                  plan=through_xcom).execute(context())
    assert result["version"] == 2 and catalog.refresh() == 2
    edited = {**through_xcom, "base_version": 0}
    with pytest.raises(AirflowException, match="modified after it was saved"):
        OlympiaApplyOperator(task_id="edited", olympia_conn_id=conn_id,
                             plan=edited).execute(context())
    with pytest.raises(ValueError, match="exactly one"):
        OlympiaApplyOperator(task_id="both", spec_path=spec, plan=through_xcom)
    _uri, options = OlympiaHook(conn_id).settings()
    if "secret" in options:  # S3: the connection's secret is in no result
        assert options["secret"] not in json.dumps([planned, result])


def test_apply_operator_applies_only_its_targets(conn: tuple[str, Catalog]) -> None:
    """``targets`` limit the plan as ``olympia apply --target`` does; a bad one is refused."""
    conn_id, catalog = conn
    spec = str(ROOT / "examples" / "catalog")
    variables = {"finance_retention": "7y"}
    result = OlympiaApplyOperator(task_id="one", olympia_conn_id=conn_id, spec_path=spec,
                                  variables=variables, targets=["table.sales.orders"]
                                  ).execute(context())
    assert result["version"] == 2
    assert {c["name"] for c in result["changes"]} == {"sales", "sales.orders"}
    assert catalog.refresh() == 2 and catalog.list_tables("sales") == ["orders"]
    assert not catalog.namespace_exists("finance")
    with pytest.raises(AirflowException, match="--target table.sales.ordrs"):
        OlympiaApplyOperator(task_id="typo", olympia_conn_id=conn_id, spec_path=spec,
                             variables=variables, targets=["table.sales.ordrs"]
                             ).execute(context())
    with pytest.raises(ValueError, match="saved plan keeps"):
        OlympiaApplyOperator(task_id="saved", plan_path="p.json", targets=["namespace.sales"])
    with pytest.raises(ValueError, match="lists"):
        OlympiaApplyOperator(task_id="str", spec_path=spec, targets="namespace.sales")


def test_rollback_and_export_operators(conn: tuple[str, Catalog], location: Location) -> None:
    conn_id, catalog = conn
    catalog.create_table("s", "t", columns=COLS)
    with pytest.raises(AirflowException, match=r"allow-destructive \(allow_destructive=True"):
        OlympiaRollbackOperator(task_id="rb0", olympia_conn_id=conn_id).execute(context())
    dry = OlympiaRollbackOperator(task_id="dry", olympia_conn_id=conn_id,
                                  dry_run=True).execute(context())
    assert dry["dry_run"] and dry["version"] is None and catalog.refresh() == 2
    assert [(c["action"], c["type"], c["name"]) for c in dry["changes"]] == [
        ("drop", "table", "s.t")]
    result = OlympiaRollbackOperator(task_id="rb", olympia_conn_id=conn_id,
                                     allow_destructive=True).execute(context("alice"))
    assert result["version"] == 3 and catalog.refresh() == 3
    assert versions.history(catalog, limit=1)[0].info == {  # who: the DAG, and who triggered
        "user": "airflow:unit", "airflow_dag": "unit", "airflow_run": "manual__1",
        "airflow_task": "rb", "airflow_triggered_by": "alice"}
    assert json.loads(json.dumps(result)) == result  # what XCom stores
    assert catalog.list_tables("s") == []
    target = location.sub("exports/e1")
    record = OlympiaExportOperator(task_id="ex", olympia_conn_id=conn_id, export_name="e1",
                                   target_uri=target.uri, mode="full",
                                   user="unit-bot").execute(context())
    assert record["name"] == "e1" and record["committed_version"] == 4
    assert versions.history(catalog, limit=1)[0].info["user"] == "unit-bot"
    assert "secret" not in json.dumps(record)
    with pytest.raises(AirflowException, match="already exists"):
        OlympiaExportOperator(task_id="ex2", olympia_conn_id=conn_id, export_name="e1",
                              target_uri=target.uri).execute(context())


def test_the_rollback_operator_never_drops_protected_objects(conn: tuple[str, Catalog],
                                                             ) -> None:
    conn_id, catalog = conn
    catalog.create_table("s", "keep", columns=COLS, protected=True)
    with pytest.raises(AirflowException, match="s.keep: table s.keep is protected"):
        OlympiaRollbackOperator(task_id="rb", olympia_conn_id=conn_id, to_version=1,
                                allow_destructive=True).execute(context())
    assert catalog.refresh() == 2 and catalog.list_tables("s") == ["keep"]


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
