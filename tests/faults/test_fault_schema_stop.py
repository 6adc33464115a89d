"""A DDL the Delta table can't follow stops that table; the command its message gives (re-load the table)
brings it back, with nothing else to clear, while the rest of the pipeline keeps streaming."""

from __future__ import annotations

import re
import shlex
import sys

import pytest
import yaml
from faultkit import FaultOutcome, FaultPipeline, Workload, seeded_random

from lakesync.full_load.load import FullLoad
from lakesync.stream.app import run_stream
from lakesync.stream.progress import StreamProgress

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_table_stopped_by_truncate_recovers_by_the_command_its_message_gives(stack, mariadb, fresh_database,
                                                                                 tmp_path, monkeypatch, spark):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    rng = seeded_random("schema stop")
    outcome = FaultOutcome("schema_stop", "stream (stopped table)")
    kit = FaultPipeline(tmp_path, mariadb, fresh_database, stack.connection_env())
    pipeline_file = kit.pipelines_dir / f"{kit.name}.yaml"  # the stop path: no automatic re-load
    document = yaml.safe_load(pipeline_file.read_text())
    document["stream"]["reload_on_schema_change"] = False
    pipeline_file.write_text(yaml.safe_dump(document))
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
        reason = StreamProgress.load(state_dir).tables["daily_balances"].stopped_reason
        assert reason

        # the recovery is the command of the message, exactly as given (the pipeline found by the environment)
        command = re.search(r"`(lakesync snapshot [^`]+)`", reason).group(1)
        kit.env["LAKESYNC_PIPELINES_DIR"] = str(kit.pipelines_dir)
        kit.finish(kit._spawn("snapshot", [sys.executable, "-m", "lakesync.cli.main", *shlex.split(command)[1:]]))
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)) as workload:
            workload.stop_after(1.5)
        kit.wait_relay_caught_up()
        run_stream(kit.pipeline, once=True, spark=spark)
        assert not StreamProgress.load(state_dir).tables["daily_balances"].stopped_reason
        kit.validate(outcome)
    finally:
        kit.stop_all()
    outcome.publish()
