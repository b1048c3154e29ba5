"""The task context Olympia's operators read, as Airflow gives it to ``execute``."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from airflow.sdk import DAG
from airflow.sdk.execution_time.context import OutletEventAccessors


def task_context(dag_id: str, run_id: str = "manual__1", *, triggered_by: str | None = None,
                 started: datetime | None = None) -> dict[str, Any]:
    """Airflow's own outlet event recorder, the DAG, the run id, and the DAG run: when it
    started (an abort looks for a commit since then) and who triggered it (None: no
    person)."""
    return {"outlet_events": OutletEventAccessors(), "dag": DAG(dag_id), "run_id": run_id,
            "dag_run": SimpleNamespace(start_date=started or datetime.now(UTC),
                                       triggering_user_name=triggered_by)}
