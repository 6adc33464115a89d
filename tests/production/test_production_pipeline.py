"""The demo pipeline on the production shape, end to end, driven as a team drives it.

Full-load DAG in chunked mode on the Spark cluster (REST API), a settlement backfill over three days (CLI),
source writes and the stream DAG (REST API), the maintenance DAG, then ``lakesync validate`` and ``status``
on the ``s3://`` root. Every verdict "Delta equals the source" is the independent oracle's. The tests run in
order on one shape (started once per session, about a minute).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from deltalake import DeltaTable
from lakesync_devkit.demo.load import run_load

from tests.deltakit import commit_history
from tests.production.conftest import (
    airflow_cli,
    assert_delta_equals_source,
    lakesync_cli,
    run_dag,
    wait_for_relay,
)

pytestmark = [pytest.mark.production, pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

SETTLEMENT_DAG = "lakesync_demo_settlement"


def _backfill_days() -> list[datetime]:
    """Three days whose intervals (02:00 to 02:00, the demo's "0 2 * * *") all end before the interval that
    unpausing the DAG schedules by itself (the newest complete one), so the backfill owns all three runs."""
    now = datetime.now(UTC)
    newest_start = now.replace(hour=2, minute=0, second=0, microsecond=0) - timedelta(days=1)
    if now.hour < 2:
        newest_start -= timedelta(days=1)
    first = newest_start.replace(hour=0)
    return [first - timedelta(days=n) for n in (3, 2, 1)]


DAYS = _backfill_days()


def test_full_load_dag_in_chunked_mode_on_the_cluster_lands_the_source_in_s3(production):
    tasks = run_dag(production, "lakesync_demo_full_load", conf={"mode": "chunked"}, timeout=900)
    assert set(tasks.values()) == {"success"}, tasks
    # The chunks were read and written by executors in the workers' JVMs, not in the driver.
    for worker in production.spark.workers:
        assert list((worker.home / "work").glob("app-*/*/stderr")), f"{worker.home.name} ran no executor"
    state = json.loads((production.home / "pipelines" / "demo" / "full_load.json").read_text())
    assert state["mode"] == "chunked"
    assert_delta_equals_source(production)


def _insert_backdated_transactions(production) -> int:
    database = production.settings.demo_database
    with production.mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT account_no FROM accounts ORDER BY account_no LIMIT 1")
        account = cur.fetchone()[0]
        cur.execute("SELECT COALESCE(MAX(id), 0) FROM transactions")
        first = cur.fetchone()[0] + 1
        rows = [(first + i, account, f"{day:%Y-%m-%d} 12:{i:02d}:00") for i, day in
                enumerate(d for d in DAYS for _ in range(4))]
        cur.executemany("INSERT INTO transactions (id, account_no, amount, kind, reference, booked_at, updated_at) "
                        "VALUES (%s, %s, 1.00, 'deposit', 'backdated', %s, %s)",
                        [(i, a, t, t) for i, a, t in rows])
    return len(rows)


def _settled_days(production, table: str) -> list[str]:
    history = commit_history(f"{production.delta_root}/{table}", production.storage_options())
    return sorted(c["lakesync.settlement.interval_start"][:10] for c in history
                  if "lakesync.settlement.interval_start" in c
                  and c["lakesync.settlement.interval_start"][:10] in {f"{d:%Y-%m-%d}" for d in DAYS})


def test_settlement_backfill_over_three_days_through_the_cli_settles_each_day_once(production):
    _insert_backdated_transactions(production)
    api = production.airflow.api
    api.wait_for_dag(SETTLEMENT_DAG)
    api.unpause(SETTLEMENT_DAG)
    done = airflow_cli(production, "backfill", "create", "--dag-id", SETTLEMENT_DAG,
                       "--from-date", f"{DAYS[0]:%Y-%m-%d}", "--to-date", f"{DAYS[-1]:%Y-%m-%d}T23:00:00")
    assert done.returncode == 0, done.stderr[-2000:]

    def backfill_runs() -> list[dict]:
        runs = api.get(f"/api/v2/dags/{SETTLEMENT_DAG}/dagRuns?limit=100")["dag_runs"]
        return [r for r in runs if r["run_type"] == "backfill"]

    deadline = time.monotonic() + 600
    while sum(r["state"] == "success" for r in backfill_runs()) < 3:
        assert not [r for r in backfill_runs() if r["state"] == "failed"], backfill_runs()
        assert time.monotonic() < deadline, backfill_runs()
        time.sleep(3)
    assert len(backfill_runs()) == 3
    assert _settled_days(production, "transactions") == [f"{d:%Y-%m-%d}" for d in DAYS]
    assert_delta_equals_source(production)


def test_stream_dag_applies_source_writes_to_the_s3_tables(production):
    with production.mariadb.connect(production.settings.demo_database) as conn:
        report = run_load(conn, production.settings.demo_database, rate=40, seconds=3)
    assert report.total > 0
    wait_for_relay(production)
    run_dag(production, "lakesync_demo_stream")
    assert_delta_equals_source(production)


def test_maintenance_dag_compacts_and_vacuums_the_s3_tables(production):
    tasks = run_dag(production, "lakesync_demo_maintenance")
    assert tasks == {"maintain": "success"}
    table = DeltaTable(f"{production.delta_root}/transactions", storage_options=production.storage_options())
    assert any(c.get("operation") == "OPTIMIZE" for c in table.history())
    assert_delta_equals_source(production)


def test_validate_and_status_read_the_s3_root(production):
    validated = lakesync_cli(production, "validate", "--pipeline", "demo")
    assert validated.returncode == 0, validated.stdout[-2000:] + validated.stderr[-2000:]
    status = lakesync_cli(production, "status", "--pipeline", "demo")
    assert status.returncode == 0, status.stderr[-2000:]
    assert "s3://lakesync/demo" in status.stdout
