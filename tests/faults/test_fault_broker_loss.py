"""The broker loses its data (its log directories wiped: a new cluster, a lost disk): the stream refuses to
resume and names ``lakesync recover``; that one command, with the relay stopped, replays from the binlog what
Kafka lost (no table is re-loaded: the binlog still covers every table's consumed-through mark), and Delta
comes back equal to the source."""

from __future__ import annotations

import json
import shutil

import pytest
from deltalake import DeltaTable
from lakesync_devkit.dev.stack import KAFKA_CONN_ID

from lakesync.core.errors import GapError
from lakesync.full_load.load import FullLoad
from lakesync.full_load.state import LoadState
from lakesync.stream.app import run_stream
from tests.faults.faultkit import FaultOutcome, FaultPipeline, Workload, kill_group, seeded_random

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_broker_data_loss_is_refused_as_a_gap_and_recover_replays_it_from_the_binlog_without_a_reload(
        stack, mariadb, fresh_database, own_broker, tmp_path, monkeypatch, spark):
    env = {**stack.connection_env(), f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}": json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": own_broker.bootstrap}})}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    rng = seeded_random("broker loss")
    outcome = FaultOutcome("broker_loss", "Apache Kafka broker")
    kit = FaultPipeline(tmp_path, mariadb, fresh_database, env)
    kit.create_demo_data()
    FullLoad(kit.pipeline).run()
    try:
        relay = kit.relay()
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)) as workload:
            workload.stop_after(rng.uniform(2.0, 4.0))
        kit.wait_relay_caught_up()
        run_stream(kit.pipeline, once=True, spark=spark)

        # the broker comes back empty; the relay, restarted by its supervisor, republishes from the full load
        kill_group(relay)
        own_broker.kill()
        shutil.rmtree(own_broker.home / "data")
        own_broker.start()
        outcome.kills += 1
        relay = kit.relay()
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)) as workload:
            workload.stop_after(rng.uniform(1.0, 3.0))
        kit.wait_relay_caught_up()

        with pytest.raises(GapError, match="gone or were recreated") as refused:
            run_stream(kit.pipeline, once=True, spark=spark)
        assert f"lakesync recover --pipeline {kit.name}" in str(refused.value)

        # the documented recovery: stop the relay, recover, start the relay, the stream (it starts afresh)
        tables = sorted(LoadState.for_pipeline_dir(kit.pipeline.pipeline_state_dir).tables)
        versions = {table: DeltaTable(kit.pipeline.delta.table_uri(table)).version() for table in tables}
        relay.terminate()  # SIGTERM: a clean stop, which the relay's last progress record says
        relay.wait(60)
        recovered = kit.finish(kit.recover())
        assert "0 re-loaded" in kit.output(recovered), kit.output(recovered)
        assert {table: DeltaTable(kit.pipeline.delta.table_uri(table)).version() for table in tables} \
            == versions, "recover replays; it writes no table"
        relay = kit.relay()
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)) as workload:
            workload.stop_after(rng.uniform(1.0, 2.0))
        kit.wait_relay_caught_up()
        run_stream(kit.pipeline, once=True, spark=spark)
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.publish()
