"""The relay and the loader run as the least-privilege ``lakesync`` user, and SQL identifiers are always quoted.

The user has exactly the four grants docs/security.md lists (MariaDB shows REPLICATION CLIENT as BINLOG
MONITOR) and can't write; the demo pipeline connects as it, not as root; the relay's binlog dump runs as
it. A table whose name is an injection attempt is loaded and validated without the statement in its name
ever running.
"""

from __future__ import annotations

import threading
import time

import pymysql
import pytest
from lakesync_devkit.dev.mariadb import LAKESYNC_GRANTS
from lakesync_devkit.dev.stack import LAKESYNC_USER

from lakesync.core.config import load_pipeline
from lakesync.core.connections import mysql_connection
from lakesync.relay import Relay
from lakesync.validation.validate import validate_pipeline
from tests.bad_input.badkit import Lab
from tests.deltakit import delta_rows

pytestmark = [pytest.mark.security, pytest.mark.integration]

#: MariaDB's names for the grants LAKESYNC_GRANTS asks for.
SHOWN_AS = {"REPLICATION CLIENT": "BINLOG MONITOR"}
WRITE_PRIVILEGES = ("ALL PRIVILEGES", "SUPER", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER",
                    "GRANT OPTION", "FILE", "SHUTDOWN", "PROCESS")


def _grants(mariadb, host: str) -> str:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SHOW GRANTS FOR '{LAKESYNC_USER}'@'{host}'")
        return " ".join(row[0] for row in cur.fetchall())


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_lakesync_user_has_exactly_the_documented_grants(mariadb, host):
    shown = _grants(mariadb, host)
    granted = shown.split(" ON *.* ")[0].removeprefix("GRANT ")
    assert sorted(p.strip() for p in granted.split(",")) == sorted(SHOWN_AS.get(p, p) for p in LAKESYNC_GRANTS)
    assert not any(privilege in shown for privilege in WRITE_PRIVILEGES), shown


def test_the_lakesync_user_cannot_write(mariadb, stack, fresh_database):
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with pymysql.connect(host="127.0.0.1", port=stack.settings.mariadb_port, user=LAKESYNC_USER,
                         password=stack.settings.lakesync_password, database=fresh_database) as conn:
        for statement in ("INSERT INTO t VALUES (1)", "DROP TABLE t", "CREATE TABLE u (id INT)"):
            with conn.cursor() as cur, pytest.raises(pymysql.err.OperationalError) as caught:
                cur.execute(statement)
            assert caught.value.args[0] in (1142, 1044), statement


def test_the_demo_pipeline_and_the_relay_run_as_the_lakesync_user(stack, monkeypatch, tmp_path, fresh_database):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    assert mysql_connection(load_pipeline("demo", "include/pipelines")).user == LAKESYNC_USER

    lab = Lab(stack, monkeypatch, tmp_path, fresh_database)
    lab.root_sql("CREATE TABLE t (id INT PRIMARY KEY)")
    # the server's replication sessions are server-wide: those of earlier tests (other relays, a Debezium
    # connector) may still be there, so the relay's own is the one that appears after it starts
    earlier = set(_binlog_dumps(stack))
    relay = Relay(lab.pipeline(), heartbeat_seconds=0.3)
    runner = threading.Thread(target=relay.run, kwargs={"stop_when_idle_seconds": 30})
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while not (ours := {session: user for session, user in _binlog_dumps(stack).items() if session not in earlier}):
            assert runner.is_alive() and time.monotonic() < deadline, "the relay's binlog dump never started"
            time.sleep(0.2)
    finally:
        relay.stop()
        runner.join(30)
    assert set(ours.values()) == {LAKESYNC_USER}, ours


def _binlog_dumps(stack) -> dict[int, str]:
    """The server's replication sessions: their id and the user they run as."""
    with stack.mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT ID, USER FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
        return {int(session): user for session, user in cur.fetchall()}


def test_a_table_named_like_an_injection_is_loaded_without_running_it(stack, monkeypatch, tmp_path, fresh_database):
    hostile = "x`; DROP TABLE victim; -- '\" ü"
    quoted = "`" + hostile.replace("`", "``") + "`"
    lab = Lab(stack, monkeypatch, tmp_path, fresh_database)
    lab.root_sql("CREATE TABLE victim (id INT PRIMARY KEY)",
                 f"CREATE TABLE {quoted} (`id``; DROP TABLE victim` INT PRIMARY KEY, v VARCHAR(10))",
                 f"INSERT INTO {quoted} VALUES (1, 'a'), (2, 'b')")
    # delta-rs: a backtick in a column name is delta_rs's to write (delta-spark refuses it, with that hint)
    pipeline = lab.pipeline(tables={"include": [hostile]}, delta={"root": str(lab.delta_root), "writer": "delta_rs"})
    lab.full_load(pipeline)
    assert [r["v"] for r in delta_rows(lab.delta_root / hostile, ["v"])] == ["a", "b"]
    report = validate_pipeline(pipeline, settle_timeout_s=2, store=False)
    assert report.matches and [t.table for t in report.tables] == [hostile]
    with stack.mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("SHOW TABLES LIKE 'victim'")
        assert cur.fetchall() == (("victim",),), "the statement inside the name never ran"
