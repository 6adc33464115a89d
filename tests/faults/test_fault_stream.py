"""SIGKILL the Spark stream (driver and JVM) at random points, mid-batch too; a restart resumes exactly once."""

from __future__ import annotations

import time

import pytest

from lakesync.full_load.load import FullLoad
from tests.faults.faultkit import (
    FaultOutcome,
    FaultPipeline,
    Workload,
    kill_group,
    kill_points,
    seeded_random,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def _batches_started(kit: FaultPipeline) -> int:
    offsets = kit.pipeline.pipeline_state_dir / "checkpoints" / "stream" / "offsets"
    return sum(1 for entry in offsets.iterdir() if entry.name.isdigit()) if offsets.exists() else 0


def _kill_at_a_random_point(kit: FaultPipeline, rng, stream) -> str:
    """Either at a random time after the launch (startup, planning, idle), or just after a batch was planned
    (Spark wrote offsets/<n>: the MERGEs of batch n are running or about to, its commit is not written)."""
    if rng.random() < 0.5:
        time.sleep(rng.uniform(0.5, 10.0))
        return "random time"
    started = _batches_started(kit)
    deadline = time.monotonic() + 90
    while _batches_started(kit) == started and stream.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 1.5))
    return "mid-batch"


def test_stream_killed_at_random_points_resumes_from_its_checkpoint(stack, mariadb, fresh_database, tmp_path,
                                                                    monkeypatch):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    rng = seeded_random("stream")
    outcome = FaultOutcome("stream", "spark_apps/stream.py")
    kit = FaultPipeline(tmp_path, mariadb, fresh_database, stack.connection_env())
    kit.create_demo_data()
    FullLoad(kit.pipeline).run()
    kit.relay()
    try:
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)):
            for _ in range(kill_points()):
                stream = kit.stream()
                where = _kill_at_a_random_point(kit, rng, stream)
                assert kill_group(stream), f"the stream exited by itself:\n{kit.output(stream)[-3000:]}"
                outcome.kills += 1
                outcome.notes.append(where)
        kit.wait_relay_caught_up()
        kit.finish(kit.stream(once=True))
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.notes = [f"{note}: {outcome.notes.count(note)}" for note in sorted(set(outcome.notes))]
    outcome.publish()
