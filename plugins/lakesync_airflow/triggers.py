"""The trigger behind the caught-up sensor: polls the applied positions in the triggerer, not in a worker slot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class StreamCaughtUpTrigger(BaseTrigger):
    """Fires once every table's applied position reaches its target, or with an error at the deadline."""

    def __init__(self, pipeline: str, targets: dict[str, str], *, poll_seconds: float = 5.0,
                 deadline: float | None = None) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.targets = dict(targets)
        self.poll_seconds = poll_seconds
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"pipeline": self.pipeline, "targets": self.targets, "poll_seconds": self.poll_seconds,
             "deadline": self.deadline},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from lakesync.core.config import load_pipeline
        from lakesync_airflow.applied import applied_positions, lagging

        pipeline = load_pipeline(self.pipeline)
        while True:
            applied = await asyncio.to_thread(applied_positions, pipeline, list(self.targets))
            behind = lagging(applied, self.targets)
            if not behind:
                yield TriggerEvent({"status": "caught_up", "applied": applied})
                return
            if self.deadline is not None and time.time() > self.deadline:
                yield TriggerEvent({"status": "timeout", "applied": applied, "behind": behind})
                return
            await asyncio.sleep(self.poll_seconds)
