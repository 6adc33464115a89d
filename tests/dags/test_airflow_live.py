"""A running Airflow (``airflow standalone`` on the embedded stack): a real backfill, and the status view.

Slow (about a minute): it starts the API server, scheduler, DAG processor and triggerer, then runs
``airflow backfill create`` for three days of the settlement DAG, twice. The pipeline also has four hours
of stream history and a stopped table (seeded before Airflow starts), for the status view's charts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from lakesync_devkit.demo.database import create_demo_database
from lakesync_devkit.dev.airflow_home import repo_root
from lakesync_devkit.dev.airflow_runner import AirflowRunner
from lakesync_devkit.dev.processes import free_port

from lakesync.core.config import load_pipeline_file
from lakesync.monitoring.history import Interval, append_history, interval_rows
from lakesync.stream.progress import StreamProgress, TableProgress
from tests.deltakit import commit_history

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAG_ID = "lakesync_live_settlement"
# Generous: on a loaded 2-core CI machine ``airflow standalone`` starts (migrations, four processes) in minutes,
# and the scheduler's loops that queue, run and complete a backfill come slowly. Only a failure waits this long.
STARTUP_SECONDS = 300
SCHEDULER_SECONDS = 420


def _scan(uri, columns: list[str] | None = None) -> pa.Table:
    """Read with delta-rs's own reader (pyarrow's dataset reader can abort at exit, docs/sink.md)."""
    return pa.RecordBatchReader.from_stream(DeltaTable(str(uri)).scan(columns=columns)).read_all()


def _wait(what: str, check, *, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


STOP = ("a DDL at mysql-bin.000001:4 changed the primary key of accounts; re-run the full load for this "
        "table: `lakesync snapshot --pipeline live --tables accounts`")


def _seed_history_and_a_stopped_table(pipeline) -> None:
    """Four hours of 10-minute history rows for two tables (written with the product's history writer, as
    the stream writes them), and the stream's progress file with ``accounts`` stopped."""
    now = int(time.time() * 1000)
    progress = StreamProgress({
        "transactions": TableProgress(applied_position="0000000001:0000000100:0000", last_batch_id=24,
                                      last_batch_rows=5, rows_total=480),
        "accounts": TableProgress(applied_position="0000000001:0000000004:0000", last_batch_id=12, rows_total=40,
                                  stopped_reason=STOP),
    })
    rows = []
    for step in range(24):
        end = now - (23 - step) * 600_000
        for number, table in enumerate(progress.tables.values()):
            table.applied_source_ts_ms, table.last_batch_at_ms = end - (5 + 7 * (step % 5) + number) * 1000, end
        changes = {"transactions": 20 + 3 * step, "accounts": 2 if step < 12 else 0}
        validation = {"transactions": {"status": "mismatch" if step == 20 else "equal", "mismatched_keys": 1}}
        lags = {table: 5.0 + 7 * (step % 5) + number for number, table in enumerate(progress.tables)}
        rows.append(interval_rows("live", Interval(end - 600_000, changes), end, progress, validation, lags))
    append_history(pipeline, pa.concat_tables(rows), now_ms=now)
    progress.save(pipeline.pipeline_state_dir)


@pytest.fixture(scope="module")
def live(stack, tmp_path_factory):
    """A pipeline ``live`` over a demo database with three days of transactions, and Airflow running it."""
    root = tmp_path_factory.mktemp("live")
    database = "live_" + os.urandom(4).hex()
    with stack.mariadb.connect() as conn:
        create_demo_database(conn, database)
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO `{database}`.transactions (id, account_no, amount, kind, reference, booked_at, "
                "updated_at) VALUES (%s, 'AC0000000001', 1.00, 'deposit', 'ref', %s, %s)",
                [(i, f"2026-11-{17 + (i - 1) // 4} 12:00:00", f"2026-11-{17 + (i - 1) // 4} 12:00:00")
                 for i in range(1, 13)],
            )
    pipelines, delta_root = root / "pipelines", root / "delta"
    pipelines.mkdir()
    (pipelines / "live.yaml").write_text(yaml.safe_dump({
        "name": "live",
        "source": {"conn_id": "lakesync_demo_mysql", "database": database},
        "tables": {"include": ["transactions"],
                   "overrides": {"transactions": {"watermark": {"column": "updated_at"}}}},
        "kafka": {"conn_id": "lakesync_demo_kafka", "topic_prefix": "live"},
        "delta": {"root": str(delta_root)},
        "state_dir": str(root / "state"),
    }))
    _seed_history_and_a_stopped_table(load_pipeline_file(pipelines / "live.yaml"))
    port = free_port()
    runner = AirflowRunner(root / "airflow", connections=stack.connection_env(), pipelines_dir=pipelines,
                           api_port=port)
    log = (root / "standalone.log").open("w")
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "airflow", "standalone"], env=runner.env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait("the API server", lambda: _healthy(f"http://127.0.0.1:{port}/api/v2/monitor/health"),
              timeout=STARTUP_SECONDS)
        print(f"airflow standalone up in {time.monotonic() - started:.1f}s")
        yield runner, port, delta_root / "transactions", root / "standalone.log"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
        with stack.mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def _runs(runner: AirflowRunner) -> list[dict]:
    """The DAG's backfill runs (unpausing also schedules the latest interval; that run is left out)."""
    done = runner.run("-m", "airflow", "dags", "list-runs", DAG_ID, "-o", "json")
    lines = [line for line in done.stdout.splitlines() if line.startswith(("[{", "[]"))]
    return [run for run in (json.loads(lines[-1]) if lines else []) if run["run_id"].startswith("backfill__")]


def _backfill(runner: AirflowRunner, *extra: str) -> None:
    """``airflow backfill create`` for the runs of 17, 18 and 19 November (a paused DAG's runs stay queued)."""

    def created() -> bool:
        runner.run("-m", "airflow", "dags", "unpause", DAG_ID)
        done = runner.run("-m", "airflow", "backfill", "create", "--dag-id", DAG_ID, "--from-date",
                          "2026-11-17", "--to-date", "2026-11-19T23:00:00", *extra)
        return done.returncode == 0 or print(done.stderr[-800:])  # the DAG may not be parsed yet

    # Airflow allows one running backfill per DAG and marks one complete in a later scheduler loop, which
    # under load comes well after its last run succeeded; until then a new backfill is refused.
    _wait("the backfill to be accepted", created, timeout=SCHEDULER_SECONDS, every=3)


def _settled_intervals(table: Path) -> list[str]:
    commits = commit_history(table)
    return sorted(c["lakesync.settlement.interval_start"][:10] for c in commits
                  if c.get("lakesync.settlement.interval_start", "") < "2026-11-20")


def test_backfill_of_three_days_lands_each_day_once_and_again_changes_nothing(live):
    runner, _, table, log = live
    started = time.monotonic()
    _backfill(runner)

    def three_done() -> list[dict] | None:
        runs = _runs(runner)
        if any(r["state"] == "failed" for r in runs):
            raise AssertionError(f"a backfill run failed: {runs}\n{log.read_text()[-3000:]}")
        return runs if sum(r["state"] == "success" for r in runs) >= 3 else None

    three_done_runs = _wait("three successful backfill runs", three_done, timeout=SCHEDULER_SECONDS, every=3)
    print(f"backfill of 3 days: {time.monotonic() - started:.1f}s")
    assert len(three_done_runs) == 3
    assert _settled_intervals(table) == ["2026-11-17", "2026-11-18", "2026-11-19"]
    assert _scan(str(table), ["id"]).num_rows == 12
    commits = len(_settled_intervals(table))

    again = datetime.now(UTC)
    _backfill(runner, "--reprocess-behavior", "completed")

    def rerun_done() -> bool:
        runs = _runs(runner)
        finished = [r for r in runs if r["state"] == "success" and r["end_date"]
                    and datetime.fromisoformat(r["end_date"]) > again]
        return len(finished) >= 3

    _wait("the re-run backfill", rerun_done, timeout=SCHEDULER_SECONDS, every=3)
    assert len(_settled_intervals(table)) == commits, "re-running the three days committed nothing"


CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage"]


def _chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CHROMIUM, f"--user-data-dir={profile}", *extra, url], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_status_view_in_headless_chromium_shows_charts_the_stopped_table_and_its_recovery_command(
        live, tmp_path_factory):
    _, port, table, _ = live
    _wait("a settled table", lambda: (table / "_delta_log").is_dir(), timeout=SCHEDULER_SECONDS, every=3)
    url = f"http://127.0.0.1:{port}/lakesync/status"
    profiles = tmp_path_factory.mktemp("chromium")
    out = Path(os.environ.get("LAKESYNC_TEST_OUTPUT") or repo_root() / ".lakesync" / "test-output") / "status_view"
    out.mkdir(parents=True, exist_ok=True)
    dom = _chromium(url, profiles / "dom", "--virtual-time-budget=3000", "--dump-dom")
    page = dom.stdout
    assert "pipeline live" in page, dom.stderr[-2000:]
    assert "last settled interval" in page and "(run 1)" in page
    for chart in ("lag", "changes", "validation"):
        assert page.count(f"class=\"chart {chart}\"") == 2, f"one {chart} chart per table"
    assert page.count("<polyline") >= 2, "the lag charts draw the seeded hours as lines"
    assert page.count("class=\"bar\"") >= 24 + 12, "one bar per interval with changes"
    assert "class=\"bad\"" in page, "the seeded validation mismatch shows"
    assert "stopped" in page and "changed the primary key of accounts" in page
    assert "<code class=\"command\">lakesync snapshot --pipeline live --tables accounts</code>" in page
    assert "href=\"../dags/lakesync_live_stream\"" in page
    for mode, extra in (("light", ()), ("dark", ("--force-dark-mode", "--blink-settings=preferredColorScheme=0"))):
        shot = out / f"status_view_{mode}.png"
        _chromium(url, profiles / mode, "--window-size=1300,1500", "--virtual-time-budget=3000",
                  f"--screenshot={shot}", *extra)
        assert shot.stat().st_size > 10_000, f"{mode} screenshot"
    print(f"screenshots: {out}")
