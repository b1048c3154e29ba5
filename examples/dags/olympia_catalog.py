"""Example DAGs: apply the catalog spec, react to new versions, export, expire, roll back.

Connection: ``olympia_default`` (type ``olympia``), e.g.
``AIRFLOW_CONN_OLYMPIA_DEFAULT='{"conn_type": "olympia", "host": "s3://bucket/catalog",
"login": "...", "password": "...", "extra": {"storage_options": {"endpoint_url": "..."}}}'``.
Airflow Variables: ``olympia_spec_dir`` (default: examples/catalog next to this folder),
``olympia_export_target`` (default: a folder under /tmp).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import yaml
from airflow.sdk import DAG

from olympia_provider.operators.olympia import (
    OlympiaApplyOperator,
    OlympiaExpireOperator,
    OlympiaExportOperator,
    OlympiaRollbackOperator,
    OlympiaValidateOperator,
    catalog_asset,
    changes_alias,
)
from olympia_provider.sensors.olympia import OlympiaVersionSensor

EXAMPLES = Path(__file__).resolve().parents[1]
SPEC_DIR = "{{ var.value.get('olympia_spec_dir', '" + str(EXAMPLES / "catalog") + "') }}"
VARIABLES = yaml.safe_load((EXAMPLES / "vars.yaml").read_text())
START = datetime(2026, 1, 1)

with DAG("olympia_apply", schedule=None, start_date=START, catchup=False,
         tags=["olympia"], doc_md="Validate and plan the spec, then apply it as one version."):
    validate = OlympiaValidateOperator(task_id="validate", spec_path=SPEC_DIR,
                                       variables=VARIABLES)
    # The plan travels in XCom, so the apply task may run on another worker.
    plan = OlympiaApplyOperator(task_id="plan", spec_path=SPEC_DIR, variables=VARIABLES,
                                plan_only=True)
    # The alias emits the catalog's Asset event only when a version is committed, so an
    # apply that changes nothing does not start the maintenance DAG.
    apply = OlympiaApplyOperator(task_id="apply", plan=plan.output, outlets=[changes_alias()])
    validate >> plan >> apply

# Scheduled on the catalog Asset; its own export commits a version too, so it has no
# outlets (it would trigger itself) and runs one at a time.
with DAG("olympia_maintenance", schedule=[catalog_asset()], start_date=START, catchup=False,
         max_active_runs=1, tags=["olympia"],
         doc_md="After each new version: export the latest one, then expire old ones."):
    export = OlympiaExportOperator(
        task_id="export", export_name="maintenance-{{ dag_run.run_after | ts_nodash }}",
        target_uri="{{ var.value.get('olympia_export_target', '/tmp/olympia-exports') }}"
                   "/{{ dag_run.run_after | ts_nodash }}",
        mode="full")
    expire = OlympiaExpireOperator(task_id="expire", keep_last=20, older_than="7d",
                                   grace="3d")
    export >> expire

with DAG("olympia_export_version", schedule=None, start_date=START, catchup=False,
         params={"version": 1}, tags=["olympia"],
         doc_md="Manual: wait (deferred) until the catalog reaches a version, then export it."):
    reached = OlympiaVersionSensor(task_id="wait_for_version",
                                   target_version="{{ params.version }}", deferrable=True,
                                   poke_interval=30, timeout=3600)
    reached >> OlympiaExportOperator(
        task_id="export", export_name="v{{ params.version }}-{{ dag_run.run_after | ts_nodash }}",
        version="{{ params.version }}",
        target_uri="{{ var.value.get('olympia_export_target', '/tmp/olympia-exports') }}"
                   "/v{{ params.version }}-{{ dag_run.run_after | ts_nodash }}",
        mode="full")

with DAG("olympia_rollback", schedule=None, start_date=START, catchup=False,
         tags=["olympia"], doc_md="Manual: roll the catalog back to the previous version."):
    OlympiaRollbackOperator(task_id="rollback", to_version="previous",
                            outlets=[catalog_asset()])
