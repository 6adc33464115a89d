"""A backlog bigger than the batch bound, on real parts: applied in several bounded batches, and a stream
killed in the middle of it resumes with nothing lost or doubled. Delta's verdicts come from tests/oracle.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakesync.full_load.load import FullLoad
from lakesync.stream.app import checkpoint_dir, run_stream
from tests.integration.test_stream_app import env, execute, items, relay_until_idle, write_pipeline  # noqa: F401
from tests.oracle import assert_tables_match

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BOUND = 40


def _backlog(conn, *, rounds: int) -> int:
    """Inserts, updates and deletes on ``items`` and a keyless ``log``; returns the changes made."""
    made = 0
    for r in range(rounds):
        base = 100 + 10 * r
        values = ", ".join(f"({base + i}, 'r{r}', {i}.25)" for i in range(10))
        execute(conn,
                f"INSERT INTO items VALUES {values}",
                f"UPDATE items SET amount = amount + 1 WHERE id BETWEEN {base} AND {base + 4}",
                f"UPDATE items SET label = 'again' WHERE id = {1 + r % 20}",
                f"DELETE FROM items WHERE id = {base + 9}",
                f"INSERT INTO log VALUES ('round {r}', {r}), ('round {r}', {r})")
        made += 10 + 5 + 1 + 1 + 2
    return made


def _pipeline(tmp_path: Path, database: str, items_conn):
    execute(items_conn, "CREATE TABLE log (note VARCHAR(20), n INT)")
    pipeline = write_pipeline(tmp_path, database, stream={"max_offsets_per_trigger": BOUND},
                              tables={"overrides": {"log": {"semantics": "append_log"}}})
    FullLoad(pipeline=pipeline).run()
    return pipeline


def _assert_delta_equals_source(conn, database: str, pipeline) -> None:
    """``items`` by key; the keyless ``log`` (append-only, inserts only) as a multiset of rows, so a change
    applied twice shows as a row too many."""
    assert_tables_match(conn, database, {table: pipeline.delta.table_uri(table) for table in ("items", "log")})


def test_backlog_larger_than_the_batch_bound_is_applied_in_several_batches_and_delta_equals_the_source(
        env, mariadb, items, fresh_database, tmp_path, spark):  # noqa: F811
    pipeline = _pipeline(tmp_path, fresh_database, items)
    made = _backlog(items, rounds=12)
    relay_until_idle(pipeline)

    summary = run_stream(pipeline, once=True, spark=spark)

    assert made > 4 * BOUND
    assert summary.batches >= made // BOUND, f"{made} changes in {summary.batches} batches of at most {BOUND}"
    assert summary.changes == made
    _assert_delta_equals_source(items, fresh_database, pipeline)


def test_stream_killed_mid_backlog_resumes_with_nothing_lost_or_doubled(
        env, mariadb, items, fresh_database, tmp_path, spark):  # noqa: F811
    pipeline = _pipeline(tmp_path, fresh_database, items)
    _backlog(items, rounds=30)
    relay_until_idle(pipeline)
    pipelines_dir = tmp_path / "pipelines"
    process = subprocess.Popen(
        [sys.executable, "-m", "lakesync.cli.main", "stream", "--pipeline", pipeline.name,
         "--pipelines-dir", str(pipelines_dir), "--once"],
        env={**os.environ, "LAKESYNC_SPARK_MASTER": "local[1]"}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    commits = checkpoint_dir(pipeline) / "commits"
    try:
        deadline = time.monotonic() + 120
        while not (commits.exists() and sum(p.name.isdigit() for p in commits.iterdir()) >= 3):
            assert process.poll() is None, "the stream ended before it could be killed mid-backlog"
            assert time.monotonic() < deadline, "the stream committed no batches"
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    killed_after = sum(p.name.isdigit() for p in commits.iterdir())

    run_stream(pipeline, once=True, spark=spark)

    assert killed_after < 30 * 19 // BOUND, "the kill should land mid-backlog"
    _assert_delta_equals_source(items, fresh_database, pipeline)
