"""A DDL the Delta table can't follow stops that table; the documented recovery (re-snapshot the table,
clear its stop flag) brings it back while the rest of the pipeline keeps streaming."""

from __future__ import annotations

import json

import pytest

from lakesync.full_load.load import FullLoad
from lakesync.stream.app import run_stream
from lakesync.stream.progress import StreamProgress
from tests.faults.faultkit import FaultOutcome, FaultPipeline, Workload, seeded_random

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_table_stopped_by_truncate_recovers_by_re_snapshot_and_clearing_its_stop(stack, mariadb, fresh_database,
                                                                                 tmp_path, monkeypatch, spark):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    rng = seeded_random("schema stop")
    outcome = FaultOutcome("schema_stop", "stream (stopped table)")
    kit = FaultPipeline(tmp_path, mariadb, fresh_database, stack.connection_env())
    kit.create_demo_data()
    FullLoad(kit.pipeline).run()
    state_dir = kit.pipeline.pipeline_state_dir
    try:
        kit.relay()
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)) as workload:
            workload.stop_after(1.5)
        with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
            cur.execute("TRUNCATE TABLE daily_balances")
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)) as workload:
            workload.stop_after(1.5)
        kit.wait_relay_caught_up()
        run_stream(kit.pipeline, once=True, spark=spark)
        assert StreamProgress.load(state_dir).tables["daily_balances"].stopped_reason

        # the documented recovery (docs/operations.md): stream stopped, re-snapshot, clear the flag, stream
        kit.finish(kit.snapshot("--tables", "daily_balances", "--restart"))
        progress_file = state_dir / "stream_progress.json"
        progress = json.loads(progress_file.read_text())
        del progress["tables"]["daily_balances"]
        progress_file.write_text(json.dumps(progress))
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)) as workload:
            workload.stop_after(1.5)
        kit.wait_relay_caught_up()
        run_stream(kit.pipeline, once=True, spark=spark)
        assert not StreamProgress.load(state_dir).tables["daily_balances"].stopped_reason
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.publish()
