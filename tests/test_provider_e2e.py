"""End to end: Airflow 3 runs the example DAGs (`airflow dags test`) on a SQLite metadata DB."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from olympia import Catalog, versions
from olympia.spec import load_spec

pytestmark = pytest.mark.airflow
ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
EXAMPLE_VARS = yaml.safe_load((ROOT / "examples" / "vars.yaml").read_text())
EXAMPLE_NAMESPACES = sorted(load_spec(ROOT / "examples" / "catalog", EXAMPLE_VARS).namespaces)


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("airflow_home")
    warehouse = home / "warehouse"
    Catalog.create(str(warehouse))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "examples" / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_CONN_OLYMPIA_DEFAULT": json.dumps({
            "conn_type": "olympia", "host": str(warehouse),
            "extra": {"storage_options": {"max_concurrency": 4}, "spark_master": "local[2]"}}),
        "AIRFLOW_VAR_OLYMPIA_EXPORT_TARGET": str(home / "exports"),
        "WAREHOUSE": str(warehouse),
    })
    run(env, "db", "migrate")
    yield env


def run(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True,
                          timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{output[-4000:]}"
    return output


def test_provider_is_discovered(airflow_env: dict[str, str]) -> None:
    info = run(airflow_env, "providers", "get", "olympia-catalog", "--output", "json")
    assert "olympia-catalog" in info
    hooks = run(airflow_env, "providers", "hooks", "--output", "json")
    assert "olympia_provider.hooks.olympia.OlympiaHook" in hooks


def test_example_dags_end_to_end(airflow_env: dict[str, str]) -> None:
    warehouse = airflow_env["WAREHOUSE"]
    run(airflow_env, "dags", "test", "olympia_apply")
    catalog = Catalog.open(warehouse)
    assert catalog.version == 1
    assert catalog.list_namespaces() == EXAMPLE_NAMESPACES
    info = versions.history(catalog, limit=1)[0].info
    assert info["airflow_dag"] == "olympia_apply"

    run(airflow_env, "dags", "test", "olympia_maintenance")
    catalog.refresh()
    assert catalog.version == 2  # the export's bookkeeping version
    (name,) = catalog.catalog_def.exported_snapshots
    assert name.startswith("maintenance-") and catalog.catalog_def.exports[name].version == 1
    exported = Catalog.open(catalog.catalog_def.exports[name].target)
    assert exported.list_namespaces() == EXAMPLE_NAMESPACES

    run(airflow_env, "dags", "test", "olympia_export_version")  # deferrable sensor inline
    catalog.refresh()
    assert catalog.version == 3
    (name,) = set(catalog.catalog_def.exported_snapshots) - {name}
    assert name.startswith("v1-") and catalog.catalog_def.exports[name].version == 1

    run(airflow_env, "dags", "test", "olympia_rollback")
    catalog.refresh()
    assert catalog.version == 4 and versions.history(catalog, limit=1)[0].is_rollback

    run(airflow_env, "dags", "test", "olympia_apply")  # nothing to change: no new version
    assert catalog.refresh() == 4

    db = sqlite3.connect(Path(airflow_env["AIRFLOW_HOME"]) / "airflow.db")
    uris = [row[0] for row in db.execute(
        "SELECT asset.uri FROM asset_event JOIN asset ON asset.id = asset_event.asset_id")]
    # the catalog Asset: the first apply and the rollback; not the no-change apply, and
    # not the exports (maintenance is scheduled on that Asset and must not retrigger itself)
    assert uris.count("olympia://olympia-default/") == 2
    assert "olympia://olympia-default/sales.orders" in uris  # one event per changed object
