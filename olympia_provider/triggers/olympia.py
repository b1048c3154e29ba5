"""Triggers: wait asynchronously (in the triggerer) for a catalog condition.

This module imports nothing of Olympia at load time: the triggerer loads it on its event
loop, and the catalog library (pyarrow, fsspec) is imported in a worker thread instead.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


def utc_text(epoch: float) -> str:
    """An epoch time as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _event(**payload: Any) -> TriggerEvent:
    return TriggerEvent(payload)  # type: ignore[no-untyped-call]  # untyped in Airflow


class OlympiaCatalogTrigger(BaseTrigger):
    """Polls the catalog until ``condition`` holds; yields the version, or a timeout event.

    ``timeout`` becomes an absolute ``deadline`` (epoch seconds) when the trigger is made, and
    the deadline is what is serialised, so a triggerer restart does not restart the clock.
    Transient storage errors are retried until the deadline; other errors end the wait.
    """

    def __init__(self, olympia_conn_id: str, condition: dict[str, Any],
                 poke_interval: float = 30.0, timeout: float | None = None,
                 deadline: float | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # untyped in Airflow
        self.olympia_conn_id = olympia_conn_id
        self.condition = dict(condition)
        self.poke_interval = poke_interval
        if deadline is None and timeout is not None:
            deadline = time.time() + timeout
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("olympia_provider.triggers.olympia.OlympiaCatalogTrigger",
                {"olympia_conn_id": self.olympia_conn_id, "condition": self.condition,
                 "poke_interval": self.poke_interval, "deadline": self.deadline})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hooks, exceptions = await asyncio.to_thread(
            lambda: (importlib.import_module("olympia_provider.hooks.olympia"),
                     importlib.import_module("olympia.exceptions")))
        hook = hooks.OlympiaHook(self.olympia_conn_id)
        condition = hooks.Condition.from_dict(self.condition)
        while True:
            try:
                version = await hook.acheck(condition)
            except exceptions.TransientStorageError as exc:
                self.log.warning("Catalog check failed, will retry: %s", exc)
                version = None
            except Exception as exc:  # permanent: report it, do not crash the triggerer
                yield _event(status="error", message=f"{type(exc).__name__}: {exc}")
                return
            if version is not None:
                yield _event(status="success", version=version)
                return
            wait = self.poke_interval
            if self.deadline is not None:
                left = self.deadline - time.time()
                if left <= 0:
                    yield _event(status="timeout",
                                 message=f"condition not met by {utc_text(self.deadline)}")
                    return
                wait = min(wait, left)  # one last check at the deadline
            await asyncio.sleep(wait)
