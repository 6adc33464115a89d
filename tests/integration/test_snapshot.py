"""Opening a consistent snapshot on several connections and finding its exact binlog position (real MariaDB)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pymysql
import pytest
from pydantic import SecretStr

from lakesync.core.connections import MySQLConnection
from lakesync.core.errors import SourceError
from lakesync.source.server_checks import current_position
from lakesync.source.snapshot import global_read_lock, open_snapshot

pytestmark = pytest.mark.integration


@pytest.fixture
def root(mariadb) -> MySQLConnection:
    return MySQLConnection(mariadb.host, mariadb.port, "root", SecretStr(mariadb.root_password))


@pytest.fixture
def db(mariadb, fresh_database: str) -> Iterator[pymysql.cursors.Cursor]:
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
        cur.execute("INSERT INTO t (v) SELECT seq FROM seq_1_to_100")
        yield cur


def _snapshot_status(conn: pymysql.connections.Connection) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
        status = dict(cur.fetchall())
    return status["Binlog_snapshot_file"], int(status["Binlog_snapshot_position"])


def _count(conn: pymysql.connections.Connection) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM t")
        return int(cur.fetchone()[0])


def test_idle_server_snapshot_is_at_the_binlog_end_without_a_lock(root, db, fresh_database: str) -> None:
    end = current_position(db.connection)
    with open_snapshot(root, database=fresh_database, connections=2) as snapshot:
        assert snapshot.position == end
        assert snapshot.position.gtid  # BINLOG_GTID_POS of the snapshot
        assert "no lock" in snapshot.method


def test_connections_share_one_snapshot_and_miss_later_commits(root, db, fresh_database: str) -> None:
    with open_snapshot(root, database=fresh_database, connections=3) as snapshot:
        db.execute("INSERT INTO t (v) VALUES (1000)")
        assert [_count(conn) for conn in snapshot.connections] == [100, 100, 100]
        positions = {_snapshot_status(conn) for conn in snapshot.connections}
        assert positions == {(snapshot.position.file, snapshot.position.offset)}
        assert current_position(db.connection) > snapshot.position


@pytest.mark.parametrize("lock_free_attempts", [5, 0], ids=["lock-free-first", "global-read-lock"])
def test_snapshots_agree_under_concurrent_writes(root, db, mariadb, fresh_database: str,
                                                 lock_free_attempts: int) -> None:
    stop = threading.Event()

    def write() -> None:
        with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("INSERT INTO t (v) VALUES (1)")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(5):
            with open_snapshot(root, database=fresh_database, connections=2,
                               lock_free_attempts=lock_free_attempts) as snapshot:
                counts = {_count(conn) for conn in snapshot.connections}
                positions = {_snapshot_status(conn) for conn in snapshot.connections}
                assert len(counts) == 1 and len(positions) == 1
                if lock_free_attempts == 0:
                    assert "FLUSH TABLES WITH READ LOCK" in snapshot.method
    finally:
        stop.set()
        writer.join()


def test_without_reload_mariadb_falls_back_to_one_lock_free_connection(mariadb, db, fresh_database: str) -> None:
    user, password = f"u{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    db.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'")
    try:
        db.execute(f"GRANT SELECT, REPLICATION CLIENT ON *.* TO '{user}'@'127.0.0.1'")
        no_reload = MySQLConnection(mariadb.host, mariadb.port, user, SecretStr(password))
        with open_snapshot(no_reload, database=fresh_database, connections=2, lock_free_attempts=0) as snapshot:
            assert len(snapshot.connections) == 1 and "lock was refused" in snapshot.method
            db.execute("INSERT INTO t (v) VALUES (1000)")
            assert _count(snapshot.connections[0]) == 100
            assert _snapshot_status(snapshot.connections[0]) == (snapshot.position.file, snapshot.position.offset)
    finally:
        db.execute(f"DROP USER '{user}'@'127.0.0.1'")


def test_global_read_lock_refused_says_to_use_chunked_mode(mariadb, db) -> None:
    user, password = f"u{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    db.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'")
    try:
        with mariadb.connect() as root, root.cursor() as cur:
            cur.execute(f"GRANT SELECT ON *.* TO '{user}'@'127.0.0.1'")
        conn = pymysql.connect(host=mariadb.host, port=mariadb.port, user=user, password=password)
        try:
            with pytest.raises(SourceError, match="FLUSH TABLES WITH READ LOCK") as error, global_read_lock(conn):
                pass
            assert "chunked" in (error.value.hint or "")
        finally:
            conn.close()
    finally:
        db.execute(f"DROP USER '{user}'@'127.0.0.1'")
