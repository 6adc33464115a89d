"""A source that refuses us or is set up wrong: wrong password, missing grants, binlog off or not ROW/FULL,
a session writing partial row images, a purged position, a table that is not there.

Each case asserts the error class and the words a DBA needs (what, which setting, the fix), and that nothing
was written half-way: no Delta table, no table claimed done in ``full_load.json``, relay progress not past
the refused event.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from lakesync.core.errors import BinlogPurgedError, ConfigError, SourceError
from lakesync.core.positions import SourcePosition
from lakesync.source.server_checks import check_binlog_settings, current_position, server_variables
from tests.bad_input.badkit import Lab, delta_state, done_tables

pytestmark = [pytest.mark.bad_input, pytest.mark.integration]


@pytest.fixture
def lab(stack, monkeypatch, tmp_path, fresh_database) -> Lab:
    lab = Lab(stack, monkeypatch, tmp_path, fresh_database)
    lab.root_sql("CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(20))",
                 "INSERT INTO orders VALUES (1, 'a'), (2, 'b')")
    return lab


@pytest.fixture
def limited_user(stack, monkeypatch) -> Iterator:
    """``make(grants)`` creates a user with only ``grants`` and points the pipeline's connection at it."""
    created: list[str] = []

    def make(grants: str) -> str:
        user, password = f"lim_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        with stack.mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
            if grants:
                cur.execute(f"GRANT {grants} ON *.* TO '{user}'@'127.0.0.1'")
        created.append(user)
        port = stack.settings.mariadb_port
        monkeypatch.setenv("AIRFLOW_CONN_LAKESYNC_DEMO_MYSQL", f"mysql://{user}:{password}@127.0.0.1:{port}/")
        return password

    yield make
    with stack.mariadb.connect() as conn, conn.cursor() as cur:
        for user in created:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")


def _nothing_loaded(lab: Lab, pipeline) -> None:
    assert delta_state(lab.delta_root) == {}
    assert done_tables(pipeline) == set()


def test_wrong_password_is_refused_by_the_full_load_without_showing_it(lab, stack, monkeypatch):
    port = stack.settings.mariadb_port
    monkeypatch.setenv("AIRFLOW_CONN_LAKESYNC_DEMO_MYSQL", f"mysql://lakesync:WrongPass-9f3@127.0.0.1:{port}/")
    pipeline = lab.pipeline()
    with pytest.raises(SourceError) as caught:
        lab.full_load(pipeline)
    assert "refused the credentials of lakesync@127.0.0.1" in caught.value.message
    assert "password" in (caught.value.hint or "")
    assert "WrongPass-9f3" not in str(caught.value)
    _nothing_loaded(lab, pipeline)


def test_wrong_password_is_refused_by_the_relay(lab, stack, monkeypatch):
    port = stack.settings.mariadb_port
    monkeypatch.setenv("AIRFLOW_CONN_LAKESYNC_DEMO_MYSQL", f"mysql://lakesync:WrongPass-9f3@127.0.0.1:{port}/")
    pipeline = lab.pipeline()
    with pytest.raises(SourceError) as caught:
        lab.relay(pipeline)
    assert "Access denied" in caught.value.message and "lakesync@127.0.0.1" in caught.value.message
    assert "WrongPass-9f3" not in str(caught.value)
    assert lab.relay_position(pipeline) is None


def test_a_user_without_select_cannot_load_and_is_told_which_grant(lab, limited_user):
    limited_user("REPLICATION SLAVE, REPLICATION CLIENT")
    pipeline = lab.pipeline()
    with pytest.raises(SourceError) as caught:
        lab.full_load(pipeline)
    assert lab.database in caught.value.message
    assert "GRANT SELECT" in (caught.value.hint or "")
    _nothing_loaded(lab, pipeline)


def test_a_user_without_replication_slave_cannot_relay(lab, limited_user):
    limited_user("SELECT, REPLICATION CLIENT")
    pipeline = lab.pipeline()
    with pytest.raises(SourceError) as caught:
        lab.relay(pipeline)
    assert "REPLICATION SLAVE" in str(caught.value)
    position = lab.relay_position(pipeline)
    assert position is None or position <= current_position(lab.stack.mariadb.connect())


def test_a_user_without_replication_client_cannot_read_positions(lab, limited_user):
    limited_user("SELECT, REPLICATION SLAVE")
    pipeline = lab.pipeline()
    with pytest.raises(SourceError) as caught:
        lab.relay(pipeline)
    assert "REPLICATION CLIENT" in str(caught.value)
    assert lab.relay_position(pipeline) is None


def _variables_with(**overrides: str):
    def read(conn, names):
        return {**server_variables(conn, names), **overrides}
    return read


@pytest.mark.parametrize(("variable", "value", "fix"), [
    ("log_bin", "OFF", "--log-bin"),
    ("binlog_format", "STATEMENT", "binlog_format='ROW'"),
    ("binlog_format", "MIXED", "binlog_format='ROW'"),
    ("binlog_row_image", "MINIMAL", "binlog_row_image='FULL'"),
    ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata='FULL'"),
])
def test_binlog_settings_lakesync_cannot_read_are_refused_with_the_fix(mariadb, variable, value, fix):
    with mariadb.connect() as conn, pytest.raises(SourceError) as caught:
        check_binlog_settings(conn, read_variables=_variables_with(**{variable: value}))
    assert f"{variable} is {value}" in caught.value.message
    assert fix in (caught.value.hint or "")


def test_a_session_writing_minimal_row_images_stops_the_relay_before_that_event(lab):
    pipeline = lab.pipeline()
    before = current_position(lab.stack.mariadb.connect())
    lab.relay(pipeline, from_position=before)  # publishes nothing, stores its start
    with lab.stack.mariadb.connect(database=lab.database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE orders SET note = 'full' WHERE id = 1")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE orders SET note = 'partial' WHERE id = 2")
    partial_at = current_position(lab.stack.mariadb.connect())
    with pytest.raises(SourceError) as caught:
        lab.relay(pipeline)
    assert "partial row image" in caught.value.message and f"{lab.database}.orders" in caught.value.message
    assert "binlog_row_image=FULL" in (caught.value.hint or "")
    stored = lab.relay_position(pipeline)
    assert stored is not None and before < stored < partial_at, "progress stops at the last full transaction"


def test_a_purged_start_position_is_refused_with_the_resnapshot_hint(lab):
    pipeline = lab.pipeline()
    with pytest.raises(BinlogPurgedError) as caught:
        lab.relay(pipeline, from_position=SourcePosition("binlog.000000", 4))
    assert "binlog purged" in caught.value.message and "oldest binlog there is binlog." in caught.value.message
    assert "lakesync" in (caught.value.hint or "") and "snapshot" in (caught.value.hint or "").lower()
    assert lab.relay_position(pipeline) is None


def test_a_table_that_does_not_exist_is_refused_by_the_full_load(lab):
    pipeline = lab.pipeline()
    with pytest.raises(SourceError) as caught:
        lab.full_load(pipeline, tables=["ordres"])
    assert "no table ordres" in caught.value.message and "orders" in (caught.value.hint or "")
    _nothing_loaded(lab, pipeline)


def test_a_pipeline_that_selects_no_table_is_refused(lab):
    pipeline = lab.pipeline(tables={"include": ["audit_*"]})
    with pytest.raises(ConfigError) as caught:
        lab.full_load(pipeline)
    assert "selects no tables" in caught.value.message and "tables.include" in (caught.value.hint or "")
    _nothing_loaded(lab, pipeline)


def test_an_unreachable_source_is_named_without_a_traceback(lab, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKESYNC_DEMO_MYSQL", "mysql://lakesync:x@127.0.0.1:1/")
    pipeline = lab.pipeline()
    with pytest.raises(SourceError) as caught:
        lab.full_load(pipeline)
    assert "cannot connect to the source at lakesync@127.0.0.1:1" in caught.value.message
    assert isinstance(caught.value.__cause__, pymysql.err.OperationalError)
    _nothing_loaded(lab, pipeline)


def test_a_relay_whose_source_stays_down_gives_up_after_the_configured_time(lab, monkeypatch, capsys, caplog):
    from lakesync_devkit.dev.processes import free_port

    from lakesync.cli.main import main

    monkeypatch.setenv("AIRFLOW_CONN_LAKESYNC_DEMO_MYSQL", f"mysql://lakesync:x@127.0.0.1:{free_port()}/")
    lab.pipeline(relay={"give_up_after_seconds": 4})
    started = time.monotonic()
    code = main(["relay", "--pipeline", lab.name, "--pipelines-dir", str(lab.pipelines_dir)])
    took = time.monotonic() - started
    error = capsys.readouterr().err
    assert code == 2, error
    assert 4 <= took < 60, took  # it gives up by itself (time for the CLI's start on a busy machine)
    # The relay's own clock: the last attempt comes when the 4 s are up (after attempts at 0, 1 and 3 s), so it
    # says 4 s, or up to 6 s when that attempt is slow on a busy machine; waiting out the next backoff instead
    # (4 s after the attempt at 3 s) would say 7 s or more.
    assert re.search(r"error: the relay gave up after [456] s of failed attempts \(\d+\)", error), error
    assert "cannot connect to the source lakesync@127.0.0.1" in error and "Connection refused" in error
    assert "hint: bring the server (or the broker) back, then start the relay again" in error
    assert "Traceback" not in error
    attempts = [r.getMessage() for r in caplog.records if "to resume from the committed progress" in r.getMessage()]
    assert len(attempts) >= 2 and "attempt 1 " in attempts[0] and "relay.give_up_after_seconds" in attempts[0]
