"""The deferrable sensor that waits until the stream has applied every table past its handoff target."""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import BaseSensorOperator, Context

from lakesync.core.errors import GapError
from lakesync_airflow.triggers import StreamCaughtUpTrigger


class StreamCaughtUpSensor(BaseSensorOperator):
    """Wait (deferred, in the triggerer) until the targets (``{table: position key}``) are applied.

    The targets are ``targets``, or the XCom of the task ``targets_from`` (the handoff), pulled as the
    dict it is: a Jinja template would render it to a string."""

    def __init__(self, *, pipeline: str, targets: dict[str, str] | None = None, targets_from: str | None = None,
                 poll_seconds: float = 5.0, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", 3600)
        super().__init__(**kwargs)
        if (targets is None) == (targets_from is None):
            raise ValueError("give exactly one of targets and targets_from")
        self.pipeline = pipeline
        self.targets = targets
        self.targets_from = targets_from
        self.poll_seconds = poll_seconds

    def execute(self, context: Context) -> dict[str, Any]:
        targets = self.targets if self.targets is not None else context["ti"].xcom_pull(task_ids=self.targets_from)
        targets = dict(targets or {})
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
