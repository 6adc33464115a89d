"""The health DAG run by Airflow (``dag.test()``): a stopped or lagging table fails its task, so the alert
travels through Airflow's own failure handling (e-mails, callbacks, notifiers)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from lakesync_devkit.dev.airflow_runner import AirflowRunner

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


def test_health_check_passes_while_tables_stream_and_fails_on_a_stopped_or_lagging_table(airflow, tmp_path):
    runner, state = airflow
    _progress(state, a=_fresh(1), b=_fresh(2))
    (healthy,) = runner.dag_test(DAG_ID, "2026-11-20T00:00:00+00:00", log_file=tmp_path / "healthy.log")
    assert healthy["tasks"] == {"check_health": "success"}, (tmp_path / "healthy.log").read_text()[-3000:]

    _progress(state, a=_fresh(1, stopped_reason=STOP), b=_fresh(600))
    (alerting,) = runner.dag_test(DAG_ID, "2026-11-20T00:05:00+00:00", log_file=tmp_path / "alerting.log")
    assert alerting["tasks"] == {"check_health": "failed"}
    log = (tmp_path / "alerting.log").read_text()
    assert "lakesync snapshot --pipeline health --tables a" in log
    assert re.search(r"table b: lag \d+ s is past lag_alert_seconds", log)
