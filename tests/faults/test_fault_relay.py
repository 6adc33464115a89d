"""SIGKILL the relay at random points while the source changes; a plain restart loses nothing."""

from __future__ import annotations

import subprocess
import time

import pytest

from lakesync.full_load.load import FullLoad
from lakesync.stream.app import run_stream
from tests.faults.faultkit import (
    FaultOutcome,
    FaultPipeline,
    Workload,
    kill_group,
    kill_points,
    seeded_random,
)
from tests.faults.kafka_counts import assert_each_change_once

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_relay_killed_at_random_points_resumes_from_its_stored_progress(stack, mariadb, fresh_database, tmp_path,
                                                                        monkeypatch, spark):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    rng = seeded_random("relay")
    outcome = FaultOutcome("relay", "lakesync relay")
    kit = FaultPipeline(tmp_path, mariadb, fresh_database, stack.connection_env())
    kit.create_demo_data()
    FullLoad(kit.pipeline).run()
    try:
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)):
            for kill in range(kill_points()):
                relay = kit.relay()
                if kill == 0:
                    # at least one kill lands after progress is stored, so the final relay has progress to
                    # resume from however slowly the relays start on this machine
                    _wait_for_stored_progress(kit, relay)
                # from "still importing" through "connecting" to "mid-stream, progress stored a few times"
                time.sleep(rng.uniform(0.3, 5.0))
                assert kill_group(relay), f"the relay exited by itself:\n{kit.output(relay)[-3000:]}"
                outcome.kills += 1
            final = kit.relay()
        kit.wait_relay_caught_up()
        assert "from stored progress" in kit.output(final), kit.output(final)[-3000:]
        topics = [kit.pipeline.topic(t) for t in ("customers", "accounts", "transactions", "daily_balances",
                                                  "audit_log")]
        outcome.notes.append(f"{assert_each_change_once(stack.broker.bootstrap, topics)} changes in Kafka, each once")
        run_stream(kit.pipeline, once=True, spark=spark)
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.publish()


def _wait_for_stored_progress(kit: FaultPipeline, relay: subprocess.Popen, timeout: float = 120) -> None:
    from lakesync.relay import covered_range

    deadline = time.monotonic() + timeout
    while covered_range(kit.pipeline) is None:
        assert relay.poll() is None, f"the relay exited by itself:\n{kit.output(relay)[-3000:]}"
        assert time.monotonic() < deadline, f"the relay stored no progress in {timeout} s:\n{kit.output(relay)[-3000:]}"
        time.sleep(0.5)
