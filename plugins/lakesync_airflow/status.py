"""The status view's data: :func:`lakesync.monitoring.status.pipeline_status` plus, per table, the last
settled interval and the history of the chosen window, and what needs attention.

The library gives applied position, lag, last full load and last validation per table; the settlement
commits (found by their begin/end markers in the Delta history) add which interval was settled last; the
history table (:mod:`lakesync.monitoring.history`) gives the charts their figures.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from lakesync.core.config import Pipeline
from lakesync.core.connections import MySQLConnection
from lakesync.monitoring.status import pipeline_status as library_status
from lakesync.settlement.windows import PROP_PREFIX

_START = f"{PROP_PREFIX}interval_start"


def last_settlement(pipeline: Pipeline, table: str, *, commits: int = 200) -> dict[str, Any] | None:
    """The latest settled interval (by interval, not by commit time: backfills settle old days late) among
    the table's last ``commits`` commits."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from lakesync.sink.coverage import commit_metadata  # imports deltalake: not at DAG parse time

    try:
        history = DeltaTable(pipeline.delta.table_uri(table),
                             storage_options=pipeline.delta.storage_options or None).history(commits)
    except TableNotFoundError:
        return None
    settled = [commit for commit in map(commit_metadata, history) if _START in commit]
    if not settled:
        return None
    commit = max(settled, key=lambda c: (c[_START], c.get("version", 0)))
    return {"interval_start": commit[_START], "interval_end": commit.get(f"{PROP_PREFIX}interval_end"),
            "run": commit.get(f"{PROP_PREFIX}run"), "committed_ms": commit.get("timestamp"),
            "delta_version": commit.get("version")}


def airflow_source(pipeline: Pipeline) -> MySQLConnection | None:
    """The source's connection as Airflow holds it (UI, metadata database, secrets backend), for the binlog
    check; None when Airflow can't give it here, and the library then reads ``AIRFLOW_CONN_*`` itself (and
    says in the attention list when it can't reach the source either)."""
    from lakesync_airflow.hooks import LakesyncHook

    try:
        return LakesyncHook(pipeline.name).source()
    except Exception:  # any lookup failure falls back to the library's own, which reports what it could not reach
        return None


def pipeline_status(pipeline: Pipeline, *, history_window: timedelta = timedelta(hours=6)) -> dict[str, Any]:
    from lakesync.monitoring.attention import attention
    from lakesync.monitoring.history import read_history

    status = library_status(pipeline, relay=True, relay_timeout_s=2.0, source=airflow_source(pipeline))
    for row in status["tables"]:
        row["last_settlement"] = last_settlement(pipeline, row["table"])
    limit = pipeline.stream.lag_alert_seconds
    status["lag_alert_seconds"] = limit
    status["attention"] = [{**asdict(item), "text": item.describe()}
                           for item in attention(status, lag_alert_seconds=limit)]
    history: dict[str, list[dict[str, Any]]] = {}
    for row in read_history(pipeline, since=datetime.now(UTC) - history_window):
        history.setdefault(row["table"], []).append(row)
    status["history"] = history
    return status
