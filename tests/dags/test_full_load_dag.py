"""The full-load DAG run by Airflow (``dag.test()``): source check, spark-submit full load, validation.

The handoff, stream and caught-up steps need the relay and ``spark_apps/stream.py``; they are marked
successful here (``mark_success_pattern``) so the test proves the load and the validation through Airflow.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from lakesync_devkit.demo.database import create_demo_database, seed_demo_data
from lakesync_devkit.dev.airflow_runner import AirflowRunner

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _scan(uri, columns: list[str] | None = None) -> pa.Table:
    """Read with delta-rs's own reader (pyarrow's dataset reader can abort at exit, docs/sink.md)."""
    return pa.RecordBatchReader.from_stream(DeltaTable(str(uri)).scan(columns=columns)).read_all()


def test_full_load_dag_ends_with_delta_equal_to_the_source(stack, fresh_database, tmp_path):
    with stack.mariadb.connect() as conn:
        create_demo_database(conn, fresh_database)
        seed_demo_data(conn, fresh_database, customers=20, transactions=200)
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "fl.yaml").write_text(yaml.safe_dump({
        "name": "fl",
        "source": {"conn_id": "lakesync_demo_mysql", "database": fresh_database},
        "tables": {"include": ["customers", "transactions"]},
        "kafka": {"conn_id": "lakesync_demo_kafka", "topic_prefix": "fl"},
        "delta": {"root": str(tmp_path / "delta")},
        "state_dir": str(tmp_path / "state"),
    }))
    runner = AirflowRunner(tmp_path / "airflow", connections=stack.connection_env(), pipelines_dir=pipelines)
    started = time.monotonic()
    (run,) = runner.dag_test("lakesync_fl_full_load", "2026-11-20T00:00:00+00:00",
                             mark_success="handoff|stream|wait_caught_up")
    print(f"full-load dag.test (spark-submit): {time.monotonic() - started:.1f}s")
    assert run["state"] == "success", run
    assert run["tasks"]["validate"] == "success"
    with stack.mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{fresh_database}`.transactions")
        (count,) = cur.fetchone()
    assert _scan(str(tmp_path / "delta" / "transactions"), ["id"]).num_rows == count
