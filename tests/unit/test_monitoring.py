"""Metrics and history figures from the stream's progress (no servers: a local Delta folder at most)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import generate_latest

from lakesync.core.config import parse_pipeline
from lakesync.core.errors import ConfigError
from lakesync.monitoring.history import HistoryRecorder, read_history
from lakesync.monitoring.metrics import PipelineMetrics
from lakesync.stream.progress import StreamProgress


def _pipeline(tmp_path, **monitoring):
    return parse_pipeline({
        "name": "m", "source": {"conn_id": "c", "database": "db"},
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "m"},
        "delta": {"root": str(tmp_path / "delta"), "writer": "delta_rs"}, "state_dir": str(tmp_path / "state"),
        "monitoring": monitoring,
    }, source_name="m.yaml")


def _batch(progress: StreamProgress, batch_id: int, **rows: int) -> None:
    for table, count in rows.items():
        progress.record(table, batch_id=batch_id, rows=count, position=f"{batch_id:010d}",
                        source_ts_ms=int(time.time() * 1000) - 1500)


def test_metrics_count_only_the_tables_a_batch_touched(tmp_path):
    metrics, progress = PipelineMetrics(_pipeline(tmp_path)), StreamProgress()
    _batch(progress, 1, a=5, b=2)
    metrics.stream_batch(1, progress, 0.2, {"a": 4.0, "b": 9.5})
    _batch(progress, 2, a=3)
    metrics.stream_batch(2, progress, 0.1, {"a": 0.0})
    text = generate_latest(metrics.registry).decode()
    # the lag is what the batch left unapplied, not the age of the newest applied change (1.5 s here)
    assert 'lakesync_stream_apply_lag_seconds{pipeline="m",table="a"} 0.0' in text
    assert 'lakesync_stream_apply_lag_seconds{pipeline="m",table="b"} 9.5' in text, "not measured: kept"
    assert 'lakesync_stream_changes_applied_total{pipeline="m",table="a"} 8.0' in text
    assert 'lakesync_stream_changes_applied_total{pipeline="m",table="b"} 2.0' in text
    assert 'lakesync_stream_batches_total{pipeline="m"} 2.0' in text
    assert 'lakesync_table_stopped{pipeline="m",table="a"} 0.0' in text


def test_metrics_address_is_off_by_default_and_must_be_host_and_port(tmp_path):
    assert _pipeline(tmp_path).monitoring.metrics_address is None
    with pytest.raises(ConfigError, match="metrics_address"):
        _pipeline(tmp_path, metrics_address="9464")


def test_history_writes_one_row_per_table_per_interval_and_drops_rows_past_retention(tmp_path):
    clock = [time.time() - 3 * 86_400]
    pipeline = _pipeline(tmp_path, history_interval_seconds=60, history_retention_days=1)
    recorder, progress = HistoryRecorder(pipeline, clock=lambda: clock[0]), StreamProgress()
    _batch(progress, 1, a=5)
    recorder.batch(1, progress, {"a": 3.0})
    clock[0] += 30
    _batch(progress, 2, a=2, b=1)
    recorder.batch(2, progress, {"a": 0.0, "b": 0.0})
    assert read_history(pipeline, since=datetime(2000, 1, 1, tzinfo=UTC)) == [], "the interval is not over"
    clock[0] += 31
    recorder.batch(3, progress, {})
    rows = read_history(pipeline, since=datetime(2000, 1, 1, tzinfo=UTC))
    assert [(r["table"], r["changes"], r["batches"], r["lag_seconds"]) for r in rows] == [("a", 7, 2, 0.0),
                                                                                         ("b", 1, 1, 0.0)]
    clock[0] = time.time()  # two days later: the old rows are past the retention
    recorder.flush(progress)
    rows = read_history(pipeline, since=datetime.now(UTC) - timedelta(days=30))
    assert [(r["table"], r["changes"]) for r in rows] == [("a", 0), ("b", 0)]
