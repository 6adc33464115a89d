"""SIGKILL of the broker while the relay publishes, then a restart: the relay rides it out by itself and the
change log holds every change exactly once (counted per position under read_committed); after the stream,
Delta equals the source (the independent oracle)."""

from __future__ import annotations

import json
import time

import pytest
from lakesync_devkit.dev.stack import KAFKA_CONN_ID

from lakesync.full_load.load import FullLoad
from lakesync.stream.app import run_stream
from tests.faults.faultkit import FaultOutcome, FaultPipeline, Workload, kill_points, seeded_random
from tests.faults.kafka_counts import assert_each_change_once, position_counts

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_broker_killed_mid_transaction_and_restarted_loses_and_doubles_nothing(
        stack, mariadb, fresh_database, own_broker, tmp_path, monkeypatch, spark):
    env = {**stack.connection_env(), f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}": json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": own_broker.bootstrap}})}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    rng = seeded_random("broker kill")
    outcome = FaultOutcome("broker_kill", "Apache Kafka broker")
    kit = FaultPipeline(tmp_path, mariadb, fresh_database, env)
    kit.create_demo_data()
    FullLoad(kit.pipeline).run()
    try:
        relay = kit.relay()
        with Workload(mariadb, fresh_database, rate=60, seed=rng.randrange(1_000)):
            for _ in range(kill_points()):
                time.sleep(rng.uniform(1.5, 4.0))  # the relay commits every 0.5 s: a transaction is open
                own_broker.kill()
                outcome.kills += 1
                time.sleep(rng.uniform(0.5, 3.0))
                own_broker.start(timeout=180)  # log recovery after SIGKILL: slow on a busy machine
            time.sleep(2.0)
        assert relay.poll() is None, f"the relay exited instead of riding out the outage:\n{kit.output(relay)[-3000:]}"
        kit.wait_relay_caught_up(timeout=240)
        topics = [kit.pipeline.topic(t) for t in ("customers", "accounts", "transactions", "daily_balances",
                                                  "audit_log")]
        changes = assert_each_change_once(own_broker.bootstrap, topics)
        aborted = sum(position_counts(own_broker.bootstrap, topics, isolation="read_uncommitted").values()) - changes
        outcome.notes.append(f"{changes} changes once each; {aborted} records of aborted transactions hidden")
        run_stream(kit.pipeline, once=True, spark=spark)
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.publish()
