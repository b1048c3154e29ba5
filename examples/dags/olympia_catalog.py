"""Example DAGs: apply the catalog spec, react to new versions and to one table's change,
export, expire, roll back.

Copy this file alone into your dags folder: it reads nothing from disk when parsed.

Connection ``olympia_default`` (type ``olympia``), e.g.
``AIRFLOW_CONN_OLYMPIA_DEFAULT='{"conn_type": "olympia", "host": "s3://bucket/catalog",
"login": "...", "password": "...", "extra": {"storage_options": {"endpoint_url": "..."}}}'``.
The DAGs are scheduled on that catalog's Assets, so this file reads the connection when it
is parsed; without it they wait on a placeholder catalog (``file:///opt/olympia/warehouse``).

Airflow Variables, read when the tasks run (defaults in brackets):
``olympia_spec_dir`` (``/opt/olympia/catalog``): the spec folder (the repository's
``examples/catalog`` to try it); ``olympia_finance_retention`` (``7y``): the spec's
``${var.finance_retention}``; ``olympia_export_target`` (``/tmp/olympia-exports``): where the
exports go.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowNotFoundException

from olympia_provider.assets import catalog_asset, changes_alias, object_asset
from olympia_provider.hooks.olympia import OlympiaHook
from olympia_provider.operators.olympia import (
    OlympiaApplyOperator,
    OlympiaExpireOperator,
    OlympiaExportOperator,
    OlympiaRollbackOperator,
    OlympiaValidateOperator,
)
from olympia_provider.sensors.olympia import OlympiaVersionSensor

try:
    CATALOG_URI = OlympiaHook().settings()[0]
except AirflowNotFoundException:  # no connection yet: the DAGs still load
    CATALOG_URI = "file:///opt/olympia/warehouse"
SPEC_DIR = "{{ var.value.get('olympia_spec_dir', '/opt/olympia/catalog') }}"
VARIABLES = {"finance_retention": "{{ var.value.get('olympia_finance_retention', '7y') }}"}
EXPORTS = "{{ var.value.get('olympia_export_target', '/tmp/olympia-exports') }}"
ORDERS = object_asset(CATALOG_URI, "sales.orders")
START = datetime(2026, 1, 1)

with DAG("olympia_apply", schedule=None, start_date=START, catchup=False,
         tags=["olympia"], doc_md="Validate and plan the spec, then apply it as one version."):
    validate = OlympiaValidateOperator(task_id="validate", spec_path=SPEC_DIR,
                                       variables=VARIABLES)
    # The plan travels in XCom, so the apply task may run on another worker.
    plan = OlympiaApplyOperator(task_id="plan", spec_path=SPEC_DIR, variables=VARIABLES,
                                plan_only=True)
    # The alias emits the catalog's Asset event only when a version is committed, so an
    # apply that changes nothing does not start the maintenance DAG; a change to the orders
    # table also gets its own event (olympia_orders_changed is scheduled on it).
    apply = OlympiaApplyOperator(task_id="apply", plan=plan.output, outlets=[changes_alias()],
                                 object_events=["sales.orders"])
    validate >> plan >> apply

# Scheduled on the catalog Asset; its own export commits a version too, so it has no
# outlets (it would trigger itself) and runs one at a time.
with DAG("olympia_maintenance", schedule=[catalog_asset(CATALOG_URI)], start_date=START,
         catchup=False, max_active_runs=1, tags=["olympia"],
         doc_md="After each new version: export the latest one, then expire old ones."):
    export = OlympiaExportOperator(
        task_id="export", export_name="maintenance-{{ dag_run.run_after | ts_nodash }}",
        target_uri=EXPORTS + "/{{ dag_run.run_after | ts_nodash }}", mode="full")
    # In-process Spark suits a small catalog; spark_submit=True (with spark_master) sends
    # the job to a cluster instead.
    expire = OlympiaExpireOperator(task_id="expire", keep_last=20, older_than="7d",
                                   grace="3d")
    export >> expire

with DAG("olympia_orders_changed", schedule=[ORDERS],
         start_date=START, catchup=False, tags=["olympia"],
         doc_md="Runs when an apply changes the sales.orders table."):

    @task
    def report(*, triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """The version and action of each change that started this run."""
        return [dict(event.extra) for event in triggering_asset_events[ORDERS]]

    report()

with DAG("olympia_export_version", schedule=None, start_date=START, catchup=False,
         params={"version": 1}, tags=["olympia"],
         doc_md="Manual: wait (deferred) until the catalog reaches a version, then export it."):
    reached = OlympiaVersionSensor(task_id="wait_for_version",
                                   target_version="{{ params.version }}", deferrable=True,
                                   poke_interval=10, timeout=3600)
    reached >> OlympiaExportOperator(
        task_id="export", export_name="v{{ params.version }}-{{ dag_run.run_after | ts_nodash }}",
        version="{{ params.version }}",
        target_uri=EXPORTS + "/v{{ params.version }}-{{ dag_run.run_after | ts_nodash }}",
        mode="full")

with DAG("olympia_rollback", schedule=None, start_date=START, catchup=False,
         tags=["olympia"], doc_md="Manual: roll the catalog back to the previous version."):
    OlympiaRollbackOperator(task_id="rollback", to_version="previous",
                            outlets=[catalog_asset(CATALOG_URI)])
