"""SIGKILL the full load mid-table while the source changes; running the same command again resumes it."""

from __future__ import annotations

import time

import pytest

from lakesync.full_load.state import LoadState
from lakesync.stream.app import run_stream
from tests.faults.faultkit import (
    FaultOutcome,
    FaultPipeline,
    Workload,
    kill_group,
    kill_points,
    seeded_random,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

#: big enough that reading and writing ``transactions`` takes a few seconds, so kills land mid-table
TRANSACTIONS = 400_000


def _wait_for_tables_to_start(kit: FaultPipeline, load) -> None:
    """Until the load logs its first line (the snapshot opened, or the first table loaded): imports done."""
    deadline = time.monotonic() + 60
    while "INFO" not in kit.output(load) and load.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _done_tables(kit: FaultPipeline) -> dict[str, int | None]:
    """Tables the load state marks done, with the Delta version their load committed."""
    state = LoadState.for_pipeline_dir(kit.pipeline.pipeline_state_dir)
    return {name: entry.delta_version for name, entry in state.tables.items() if entry.status == "done"}


@pytest.mark.parametrize("mode", ["consistent", "chunked"])
def test_full_load_killed_mid_table_resumes_and_the_stream_repairs_what_moved(stack, mariadb, fresh_database,
                                                                               tmp_path, monkeypatch, spark, mode):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    rng = seeded_random(f"full load ({mode})")
    outcome = FaultOutcome(f"full_load_{mode}", "lakesync snapshot")
    kit = FaultPipeline(tmp_path, mariadb, fresh_database, stack.connection_env())
    kit.create_demo_data(transactions=TRANSACTIONS)
    restart = False
    try:
        with Workload(mariadb, fresh_database, seed=rng.randrange(1_000)):
            while outcome.kills < kill_points():
                load = kit.snapshot("--mode", mode, "--connections", "2", *(["--restart"] if restart else []))
                _wait_for_tables_to_start(kit, load)
                time.sleep(rng.uniform(0.0, 1.8))  # the small tables take ~0.5 s, transactions ~1.5 s
                restart = not kill_group(load)
                if restart:  # it finished first: not a kill point; load everything again next time
                    kit.finish(load)
                    continue
                done = _done_tables(kit)
                if len(done) == 5:  # killed while printing its summary: a kill, but not mid-table
                    outcome.notes.append("killed after the last table (not counted)")
                    continue
                outcome.kills += 1
                outcome.notes.append(f"killed mid-table with {len(done)} of 5 tables done")
            kit.finish(kit.snapshot("--mode", mode, "--connections", "2"))
            kit.relay()
        after = _done_tables(kit)
        assert len(after) == 5, after
        for table, version in done.items():
            assert after[table] == version, f"{table} was loaded again instead of being kept: {version} -> {after}"
        kit.wait_relay_caught_up()
        run_stream(kit.pipeline, once=True, spark=spark)
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.notes = [f"{note}: {outcome.notes.count(note)}" for note in sorted(set(outcome.notes))]
    outcome.publish()
