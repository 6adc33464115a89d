"""The whole data path on real parts: MariaDB -> full load -> relay -> broker -> Spark stream -> Delta.

The verdict "Delta equals the source" is the independent oracle's (tests/oracle.py); the demo's own report
(which comes from ``lakesync validate``) must then agree with it.
"""

from __future__ import annotations

import pytest
from lakesync_devkit.demo.run import DEMO_PIPELINE, run_demo
from rich.console import Console

from lakesync.core.config import load_pipeline
from tests.oracle import assert_tables_match

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.integration]

KEYED_TABLES = {"customers", "accounts", "transactions", "daily_balances"}


@pytest.fixture
def demo_env(stack, monkeypatch):
    """The demo pipeline resolves its connections and folders from the environment; restore it afterwards."""
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    return stack


def _assert_keyed_tables_identical(report, stack) -> None:
    pipeline = load_pipeline(DEMO_PIPELINE)
    with stack.mariadb.connect() as conn:
        assert_tables_match(conn, stack.settings.demo_database,
                            {table: pipeline.delta.table_uri(table) for table in sorted(KEYED_TABLES)})
    # the demo's report (lakesync validate) agrees with the oracle
    by_table = {c.table: c for c in report.comparisons}
    assert set(by_table) == KEYED_TABLES | {"audit_log"}
    for name in KEYED_TABLES:
        comparison = by_table[name]
        assert comparison.comparable, f"{name} should be merged by key, not appended"
        assert comparison.matches, f"{name}: {comparison.describe()}"
        assert comparison.source_rows == comparison.delta_rows
    burst = next(detail for title, _, detail in report.steps if title.startswith("burst"))
    for operation in ("insert", "update", "delete"):
        assert operation in burst, f"the burst should include {operation}s: {burst}"
    assert report.matches


def test_delta_equals_source_after_full_load_and_a_burst_of_inserts_updates_and_deletes(demo_env, spark):
    report = run_demo(str(demo_env.state_dir), rate=150, seconds=3, airflow=False, console=Console(quiet=True))
    _assert_keyed_tables_identical(report, demo_env)


def test_the_main_job_through_airflow_dags_ends_with_delta_equal_to_the_source(demo_env):
    """The README's first command: relay process, full-load DAG (spark-submit load, handoff, stream, caught up,
    validate), a burst of changes, the stream DAG, validation."""
    report = run_demo(str(demo_env.state_dir), rate=100, seconds=2, airflow=True, console=Console(quiet=True))
    dag_steps = [detail for _, _, detail in report.steps if detail.startswith("DAG ")]
    assert len(dag_steps) == 2 and all("tasks succeeded" in detail for detail in dag_steps)
    _assert_keyed_tables_identical(report, demo_env)


def test_after_the_demo_dev_down_and_up_keep_the_change_log_and_the_stream_goes_on_without_a_reload(demo_env, spark):
    """Apache Kafka keeps its logs in the state folder: after `lakesync dev down` / `up`, the relay resumes
    from its committed progress and the stream from its checkpoint, with no full load."""
    from lakesync_devkit.demo.load import run_load

    from lakesync.relay import Relay
    from lakesync.stream.app import run_stream

    run_demo(str(demo_env.state_dir), rate=100, seconds=2, airflow=False, console=Console(quiet=True))
    pipeline = load_pipeline(DEMO_PIPELINE)
    load_state = (pipeline.pipeline_state_dir / "full_load.json").read_text()
    demo_env.down()
    demo_env.up()
    with demo_env.mariadb.connect(autocommit=False) as conn:
        burst = run_load(conn, demo_env.settings.demo_database, rate=100, seconds=2)
    stats = Relay(pipeline, heartbeat_seconds=0.3).run(stop_when_idle_seconds=1.5)
    assert stats.start_origin.startswith("stored progress"), stats.start_origin
    applied = run_stream(pipeline, once=True, spark=spark)
    assert applied.changes >= burst.transactions, (applied, burst.summary())
    assert (pipeline.pipeline_state_dir / "full_load.json").read_text() == load_state, "no table was re-loaded"
    with demo_env.mariadb.connect() as conn:
        assert_tables_match(conn, demo_env.settings.demo_database,
                            {table: pipeline.delta.table_uri(table) for table in sorted(KEYED_TABLES)})
