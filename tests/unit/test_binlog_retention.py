"""The binlog check's verdicts and how ``status`` and the page show them (no servers: pure functions)."""

from __future__ import annotations

import io
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console

from lakesync.cli.status import VALIDATION_STYLES, print_status
from lakesync.core.config import parse_pipeline
from lakesync.core.positions import SourcePosition
from lakesync.full_load.state import LoadState
from lakesync.monitoring.attention import attention
from lakesync.monitoring.binlog_retention import (
    NeededPosition,
    ServerBinlogs,
    assess,
    binlog_attention,
    expire_seconds,
    needed_positions,
)
from lakesync.monitoring.display import position_text, status_file_stem
from lakesync.stream.progress import StreamProgress

HOUR_MS = 3_600_000
NOW_MS = 1_800_000_000_000
FILES = ["binlog.000010", "binlog.000011", "binlog.000012"]
RELOAD = "lakesync snapshot --pipeline p --restart"


def _needed(file: str, *, hours_ago: float | None) -> NeededPosition:
    known = None if hours_ago is None else NOW_MS - int(hours_ago * HOUR_MS)
    return NeededPosition(SourcePosition(file, 1542), "the relay (its stored progress)", known)


def _server(*, expire_hours: float | None = 24) -> ServerBinlogs:
    return ServerBinlogs(FILES, None if expire_hours is None else int(expire_hours * 3600), NOW_MS)


def test_expiry_is_binlog_expire_logs_seconds_else_expire_logs_days_and_zero_means_never() -> None:
    assert expire_seconds({"binlog_expire_logs_seconds": "3600", "expire_logs_days": "7"}) == 3600
    assert expire_seconds({"binlog_expire_logs_seconds": "0", "expire_logs_days": "2.000000"}) == 172_800
    assert expire_seconds({"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}) is None
    assert expire_seconds({}) is None


def test_a_needed_file_the_server_no_longer_lists_is_purged() -> None:
    verdict = assess(_needed("binlog.000007", hours_ago=1), _server(), warn_within_seconds=3600)
    assert verdict["state"] == "purged"
    assert verdict["needed_position"] == "binlog.000007:1542" and verdict["oldest_file"] == "binlog.000010"


def test_an_old_file_close_to_expiry_warns_and_one_far_from_it_does_not() -> None:
    close = assess(_needed("binlog.000010", hours_ago=22), _server(), warn_within_seconds=6 * 3600)
    assert close["state"] == "expiring" and close["expires_in_seconds"] == 2 * 3600
    far = assess(_needed("binlog.000010", hours_ago=1), _server(), warn_within_seconds=6 * 3600)
    assert far["state"] == "ok" and far["expires_in_seconds"] == 23 * 3600


def test_the_file_being_written_never_expires_nor_does_a_binlog_without_automatic_expiry() -> None:
    assert assess(_needed("binlog.000012", hours_ago=1000), _server(), warn_within_seconds=3600)["state"] == "ok"
    never = assess(_needed("binlog.000010", hours_ago=1000), _server(expire_hours=None), warn_within_seconds=3600)
    assert never["state"] == "ok" and never["expires_in_seconds"] is None


def test_without_a_known_time_no_estimate_is_made_up() -> None:
    verdict = assess(_needed("binlog.000010", hours_ago=None), _server(), warn_within_seconds=3600)
    assert verdict["state"] == "ok" and verdict["expires_in_seconds"] is None


def test_purged_is_an_alert_with_the_one_command_and_expiring_a_warning_without_one() -> None:
    purged = assess(_needed("binlog.000007", hours_ago=1), _server(), warn_within_seconds=3600)
    level, message, command = binlog_attention("p", purged) or ("", "", None)
    assert level == "alert" and command == RELOAD
    assert "binlog.000007:1542" in message and "no longer on the server" in message and "lakesync" not in message
    expiring = assess(_needed("binlog.000010", hours_ago=22), _server(), warn_within_seconds=6 * 3600)
    assert binlog_attention("p", expiring) is not None
    level, message, command = binlog_attention("p", expiring) or ("", "", None)
    assert level == "warning" and command is None and "2.0 h" in message
    assert binlog_attention("p", {"error": "cannot check the source's binlog: refused"})[0] == "warning"  # type: ignore[index]
    assert binlog_attention("p", None) is None


STOP = ("a DDL at binlog.000003:1234 changed the primary key; re-run the full load for this table: "
        "`lakesync snapshot --pipeline p --tables accounts`")


def _status(binlog: dict | None) -> dict:
    return {
        "pipeline": "p", "database": "bank", "delta_root": "/d",
        "full_load": {"position": "00000003.000000000004.000000", "position_token": "binlog.000003:4"},
        "relay": {"position": "00000012.000000001542.000000", "position_token": "binlog.000012:1542",
                  "covered_from": "00000003.000000000004.000000"},
        "binlog": binlog,
        "tables": [{"table": "accounts", "semantics": None, "key_columns": None, "full_load": None,
                    "applied_position": "00000003.000000001234.000002",
                    "stream": {"stopped_reason": STOP, "applied_position": "00000003.000000001234.000002"},
                    "last_validation": None}],
    }


def _printed(status: dict, *, wide: bool = False) -> str:
    out = io.StringIO()
    print_status(Console(file=out, width=200, color_system=None), status, lag_alert_seconds=60, wide=wide)
    return out.getvalue()


def test_a_stopped_table_shows_its_command_once_in_status() -> None:
    for wide in (False, True):
        assert _printed(_status(None), wide=wide).count("lakesync snapshot --pipeline p --tables accounts") == 1


def test_a_purged_binlog_comes_first_and_its_reload_is_the_only_command_shown() -> None:
    purged = assess(_needed("binlog.000007", hours_ago=1), _server(), warn_within_seconds=3600)
    items = attention(_status(purged), lag_alert_seconds=60)
    assert [(item.level, item.table, item.command) for item in items] == [
        ("alert", None, RELOAD), ("alert", "accounts", None)]
    text = _printed(_status(purged))
    assert text.count(RELOAD) == 1 and "--tables accounts" not in text


def test_status_shows_positions_in_one_format_the_one_users_type() -> None:
    status = _status(None)
    stem = status_file_stem(status)
    assert stem == "binlog"
    assert position_text("00000003.000000001234.000002", stem) == "binlog.000003:1234:2"
    assert position_text(None, stem) == "-"
    text = _printed(status, wide=True)
    assert "binlog.000012:1542" in text and "binlog.000003:4" in text and "binlog.000003:1234:2" in text
    assert "00000003.000000001234" not in text and "00000012." not in text


def test_an_append_only_tables_not_comparable_result_is_information_not_a_warning_or_error_colour(monkeypatch
                                                                                                    ) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "plugins"))
    from lakesync_airflow.charts import status_strip  # the page's validation strip

    start = datetime(2026, 1, 1, tzinfo=UTC)
    strip = status_strip([(start, start + timedelta(hours=1), "not_comparable")], start=start,
                         end=start + timedelta(hours=2), title="t")
    assert "class='info'" in strip and "class='bad'" not in strip
    assert VALIDATION_STYLES["not_comparable"] not in {VALIDATION_STYLES["mismatch"], "yellow", "red"}


def test_the_status_page_shows_a_command_once_and_positions_in_the_same_format(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "plugins"))
    from lakesync_airflow.views import render

    for binlog, command in ((None, "lakesync snapshot --pipeline p --tables accounts"),
                            (assess(_needed("binlog.000007", hours_ago=1), _server(), warn_within_seconds=3600),
                             RELOAD)):
        status = {**_status(binlog), "history": {}}
        status["attention"] = [asdict(item) for item in attention(status, lag_alert_seconds=60)]
        page = render([status], now=datetime(2026, 1, 1, tzinfo=UTC))
        assert page.count("lakesync snapshot") == 1 and page.count(command) == 1
        assert "binlog.000003:1234:2" in page and "binlog.000012:1542" in page and "00000003.0000" not in page


def _pipeline_with_load(tmp_path: Path, load_position: SourcePosition):
    pipeline = parse_pipeline({
        "name": "p", "source": {"conn_id": "c", "database": "db"},
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "p"},
        "delta": {"root": str(tmp_path / "delta")}, "state_dir": str(tmp_path / "state"),
    }, source_name="p.yaml")
    load = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    load.record_position(load_position)
    load.finished_at = "2026-11-26T00:00:00Z"
    load.save()
    return pipeline


def test_before_the_relays_first_start_the_loads_position_is_needed(tmp_path: Path) -> None:
    loaded = SourcePosition("binlog.000010", 1542)
    pipeline = _pipeline_with_load(tmp_path, loaded)
    (needed,) = needed_positions(pipeline, None)
    assert needed.position == loaded and "first start" in needed.needed_by


def test_topics_another_producer_feeds_need_nothing_from_the_binlog_for_the_relay(tmp_path: Path) -> None:
    """Debezium's topics: the relay never ran, the stream applied changes newer than the load; Debezium keeps
    its own position, so an aged-out load position is no purge to alert on."""
    loaded = SourcePosition("binlog.000010", 1542)
    pipeline = _pipeline_with_load(tmp_path, loaded)
    progress = StreamProgress()
    progress.record("t", batch_id=0, rows=1, position=SourcePosition("binlog.000011", 4).key(), source_ts_ms=None)
    progress.save(pipeline.pipeline_state_dir)
    assert needed_positions(pipeline, None) == []
    (needed,) = needed_positions(pipeline, SourcePosition("binlog.000011", 4))
    assert needed.needed_by == "the relay (its stored progress)", "a relay that ran is watched as before"
