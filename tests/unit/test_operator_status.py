"""``lakesync status`` in an 80-column terminal, and what it says needs attention (no servers: state files only)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from lakesync.cli.status import print_status
from lakesync.monitoring.attention import attention, command_in

LONG = "customer_account_balances_daily"
STOP = ("a DDL at mysql-bin.000003:1234 changed the primary key; re-run the full load for this table: "
        "`lakesync snapshot --pipeline ops --tables accounts`")


@pytest.fixture
def pipeline_dir(tmp_path: Path) -> Path:
    """A pipeline file and the stream's progress file for three tables, one stopped; the newest change applied
    to ``customers`` is 15 minutes old, which is no lag by itself (a quiet table)."""
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


def _rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out.splitlines() if line.split() and line.split()[0] in
            (LONG, "customers", "accounts")}


def test_status_at_80_columns_shows_every_table_name_and_state_uncut(pipeline_dir: Path) -> None:
    out = _status(pipeline_dir)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "…" not in out, out
    rows = _rows(out)
    assert rows[LONG][1] == "streaming" and rows["customers"][1] == "streaming", out
    assert rows[LONG][2] == "-", "without the broker (--no-relay) no lag is known, and none is made up"
    assert rows["accounts"][1] == "stopped", out


def _judged(lag_alert_seconds: float = 60) -> dict:
    """What ``pipeline_status`` gives for the fixture's tables when the broker says: LONG is caught up,
    customers has 12 offsets pending, the oldest 15 minutes old."""
    def table(name: str, **stream) -> dict:
        lag = stream.get("lag_seconds")
        return {"table": name, "semantics": None, "key_columns": None, "full_load": None, "delta": None,
                "last_validation": None, "applied_position": None, "stream": {"applied_position": "x", **stream},
                "lagging": lag is not None and lag > lag_alert_seconds}

    return {"pipeline": "ops", "database": "bank", "delta_root": "/d", "tables": [
        table(LONG, lag_seconds=0.0, pending=0),
        table("customers", lag_seconds=900.0, pending=12, oldest_pending_at="2026-11-26T07:00:00.000000Z"),
        table("accounts", lag_seconds=0.0, pending=0, stopped_reason=STOP)],
        "relay": {"position": "p", "silent_seconds": 2.0}}


def _printed(status: dict, *, wide: bool = False) -> str:
    console = Console(width=80, record=True, file=io.StringIO())
    print_status(console, status, lag_alert_seconds=60, wide=wide)
    return console.export_text()


def test_status_at_80_columns_shows_the_lag_uncut_and_a_lagging_table(pipeline_dir: Path) -> None:
    out = _printed(_judged())
    assert all(len(line) <= 80 for line in out.splitlines()), out
    rows = _rows(out)
    assert rows[LONG][1:4] == ["streaming", "0.0", "s"], out
    assert rows["customers"][1:4] == ["lagging", "15", "min"], out
    assert "last heard 2 s ago" in out


def test_status_says_first_what_needs_attention_with_the_recovery_command() -> None:
    out = _printed(_judged())
    head = out[:out.index("state")]
    assert "2 thing(s) need attention" in head
    assert head.index("accounts") < head.index("customers"), "a stopped table comes before a lagging one"
    assert "run: lakesync snapshot --pipeline ops --tables accounts" in head.replace("\n  ", " ").replace("  ", " ")
    assert "12 offsets not applied" in " ".join(head.split())


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
    assert command_in(STOP) == "lakesync snapshot --pipeline ops --tables accounts"
    assert command_in("no command here") is None
