"""The health check task: fails, through Airflow's own machinery, when a table is stopped or lags too far, or
when the relay has fallen silent (lag: what the stream has not applied; a quiet, caught-up table has none), or
when the binlog the relay needs is purged from the source (it warns in its log while that binlog nears expiry).

Airflow is what pages people (failure e-mails, ``on_failure_callback``, notifiers, a cluster policy that
adds one to every task), so an alert must be a failed task, not only a colour in a page. The check reads
what ``lakesync status`` reads (state files, Delta logs, the relay's offsets topic, the source's binlog list:
no table scan) and
judges it with :func:`lakesync.monitoring.attention.attention`; its figures per table go to the log and to
XCom (``figures``) whether it passes or fails.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from lakesync_airflow.hooks import LakesyncHook


def table_figures(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per table the numbers a dashboard or a downstream task wants (JSON-able, small)."""
    figures = {}
    for entry in status["tables"]:
        stream, load = entry.get("stream") or {}, entry.get("full_load") or {}
        figures[entry["table"]] = {
            "lag_seconds": stream.get("lag_seconds"), "pending": stream.get("pending"),
            "applied_position": stream.get("applied_position"),
            "changes_applied": stream.get("rows_total"), "last_batch_rows": stream.get("last_batch_rows"),
            "stopped": bool(stream.get("stopped_reason")), "loaded_rows": load.get("rows"),
            "last_validation": (entry.get("last_validation") or {}).get("status"),
        }
    return figures


class HealthCheckOperator(BaseOperator):
    """Fail (no retries: the state won't change by retrying) when anything needs an operator's alert."""

    def __init__(self, *, pipeline: str, **kwargs: Any) -> None:
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)
        self.pipeline = pipeline

    def execute(self, context: Context) -> dict[str, Any]:
        from lakesync.monitoring.attention import attention
        from lakesync.monitoring.status import pipeline_status
        from lakesync_airflow.status import airflow_source

        pipeline = LakesyncHook(self.pipeline).pipeline
        # a source connection Airflow can't give is not a crash: the binlog check says it could not reach it
        status = pipeline_status(pipeline, relay=True, relay_timeout_s=5.0, source=airflow_source(pipeline))
        figures = table_figures(status)
        items = attention(status, lag_alert_seconds=pipeline.stream.lag_alert_seconds)
        for table, values in figures.items():
            self.log.info("table %s: %s", table, values)
        context["ti"].xcom_push(key="figures", value=figures)
        for item in items:
            (self.log.error if item.level == "alert" else self.log.warning)("%s", item.describe())
        alerts = [item for item in items if item.level == "alert"]
        if alerts:
            raise AirflowFailException(f"pipeline {self.pipeline}: {len(alerts)} alert(s): "
                                       + "; ".join(item.describe().replace("\n", " ") for item in alerts))
        return {"tables": len(figures), "warnings": [item.describe() for item in items]}
