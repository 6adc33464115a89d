"""The stream's history per table and interval, kept as a Delta table at ``<delta root>/_lakesync/stream_history``.

What a chart needs and the stream's own state files forget: per table and per ``history_interval_seconds``,
the changes applied, the batches, the lag (after the interval's last batch: how far the oldest change not
applied was behind, 0 when nothing was pending; :mod:`lakesync.stream.lag`), the freshness (seconds since the table last received a change), whether the
table was stopped, and the last validation result known at that time. One append commit per interval for
all tables; rows older than ``history_retention_days`` are deleted then too; both by the pipeline's
``delta.writer`` (delta-spark by default: the stream that writes the history runs Spark anyway). Readable by any
Delta reader that reads deletion vectors; the Airflow view draws its charts from it (:func:`read_history`).

Written by the continuous stream only (through :class:`HistoryRecorder`, one call per batch); a failed
write is logged and retried at the next interval, never allowed to stop the stream.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakesync.core.config import Pipeline
from lakesync.stream.progress import StreamProgress

log = logging.getLogger(__name__)

HISTORY_TABLE = "_lakesync/stream_history"

_FIELDS: list[pa.Field] = [
    pa.field("pipeline", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("interval_start", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("interval_end", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("changes", pa.int64(), nullable=False),
    pa.field("batches", pa.int64(), nullable=False),
    pa.field("lag_seconds", pa.float64()),
    pa.field("freshness_seconds", pa.float64()),
    pa.field("stopped", pa.bool_(), nullable=False),
    pa.field("stopped_reason", pa.string()),
    pa.field("validation_status", pa.string()),
    pa.field("validation_mismatched_keys", pa.int64()),
]
SCHEMA = pa.schema(_FIELDS)


def history_uri(pipeline: Pipeline) -> str:
    return pipeline.delta.table_uri(HISTORY_TABLE)


@dataclass
class Interval:
    start_ms: int
    changes: dict[str, int] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)


def interval_rows(pipeline: str, interval: Interval, end_ms: int, progress: StreamProgress,
                  validations: dict[str, dict[str, Any]], lags: Mapping[str, float]) -> pa.Table:
    """One row per table the stream knows, for the interval ``[interval.start_ms, end_ms)``."""
    rows = []
    for table, state in sorted(progress.tables.items()):
        validation = validations.get(table) or {}
        rows.append({
            "pipeline": pipeline, "table": table,
            "interval_start": _utc(interval.start_ms), "interval_end": _utc(end_ms),
            "changes": interval.changes.get(table, 0), "batches": interval.batches.get(table, 0),
            "lag_seconds": lags.get(table),
            "freshness_seconds": None if state.last_batch_at_ms is None
            else max(0.0, (end_ms - state.last_batch_at_ms) / 1000),
            "stopped": bool(state.stopped_reason), "stopped_reason": state.stopped_reason,
            "validation_status": validation.get("status"),
            "validation_mismatched_keys": validation.get("mismatched_keys"),
        })
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


class HistoryRecorder:
    """Counts each batch into the current interval; writes the interval when it is over (and on ``flush``)."""

    def __init__(self, pipeline: Pipeline, *, clock=time.time) -> None:
        self.pipeline = pipeline
        self.interval_ms = int(pipeline.monitoring.history_interval_seconds * 1000)
        self._clock = clock
        self._current = Interval(self._now_ms())
        #: each table's lag after the newest batch that measured it
        self._lags: dict[str, float] = {}

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def batch(self, batch_id: int, progress: StreamProgress, lags: Mapping[str, float]) -> None:
        self._lags.update(lags)
        for table, state in progress.tables.items():
            if state.last_batch_id == batch_id and state.last_batch_rows:
                current = self._current
                current.changes[table] = current.changes.get(table, 0) + state.last_batch_rows
                current.batches[table] = current.batches.get(table, 0) + 1
        if self._now_ms() - self._current.start_ms >= self.interval_ms:
            self.flush(progress)

    def flush(self, progress: StreamProgress) -> None:
        """Write the current interval (if any table is known) and start the next one."""
        end_ms = self._now_ms()
        if not progress.tables:
            return
        try:
            from lakesync.validation.store import last_results

            rows = interval_rows(self.pipeline.name, self._current, end_ms, progress, last_results(self.pipeline),
                                 self._lags)
            append_history(self.pipeline, rows, now_ms=end_ms)
        except Exception as exc:  # observation only: a full disk or a lost bucket must not stop the stream
            log.warning("could not write the stream history of pipeline %s (kept for the next interval): %s",
                        self.pipeline.name, exc)
            return
        self._current = Interval(end_ms)


def append_history(pipeline: Pipeline, rows: pa.Table, *, now_ms: int) -> None:
    """Append ``rows``; then delete rows older than the retention (by the pipeline's ``delta.writer``)."""
    from deltalake import DeltaTable, write_deltalake

    uri = history_uri(pipeline)
    storage = pipeline.delta.storage_options or None
    horizon = _utc(now_ms - int(pipeline.monitoring.history_retention_days * 86_400_000))
    if pipeline.delta.writer == "delta_spark":
        _append_by_delta_spark(uri, storage, rows, horizon)
        return
    write_deltalake(uri, rows, mode="append", storage_options=storage)
    table = DeltaTable(uri, storage_options=storage)
    predicate = f"interval_end < arrow_cast('{horizon.strftime('%Y-%m-%dT%H:%M:%S.%f')}', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    if _has_rows_before(table, horizon):
        table.delete(predicate)


def _append_by_delta_spark(uri: str, storage: dict[str, str] | None, rows: pa.Table, horizon: dt.datetime) -> None:
    """The append (the first one creates the table), then the retention's DELETE, as delta-spark commits."""
    from deltalake import DeltaTable

    from lakesync.sink.merge import quote
    from lakesync.sink.spark_writes import append_or_create_on_delta_spark, delta_spark_session
    from lakesync.spark.storage import spark_path

    session = delta_spark_session(storage)
    append_or_create_on_delta_spark(session, uri, rows, exists=DeltaTable.is_deltatable(uri, storage_options=storage))
    if _has_rows_before(DeltaTable(uri, storage_options=storage), horizon):  # the session's time zone is UTC
        session.sql(f"DELETE FROM delta.{quote(spark_path(uri))} "
                    f"WHERE interval_end < TIMESTAMP '{horizon.strftime('%Y-%m-%d %H:%M:%S.%f')}'")


def _has_rows_before(table: Any, horizon: dt.datetime) -> bool:
    """From file statistics only: whether any file's smallest ``interval_end`` is before ``horizon``."""
    actions = pa.table(table.get_add_actions(flatten=True))
    column = "min.interval_end"
    if column not in actions.column_names:
        return True
    smallest = min((v for v in actions[column].to_pylist() if v is not None), default=None)
    return smallest is not None and smallest < horizon


def read_history(pipeline: Pipeline, *, since: dt.datetime) -> list[dict[str, Any]]:
    """The history rows with ``interval_end >= since``, oldest first (empty when there is no history yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from lakesync.sink.table_scan import scan_rows

    storage = pipeline.delta.storage_options or None
    try:
        table = DeltaTable(history_uri(pipeline), storage_options=storage)
    except TableNotFoundError:
        return []
    # delta-rs's own scan, which applies deletion vectors (the retention's DELETE by delta-spark leaves them)
    since_utc = since.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    data = scan_rows(table, storage, predicate=f"interval_end >= TIMESTAMP '{since_utc}Z'").read_all()
    return sorted(data.to_pylist(), key=lambda row: (row["table"], row["interval_end"]))
