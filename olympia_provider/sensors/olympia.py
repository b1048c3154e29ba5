"""Sensors: wait for a new catalog version, or for one object to be created or changed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from olympia.exceptions import OlympiaError, TransientStorageError
from olympia_provider.hooks.olympia import Condition, OlympiaHook
from olympia_provider.triggers.olympia import OlympiaCatalogTrigger

STATE_KEY = "olympia_condition"


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
        at once if it holds, else defer to the triggerer with the sensor's ``timeout`` as
        Airflow's trigger timeout (and the trigger's own deadline)."""
        self._condition = self._pinned(context)
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        self.defer(trigger=OlympiaCatalogTrigger(self.olympia_conn_id,
                                                 self._condition.to_dict(), self.poke_interval,
                                                 self.timeout),
                   method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

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
        if status == "timeout":  # like a poking sensor's timeout: failed, not retried
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(f"Olympia sensor timed out: {message}")
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
