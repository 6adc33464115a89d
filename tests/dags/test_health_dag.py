"""The health DAG run by Airflow (``dag.test()``): a stopped table or a silent relay fails its task, so the
alert travels through Airflow's own failure handling (e-mails, callbacks, notifiers); a quiet table does not.
A lagging table failing it, on a real pipeline: tests/integration/test_lag_truth.py."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from lakesync_devkit.dev.airflow_runner import AirflowRunner

from lakesync.core.config import load_pipeline
from lakesync.core.connections import kafka_client_config
from lakesync.relay.offsets import ProgressStore, RelayProgress
from lakesync.relay.publisher import Publisher
from lakesync.relay.topics import TopicManager
from lakesync.source.server_checks import current_position

pytestmark = pytest.mark.integration

DAG_ID = "lakesync_health_health"
STOP = "a DDL changed the primary key; re-run the full load: `lakesync snapshot --pipeline health --tables a`"


@pytest.fixture
def airflow(stack, tmp_path) -> tuple[AirflowRunner, Path]:
    """A pipeline ``health`` (lag alert at 60 s) on the embedded broker; returns the runner and its state dir."""
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "health.yaml").write_text(yaml.safe_dump({
        "name": "health",
        "source": {"conn_id": "lakesync_demo_mysql", "database": "health_unused"},
        "kafka": {"conn_id": "lakesync_demo_kafka", "topic_prefix": f"health{time.time_ns()}"},
        "delta": {"root": str(tmp_path / "delta")},
        "stream": {"lag_alert_seconds": 60},
        "state_dir": str(tmp_path / "state"),
    }))
    runner = AirflowRunner(tmp_path / "airflow", connections=stack.connection_env(), pipelines_dir=pipelines)
    return runner, tmp_path / "state" / "health"


def _progress(state: Path, **tables: dict) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / "stream_progress.json").write_text(json.dumps({"tables": tables}))


def _fresh(seconds_behind: float, **extra) -> dict:
    now = int(time.time() * 1000)
    return {"applied_position": "0000000001:0000000100:0000", "applied_source_ts_ms": now - int(seconds_behind * 1000),
            "last_batch_id": 1, "last_batch_rows": 3, "last_batch_at_ms": now, **extra}


def _relay_heard(airflow_pipelines: Path, stack, monkeypatch, seconds_ago: float) -> float:
    """Store the relay's progress on the real broker as a relay that last showed life ``seconds_ago``;
    returns that moment (epoch seconds)."""
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    pipeline = load_pipeline("health", airflow_pipelines)
    client = kafka_client_config(pipeline)
    store = ProgressStore.for_pipeline(pipeline)
    store.ensure_topic(TopicManager(client))
    with stack.mariadb.connect() as conn:  # a position the server still has: only the silence is wrong
        position = current_position(conn)
    heard_ms = int((time.time() - seconds_ago) * 1000)
    store.save(RelayProgress(position, position, heard_ms), Publisher(client))
    return heard_ms / 1000


def test_health_check_passes_on_quiet_tables_and_fails_on_a_stopped_table_or_a_silent_relay(
        airflow, stack, tmp_path, monkeypatch):
    runner, state = airflow
    # b's newest change is 10 minutes old: a quiet table, not a lagging one (lag counts what is not applied)
    _progress(state, a=_fresh(1), b=_fresh(600))
    (healthy,) = runner.dag_test(DAG_ID, "2026-11-20T00:00:00+00:00", log_file=tmp_path / "healthy.log")
    assert healthy["tasks"] == {"check_health": "success"}, (tmp_path / "healthy.log").read_text()[-3000:]

    _progress(state, a=_fresh(1, stopped_reason=STOP), b=_fresh(600))
    heard_at = _relay_heard(tmp_path / "pipelines", stack, monkeypatch, seconds_ago=600)
    (alerting,) = runner.dag_test(DAG_ID, "2026-11-20T00:05:00+00:00", log_file=tmp_path / "alerting.log")
    assert alerting["tasks"] == {"check_health": "failed"}
    log = (tmp_path / "alerting.log").read_text()
    assert "lakesync snapshot --pipeline health --tables a" in log
    silence = re.search(r"relay silent for ([\d,]+) s .* past lag_alert_seconds", log)
    assert silence, log[-3000:]
    # counted from the stored heartbeat: at least the 600 s it was old, at most its age now (however long the
    # DAG run took to start on a loaded machine)
    assert 600 <= int(silence.group(1).replace(",", "")) <= time.time() - heard_at + 1
