"""Chunked full load inside Spark: chunks read and written by Spark tasks, one Delta commit per table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable
from lakesync_devkit.dev.stack import MYSQL_CONN_ID

from lakesync.core.config import parse_pipeline
from lakesync.full_load.chunk_runners import SparkChunkRunner
from lakesync.full_load.load import FullLoad
from lakesync.full_load.state import LoadState
from lakesync.spark.session import submit_args
from tests.deltakit import delta_table

pytestmark = [pytest.mark.integration, pytest.mark.spark]
REPO = Path(__file__).resolve().parents[2]


def _pipeline_document(database: str, tmp_path: Path) -> dict:
    return {
        "name": "sparkload", "source": {"conn_id": MYSQL_CONN_ID, "database": database},
        "kafka": {"bootstrap_servers": "127.0.0.1:9", "topic_prefix": "t"},
        "delta": {"root": str(tmp_path / "delta")}, "state_dir": str(tmp_path / "state"),
        "snapshot": {"mode": "chunked", "chunk_rows": 100},
    }


@pytest.fixture
def numbers(mariadb, fresh_database: str) -> str:
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE numbers (id BIGINT UNSIGNED PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO numbers SELECT seq, CONCAT('v', seq) FROM seq_1_to_1000")
    return fresh_database


def test_spark_tasks_write_the_chunks_and_the_driver_commits_once(spark, stack, numbers: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    pipeline = parse_pipeline(_pipeline_document(numbers, tmp_path), source_name="sparkload.yaml")
    (result,) = FullLoad(pipeline, chunk_runner=SparkChunkRunner(spark)).run()
    table = DeltaTable(pipeline.delta.table_uri("numbers"))
    assert result.rows == 1000 and len(table.history()) == 1
    assert len(LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables["numbers"].chunks_done) == 10
    assert sorted(int(v) for v in delta_table(pipeline.delta.table_uri("numbers")).column("id").to_pylist()) == list(range(1, 1001))


def test_spark_submit_entry_point_loads_and_prints_a_line_per_table(stack, numbers: str, tmp_path: Path) -> None:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "sparkload.yaml").write_text(yaml.safe_dump(_pipeline_document(numbers, tmp_path)))
    env = {**os.environ, **stack.connection_env(), "LAKESYNC_PIPELINES_DIR": str(pipelines),
           "PYSPARK_PYTHON": sys.executable}
    spark_submit = Path(sys.executable).parent / "spark-submit"
    done = subprocess.run(
        [str(spark_submit), "--master", "local[2]", *submit_args(), str(REPO / "spark_apps" / "full_load.py"),
         "--pipeline", "sparkload"], env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(line["table"], line["rows"], line["mode"]) for line in lines] == [("numbers", 1000, "chunked")]
