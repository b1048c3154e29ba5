"""Triggers: wait asynchronously (in the triggerer) for a catalog condition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from olympia_provider.hooks.olympia import Condition, OlympiaHook


class OlympiaCatalogTrigger(BaseTrigger):
    """Polls the catalog until ``condition`` holds; yields the version, or a timeout event."""

    def __init__(self, olympia_conn_id: str, condition: dict[str, Any],
                 poke_interval: float = 30.0, timeout: float | None = None) -> None:
        super().__init__()
        self.olympia_conn_id = olympia_conn_id
        self.condition = dict(condition)
        self.poke_interval = poke_interval
        self.timeout = timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("olympia_provider.triggers.olympia.OlympiaCatalogTrigger",
                {"olympia_conn_id": self.olympia_conn_id, "condition": self.condition,
                 "poke_interval": self.poke_interval, "timeout": self.timeout})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = OlympiaHook(self.olympia_conn_id)
        condition = Condition(**self.condition)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            try:
                version = await hook.acheck(condition)
            except Exception as exc:  # report, do not crash the triggerer
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            if version is not None:
                yield TriggerEvent({"status": "success", "version": version})
                return
            if deadline is not None and time.monotonic() >= deadline:
                yield TriggerEvent({"status": "timeout", "message":
                                    f"condition not met within {self.timeout}s"})
                return
            await asyncio.sleep(self.poke_interval)
