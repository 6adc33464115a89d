"""The broker loses its data (its log directories wiped: a new cluster, a lost disk): the stream refuses to
resume and says to re-run the full load; the documented recovery brings Delta back to the source."""

from __future__ import annotations

import json
import shutil

import pytest
from lakesync_devkit.dev.stack import KAFKA_CONN_ID

from lakesync.core.errors import GapError
from lakesync.full_load.load import FullLoad
from lakesync.stream.app import checkpoint_dir, run_stream
from tests.faults.faultkit import FaultOutcome, FaultPipeline, Workload, kill_group, seeded_random

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_broker_data_loss_is_refused_as_a_gap_and_a_new_full_load_recovers(stack, mariadb, fresh_database,
                                                                          own_broker, tmp_path, monkeypatch, spark):
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
        kit.relay()
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)) as workload:
            workload.stop_after(rng.uniform(1.0, 3.0))
        kit.wait_relay_caught_up()

        with pytest.raises(GapError, match="gone or were recreated") as refused:
            run_stream(kit.pipeline, once=True, spark=spark)
        assert "re-run the full load" in str(refused.value)

        # the documented recovery: a new full load, a new checkpoint, the stream again (the relay keeps running)
        kit.finish(kit.snapshot("--restart"))
        shutil.rmtree(checkpoint_dir(kit.pipeline))
        kit.wait_relay_caught_up()
        run_stream(kit.pipeline, once=True, spark=spark)
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.publish()
