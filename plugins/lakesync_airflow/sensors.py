"""The deferrable sensor that waits until the stream has applied every table past its handoff target."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, Context

from lakesync.errors import GapError
from lakesync_airflow.triggers import StreamCaughtUpTrigger


class StreamCaughtUpSensor(BaseSensorOperator):
    """Wait (deferred, in the triggerer) until ``targets`` (``{table: position key}``) are applied.

    ``targets`` is templated, so it can come from the handoff task's XCom."""

    template_fields: Sequence[str] = ("targets",)

    def __init__(self, *, pipeline: str, targets: dict[str, str] | str, poll_seconds: float = 5.0,
                 **kwargs: Any) -> None:
        kwargs.setdefault("timeout", 3600)
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.targets = targets
        self.poll_seconds = poll_seconds

    def execute(self, context: Context) -> dict[str, Any]:
        targets = dict(self.targets)  # type: ignore[arg-type]
        self.defer(
            trigger=StreamCaughtUpTrigger(self.pipeline, targets, poll_seconds=self.poll_seconds,
                                          deadline=time.time() + float(self.timeout)),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "caught_up":
            raise GapError(
                f"the stream of pipeline {self.pipeline!r} did not catch up within {self.timeout}s; "
                f"behind: {event.get('behind')}",
                hint="check the stream DAG's last runs and the relay (`lakesync status`)",
            )
        self.log.info("caught up: %s", event.get("applied"))
        return event
