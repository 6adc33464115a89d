"""Concurrent writers on the same Delta tables on S3: the stream, the settlement's compare-and-repair and the
maintenance DAG's OPTIMIZE/VACUUM, all started through Airflow's REST API while the source takes writes.

A commit conflict must be retried, or the step must fail loudly and be safe to re-run; afterwards a clean
round of each must succeed and the independent oracle must find Delta equal to the source (nothing lost,
nothing applied twice)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from deltalake import DeltaTable
from lakesync_devkit.demo.load import run_load

from tests.production.conftest import assert_delta_equals_source, wait_for_relay

pytestmark = [pytest.mark.production, pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

STREAM, SETTLEMENT, MAINTENANCE = ("lakesync_demo_stream", "lakesync_demo_settlement", "lakesync_demo_maintenance")
#: How long the source takes writes while the three writers run.
WRITE_SECONDS = 60
#: Settled tables that the stream also merges into.
SHARED_TABLES = ("transactions", "daily_balances")
#: Commit metadata in which the sink's commit path records which attempt of its step a commit was.
ATTEMPT_KEY = "lakesync.commit.attempt"


def _settlement_date(round_number: int) -> str:
    """A logical date whose data interval is today's (02:00 to 02:00, UTC), distinct per round: a manual run's
    interval is the one that ends at the last schedule tick on or before its logical date."""
    tomorrow = datetime.now(UTC).replace(hour=2, minute=0, second=0, microsecond=0) + timedelta(days=1)
    if datetime.now(UTC).hour < 2:
        tomorrow -= timedelta(days=1)
    return (tomorrow + timedelta(seconds=round_number)).isoformat()


def _history(stack, table: str, since: int) -> list[dict]:
    delta = DeltaTable(f"{stack.delta_root}/{table}", storage_options=stack.storage_options())
    return [c for c in delta.history() if c["version"] > since]


def _versions(stack) -> dict[str, int]:
    return {t: DeltaTable(f"{stack.delta_root}/{t}", storage_options=stack.storage_options()).version()
            for t in SHARED_TABLES}


def _round(api, number: int) -> list[tuple[str, str]]:
    """One round: all three DAGs triggered at once, then each awaited; returns (dag, state) pairs."""
    runs = [(STREAM, api.trigger(STREAM)),
            (SETTLEMENT, api.trigger(SETTLEMENT, logical_date=_settlement_date(number))),
            (MAINTENANCE, api.trigger(MAINTENANCE))]
    return [(dag, api.wait_for_run(dag, run_id, timeout=900)) for dag, run_id in runs]


@pytest.fixture(scope="module")
def concurrent_rounds(loaded):
    stack, api = loaded, loaded.airflow.api
    for dag in (STREAM, SETTLEMENT, MAINTENANCE):
        api.wait_for_dag(dag)
        api.unpause(dag)
    before = _versions(stack)
    database = stack.settings.demo_database
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with stack.mariadb.connect(database) as conn:
                run_load(conn, database, rate=15, seconds=WRITE_SECONDS, seed=11)
        except BaseException as exc:  # surfaced by the test
            errors.append(exc)

    writer = threading.Thread(target=write, name="source-writes")
    writer.start()
    states: list[tuple[str, str]] = []
    number = 0
    while writer.is_alive():
        number += 1
        states += _round(api, number)
    writer.join()
    assert not errors, errors
    # A clean round after the writes: every writer must be able to finish what a lost race left undone.
    wait_for_relay(stack)
    number += 1
    final = _round(api, number)
    return stack, before, states, final


def test_concurrent_stream_settlement_and_maintenance_lose_and_double_nothing(concurrent_rounds):
    stack, before, states, final = concurrent_rounds
    print(f"concurrent rounds: {states}; final round: {final}")
    assert all(state == "success" for _, state in final), final
    # A run that lost a commit race may fail, loudly; it must not have damaged anything.
    assert {dag for dag, state in states if state == "success"} == {STREAM, SETTLEMENT, MAINTENANCE}, states
    assert_delta_equals_source(stack)
    operations = {c.get("operation") for t in SHARED_TABLES for c in _history(stack, t, before[t])}
    assert "OPTIMIZE" in operations and "VACUUM END" in operations, operations
    settled = [c for t in SHARED_TABLES for c in _history(stack, t, before[t])
               if "lakesync.settlement.interval_start" in c]
    assert settled, "the settlement committed nothing during the concurrent rounds"


@pytest.mark.xfail(strict=True, reason="commit-conflict retries recorded as lakesync.commit.attempt come with "
                   "the sink's one Delta write path (branch sink), not yet on main")
def test_every_lakesync_commit_of_the_concurrent_rounds_records_its_attempt(concurrent_rounds):
    stack, before, _, _ = concurrent_rounds
    commits = [c for t in SHARED_TABLES for c in _history(stack, t, before[t])
               if c.get("operation") not in ("OPTIMIZE", "VACUUM START", "VACUUM END")]
    assert commits and all(ATTEMPT_KEY in c for c in commits), commits
    retried = [c for c in commits if int(c[ATTEMPT_KEY]) > 1]
    print(f"{len(commits)} lakesync commits, {len(retried)} after a retry")
