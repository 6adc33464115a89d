"""Start-up guards: refused settings name the variable, its value and the fix; positions and server ids."""

from __future__ import annotations

import pytest
from pymysqlreplication import BinLogStreamReader

from lakesync.core.errors import BinlogPurgedError, ServerIdInUseError, SourceError
from lakesync.core.positions import SourcePosition
from lakesync.source.server_checks import (
    check_binlog_settings,
    check_position_available,
    check_server_id_unique,
    current_position,
)

GOOD = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}


def _reader(values: dict[str, str]):
    return lambda _conn, _names: dict(values)


@pytest.mark.parametrize(("variable", "value", "fix"), [
    ("log_bin", "OFF", "--log-bin"),
    ("binlog_format", "STATEMENT", "binlog_format='ROW'"),
    ("binlog_format", "MIXED", "binlog_format='ROW'"),
    ("binlog_row_image", "MINIMAL", "binlog_row_image='FULL'"),
    ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata='FULL'"),
])
def test_each_wrong_binlog_setting_is_refused_naming_variable_value_and_fix(variable, value, fix) -> None:
    with pytest.raises(SourceError) as refused:
        check_binlog_settings(None, read_variables=_reader({**GOOD, variable: value}))
    assert f"{variable} is {value}" in refused.value.message
    assert fix in (refused.value.hint or "")


def test_a_server_without_row_metadata_support_is_refused() -> None:
    without = {k: v for k, v in GOOD.items() if k != "binlog_row_metadata"}
    with pytest.raises(SourceError, match="no binlog_row_metadata variable"):
        check_binlog_settings(None, read_variables=_reader(without))


@pytest.mark.integration
def test_the_embedded_server_passes_and_reports_its_position_with_gtid(mariadb) -> None:
    with mariadb.connect() as conn:
        check_binlog_settings(conn)
        position = current_position(conn)
        check_position_available(conn, position)
    assert position.offset > 0 and position.gtid


@pytest.mark.integration
def test_a_position_in_a_purged_file_is_refused(mariadb) -> None:
    with mariadb.connect() as conn, pytest.raises(BinlogPurgedError, match=r"binlog purged: binlog\.000000"):
        check_position_available(conn, SourcePosition("binlog.000000", 4))


@pytest.mark.integration
def test_a_position_past_the_end_of_its_file_is_refused(mariadb) -> None:
    with mariadb.connect() as conn:
        here = current_position(conn)
        with pytest.raises(BinlogPurgedError, match="past the end"):
            check_position_available(conn, SourcePosition(here.file, here.offset + 10**9))


@pytest.mark.integration
def test_a_server_id_already_streaming_the_binlog_is_refused(mariadb) -> None:
    with mariadb.connect() as conn:
        own = conn.cursor()
        own.execute("SELECT @@server_id")
        with pytest.raises(SourceError, match="own server_id"):
            check_server_id_unique(conn, int(own.fetchone()[0]))
        here = current_position(conn)
        reader = BinLogStreamReader(
            connection_settings={"host": mariadb.host, "port": mariadb.port, "user": "root",
                                 "password": mariadb.root_password},
            server_id=47_111, log_file=here.file, log_pos=here.offset, resume_stream=True, blocking=True,
            report_slave="other-relay", enable_logging=False, slave_heartbeat=0.2,
        )
        try:
            reader.fetchone()  # connects and registers; returns at the first heartbeat
            with pytest.raises(ServerIdInUseError, match="already used"):
                check_server_id_unique(conn, 47_111)
            check_server_id_unique(conn, 47_112)
        finally:
            reader.close()
