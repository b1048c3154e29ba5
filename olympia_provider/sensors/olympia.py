"""Sensors: wait for a new catalog version, or for one object to be created or changed."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NoReturn

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from olympia.exceptions import OlympiaError, TransientStorageError
from olympia_provider.hooks.olympia import Condition, OlympiaHook
from olympia_provider.triggers.olympia import OlympiaCatalogTrigger, utc_text

STATE_KEY = "olympia_condition"
DEADLINE_KEY = "olympia_deadline"
TRIGGER_TIMEOUT_MARGIN = 60.0  # seconds between the trigger's deadline and Airflow's


class _CatalogSensor(BaseSensorOperator):
    """Shared machinery: baseline version, poke mode, deferral and its completion.

    ``deferrable`` defaults to Airflow's ``[operators] default_deferrable``.
    """

    def __init__(self, *, olympia_conn_id: str = OlympiaHook.default_conn_name,
                 after_version: int | None = None,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable",
                                                    fallback=False),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.olympia_conn_id = olympia_conn_id
        self.after_version = after_version
        self.deferrable = deferrable

    def condition(self, baseline: int) -> Condition:
        raise NotImplementedError

    def _pinned(self, context: Context) -> Condition:
        """The condition, fixed when the task first runs: its baseline (``after_version``,
        else the latest version then) and, for an object, its definition at the baseline.
        It is kept in the task state store (Airflow 3.3), so reschedules and retries reuse it
        without reading the baseline version again (expiry may have removed it meanwhile)."""
        store = context.get("task_state_store")
        saved = store.get(STATE_KEY) if store is not None else None
        if isinstance(saved, dict):
            return Condition.from_dict(saved)
        hook = OlympiaHook(self.olympia_conn_id)
        try:
            catalog = hook.get_catalog()
            baseline = (catalog.version if self.after_version is None
                        else int(self.after_version))
            condition = self.condition(baseline).pinned(catalog)
        except OlympiaError as exc:
            raise AirflowException(f"Olympia sensor baseline: {exc}") from exc
        if store is not None:
            store.set(STATE_KEY, condition.to_dict())
        return condition

    def execute(self, context: Context) -> Any:
        """Poke (or reschedule) until the condition holds; deferrable, check once and return
        at once if it holds, else defer to the triggerer.

        The trigger reports the timeout itself at its deadline (``timeout`` from now).
        Airflow's own trigger timeout, for when no triggerer runs the trigger, is set
        :data:`TRIGGER_TIMEOUT_MARGIN` later: the trigger's event must win the race, because
        Airflow 3.3 hands its own timeout to the task as an unspecified deferral error, which
        Airflow would retry. :meth:`resume_execution` still turns that one into a timeout."""
        self._condition = self._pinned(context)
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        deadline = time.time() + self.timeout
        store = context.get("task_state_store")
        if store is not None:
            store.set(DEADLINE_KEY, deadline)
        self.defer(trigger=OlympiaCatalogTrigger(self.olympia_conn_id,
                                                 self._condition.to_dict(), self.poke_interval,
                                                 deadline=deadline),
                   method_name="execute_complete",
                   timeout=timedelta(seconds=self.timeout + TRIGGER_TIMEOUT_MARGIN))

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None,
                         context: Context) -> Any:
        """As Airflow's, except that a task failed by Airflow after the deadline (the
        trigger's event did not arrive in time) times out like the trigger's own event."""
        store = context.get("task_state_store")
        deadline = store.get(DEADLINE_KEY) if store is not None else None
        if (next_method == TRIGGER_FAIL_REPR and isinstance(deadline, int | float)
                and time.time() >= deadline):
            self._timed_out(f"no trigger event by {utc_text(deadline)}")
        return super().resume_execution(next_method, next_kwargs, context)

    def _timed_out(self, message: str) -> NoReturn:
        """Like a poking sensor's timeout: failed without retries, or skipped (soft_fail)."""
        if self.soft_fail:
            raise AirflowSkipException(message)
        raise AirflowSensorTimeout(f"Olympia sensor timed out: {message}")

    def poke(self, context: Context) -> PokeReturnValue:
        try:
            version = OlympiaHook(self.olympia_conn_id).check(self._condition)
        except TransientStorageError as exc:  # the sensor's timeout bounds the retries
            self.log.warning("Catalog check failed, will retry: %s", exc)
            version = None
        if version is not None:
            self.log.info("Catalog condition met at version %s", version)
        return PokeReturnValue(is_done=version is not None, xcom_value=version)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> int:
        status = event.get("status")
        if status == "success":
            self.log.info("Catalog condition met at version %s", event["version"])
            return int(event["version"])
        message = event.get("message", "unknown trigger failure")
        if status == "timeout":
            self._timed_out(message)
        raise AirflowException(f"Olympia sensor {status}: {message}")


class OlympiaVersionSensor(_CatalogSensor):
    """Waits until the latest version exceeds ``after_version`` (default: the version seen
    when the task first ran), or reaches ``target_version``. Returns the version (XCom)."""

    template_fields: Sequence[str] = ("after_version", "target_version")

    def __init__(self, *, target_version: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target_version = target_version

    def condition(self, baseline: int) -> Condition:
        target = None if self.target_version is None else int(self.target_version)
        return Condition(after_version=baseline, target_version=target)


class OlympiaObjectChangedSensor(_CatalogSensor):
    """Waits until a namespace, table or view is created, or its definition changes, after
    ``after_version`` (default: the version seen when the task first ran)."""

    template_fields: Sequence[str] = ("namespace", "name", "after_version")

    def __init__(self, *, kind: str, namespace: str, name: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if kind not in ("namespace", "table", "view"):
            raise ValueError(f"kind must be namespace, table or view, not {kind!r}")
        self.kind = kind
        self.namespace = namespace
        self.name = name

    def condition(self, baseline: int) -> Condition:
        return Condition(after_version=baseline, kind=self.kind, namespace=self.namespace,
                         name=self.name)
