"""The dev kit's Debezium worker configuration, without servers: what it writes, and how it reads back the
position Connect stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from lakesync_devkit.bench.debezium_runs import stored_position
from lakesync_devkit.dev.debezium import (
    DDL_FILTER_KEY,
    ConnectorSettings,
    DebeziumConnect,
    SourceDatabase,
    _write_properties,
)

from lakesync.core.errors import StackError
from lakesync.core.positions import SourcePosition

#: An offsets file as Connect standalone 4.1 wrote it for Debezium 3.5 (a Java-serialized HashMap whose key
#: and value are JSON bytes), from the recipe's run.
OFFSETS_FILE = (
    b'\xac\xed\x00\x05sr\x00\x11java.util.HashMap\x05\x07\xda\xc1\xc3\x16`\xd1\x03\x00\x02F\x00\nloadFactorI\x00'
    b'\tthresholdxp?@\x00\x00\x00\x00\x00\x0cw\x08\x00\x00\x00\x10\x00\x00\x00\x01ur\x00\x02[B\xac\xf3\x17\xf8\x06'
    b'\x08T\xe0\x02\x00\x00xp\x00\x00\x00*["lakesync-mariadb",{"server":"lakesync"}]uq\x00~\x00\x02\x00\x00\x00b'
    b'{"ts_sec":1795656001,"file":"mariadb-bin.000001","pos":108118233,"gtids":"0-1-2036","server_id":1}x'
)


def _worker(tmp_path: Path, **connector: object) -> DebeziumConnect:
    settings = ConnectorSettings(**{"databases": ("bank",), **connector})  # type: ignore[arg-type]
    return DebeziumConnect(home=tmp_path / "debezium", port=24000, bootstrap="127.0.0.1:29092",
                           source=SourceDatabase("127.0.0.1", 23306, "debezium", "secret"), connector=settings)


def test_rest_listener_binds_loopback_and_offsets_live_under_the_home(tmp_path: Path) -> None:
    worker = _worker(tmp_path).worker_properties()
    assert worker["listeners"] == "http://127.0.0.1:24000"
    assert worker["offset.storage.file.filename"] == str(tmp_path / "debezium" / "offsets" / "connect.offsets")
    assert worker["plugin.discovery"] == "service_load"
    assert worker["key.converter.schemas.enable"] == worker["value.converter.schemas.enable"] == "true"
    assert worker["producer.compression.type"] == "lz4" and worker["producer.enable.idempotence"] == "true"


def test_connector_carries_the_settings_a_team_would_use(tmp_path: Path) -> None:
    connector = _worker(tmp_path, tables=("bank.accounts",), topic_prefix="dbz",
                        snapshot_mode="no_data").connector_properties()
    assert connector["topic.prefix"] == "dbz"
    assert connector["database.include.list"] == "bank" and connector["table.include.list"] == "bank.accounts"
    assert connector["snapshot.mode"] == "no_data"
    assert connector["decimal.handling.mode"] == "precise"
    assert connector["time.precision.mode"] == "adaptive_time_microseconds"
    assert connector["bigint.unsigned.handling.mode"] == "precise"
    assert connector["include.schema.changes"] == "true"
    assert connector["heartbeat.interval.ms"] == "9000" and connector["connect.keep.alive.interval.ms"] == "12500"
    assert connector["schema.history.internal.file.filename"].endswith("history/dbz.dat")
    assert connector[DDL_FILTER_KEY].endswith(r"(?is).*\binet[46]\b.*")


def test_every_table_of_the_databases_is_captured_when_none_is_named(tmp_path: Path) -> None:
    assert "table.include.list" not in _worker(tmp_path).connector_properties()


def test_properties_files_keep_the_backslashes_of_regular_expressions(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    _write_properties(path, {"filter": r"(?is).*\binet[46]\b.*"}, private=True)
    assert path.read_text() == "filter=(?is).*\\\\binet[46]\\\\b.*\n"  # Java reads \\ as one backslash
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("settings, problem", [
    ({"databases": ()}, "at least one database"),
    ({"databases": ("bank",), "snapshot_mode": "schema_only"}, "unknown snapshot mode"),
    ({"databases": ("bank",), "tables": ("shop.orders",)}, "shop.orders"),
    ({"databases": ("bank",), "tables": ("accounts",)}, "accounts"),
])
def test_connector_settings_refuse_what_debezium_would_not_capture(settings: dict, problem: str) -> None:
    with pytest.raises(StackError, match=problem):
        ConnectorSettings(**settings)


def test_stored_position_reads_the_binlog_position_connect_wrote() -> None:
    assert stored_position(OFFSETS_FILE) == SourcePosition("mariadb-bin.000001", 108118233)


def test_stored_position_refuses_a_file_without_exactly_one_offset() -> None:
    with pytest.raises(StackError, match="found 0"):
        stored_position(b"\xac\xed\x00\x05sr\x00\x11java.util.HashMap")
