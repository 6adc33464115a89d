"""``lakesync status`` in an 80-column terminal, and what it says needs attention (no servers: state files only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakesync.monitoring.attention import attention, recovery_command

LONG = "customer_account_balances_daily"
STOP = ("a DDL at mysql-bin.000003:1234 changed the primary key; re-run the full load for this table: "
        "`lakesync snapshot --pipeline ops --tables accounts`")


@pytest.fixture
def pipeline_dir(tmp_path: Path) -> Path:
    """A pipeline file and the stream's progress file for three tables: streaming, lagging, stopped."""
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "ops.yaml").write_text(
        "name: ops\nsource: {conn_id: none, database: bank}\nkafka: {bootstrap_servers: 'localhost:1', "
        f"topic_prefix: t}}\ndelta: {{root: {tmp_path}/delta}}\nstate_dir: {tmp_path}/state\n"
        "stream: {lag_alert_seconds: 60}\n")
    now = int(time.time() * 1000)
    tables = {
        LONG: {"applied_position": "0000000003:0000004711:0000", "applied_source_ts_ms": now - 2_000,
               "last_batch_id": 7, "last_batch_rows": 12, "last_batch_at_ms": now},
        "customers": {"applied_position": "0000000003:0000000042:0000", "applied_source_ts_ms": now - 900_000,
                      "last_batch_id": 3, "last_batch_rows": 1, "last_batch_at_ms": now - 900_000},
        "accounts": {"applied_position": "0000000003:0000000010:0000", "applied_source_ts_ms": now - 5_000,
                     "last_batch_id": 7, "last_batch_rows": 0, "last_batch_at_ms": now, "stopped_reason": STOP},
    }
    (tmp_path / "state" / "ops").mkdir(parents=True)
    (tmp_path / "state" / "ops" / "stream_progress.json").write_text(json.dumps({"tables": tables}))
    return tmp_path


def _status(pipeline_dir: Path, *extra: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "LINES": "50"}
    result = subprocess.run(
        [sys.executable, "-m", "lakesync.cli.main", "status", "--pipeline", "ops", "--pipelines-dir",
         str(pipeline_dir / "pipelines"), "--no-relay", *extra],
        capture_output=True, text=True, env=env, timeout=120, check=True)
    return result.stdout


def test_status_at_80_columns_shows_every_table_name_state_and_lag_uncut(pipeline_dir: Path) -> None:
    out = _status(pipeline_dir)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    assert "…" not in out, out
    rows = {line.split()[0]: line.split() for line in lines if line.split() and line.split()[0] in
            (LONG, "customers", "accounts")}
    assert rows[LONG][1] == "streaming" and float(rows[LONG][2]) >= 2.0 and rows[LONG][3] == "s", out
    assert rows["customers"][1:4] == ["lagging", "15", "min"], out
    assert rows["accounts"][1] == "stopped", out


def test_status_says_first_what_needs_attention_with_the_recovery_command(pipeline_dir: Path) -> None:
    out = _status(pipeline_dir)
    head = out[:out.index("state")]
    assert "2 thing(s) need attention" in head
    assert head.index("accounts") < head.index("customers"), "a stopped table comes before a lagging one"
    assert "run: lakesync snapshot --pipeline ops --tables accounts" in head.replace("\n  ", " ").replace("  ", " ")


def test_status_wide_adds_the_stop_message_and_json_stays_json(pipeline_dir: Path) -> None:
    assert "primary key" in _status(pipeline_dir, "--wide").replace("\n", " ")
    document = json.loads(_status(pipeline_dir, "--json"))
    assert {t["table"] for t in document["tables"]} == {LONG, "customers", "accounts"}


def test_attention_is_empty_when_all_is_well() -> None:
    status = {"pipeline": "p", "tables": [{"table": "a", "stream": {"lag_seconds": 1.0}, "last_validation":
                                           {"status": "equal"}}], "relay": {"position": "x"}}
    assert attention(status, lag_alert_seconds=60) == []


def test_attention_reports_a_failed_validation_and_an_unreadable_relay() -> None:
    status = {"pipeline": "p", "tables": [{"table": "a", "stream": {"lag_seconds": 1.0}, "last_validation":
                                           {"status": "mismatch", "mismatched_keys": 3, "finished_at": "t"}}],
              "relay": {"error": "broker down"}}
    items = attention(status, lag_alert_seconds=60)
    assert [(i.level, i.table) for i in items] == [("alert", None), ("warning", "a")]
    assert "3 differing keys" in items[1].message


def test_recovery_command_is_read_from_the_stop_message() -> None:
    assert recovery_command(STOP) == "lakesync snapshot --pipeline ops --tables accounts"
    assert recovery_command("no command here") is None
