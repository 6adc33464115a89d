"""Opening a consistent snapshot of the source and the binlog position that matches it exactly.

The full load reads every table inside one ``REPEATABLE READ`` snapshot and tags its rows with the
snapshot's position P; the stream then applies every change after P. P must be exact: a change committed
before the snapshot and replayed by the stream is harmless (the sink keeps the larger position), but a
change committed after P that the stream skips would be lost. How each server gives P:

* **MariaDB** (no lock): ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` records the binlog position of the
  snapshot atomically with it, readable as the session status ``binlog_snapshot_file`` /
  ``binlog_snapshot_position`` (and ``BINLOG_GTID_POS(file, pos)`` gives the GTID state there).
* **MySQL 8** has no such status: a brief ``FLUSH TABLES WITH READ LOCK`` stops commits while the snapshot
  starts and ``SHOW BINARY LOG STATUS`` is read, then ``UNLOCK TABLES`` (mysqldump and Debezium do the
  same). It needs the RELOAD privilege; where the lock is not allowed, use chunked mode, which needs none.

Several connections can share one snapshot, so that a table is read in parallel (mydumper's trick). On
MariaDB each connection starts its own snapshot and they are accepted when all report the same binlog
position (no transaction committed in between, so they see the same data); when writes keep slipping in
between, the snapshots are started under a brief global read lock instead, and where that is refused the
load reads on one connection. The method used is logged and returned, so the load report says how P was
obtained.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType

import pymysql
import pymysql.cursors
from pymysql.constants import ER

from lakesync.core.connections import MySQLConnection
from lakesync.core.errors import SourceError
from lakesync.core.identifiers import quote_identifier
from lakesync.core.mysql_client import connect_mysql
from lakesync.core.positions import SourcePosition
from lakesync.source.server_checks import current_position, is_mariadb

log = logging.getLogger(__name__)

#: ``GROUP_CONCAT`` results up to this size (the reader keeps each read well below max_allowed_packet).
GROUP_CONCAT_MAX_LEN = 1 << 30
_ACCESS_DENIED = {ER.DBACCESS_DENIED_ERROR, ER.ACCESS_DENIED_ERROR, ER.TABLEACCESS_DENIED_ERROR,
                  ER.SPECIFIC_ACCESS_DENIED_ERROR}


def connect(connection: MySQLConnection, *, database: str | None = None) -> pymysql.connections.Connection:
    """A source connection set up for reading: UTC session time zone (TIMESTAMP values come out in UTC),
    long ``GROUP_CONCAT``, patient network timeouts (a big chunk can take a while to consume)."""
    try:
        conn = connect_mysql(**connection.pymysql_kwargs(), database=database, autocommit=True,
                               cursorclass=pymysql.cursors.Cursor, connect_timeout=20)
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else None
        if code == ER.ACCESS_DENIED_ERROR:
            raise SourceError(
                f"the source refused the credentials of {connection.describe()}: {exc.args[1]}",
                hint="check the login and password of the pipeline's source connection (AIRFLOW_CONN_...)",
            ) from exc
        if code in (ER.DBACCESS_DENIED_ERROR, ER.BAD_DB_ERROR):  # only when a database was named
            grant_on = quote_identifier(database or "")
            raise SourceError(
                f"cannot use database {database!r} as {connection.describe()}: {exc.args[1]}",
                hint=f"check source.database in the pipeline and GRANT SELECT ON {grant_on}.* to the user",
            ) from exc
        raise SourceError(
            f"cannot connect to the source at {connection.describe()}: {exc.args[-1]}",
            hint="check that the server is running and reachable, and the connection's host and port",
        ) from exc
    with conn.cursor() as cursor:
        cursor.execute(
            f"SET SESSION time_zone = '+00:00', SESSION group_concat_max_len = {GROUP_CONCAT_MAX_LEN}, "
            "SESSION net_write_timeout = 600, SESSION net_read_timeout = 600"
        )
    return conn


@dataclass
class Snapshot:
    """Open connections that all read the same consistent snapshot, and its position.

    Close it (or use it as a context manager) to end the transactions; until then the server keeps the
    old row versions the snapshot needs, so don't hold it longer than the load.
    """

    position: SourcePosition
    method: str
    connections: list[pymysql.connections.Connection] = field(default_factory=list)

    def close(self) -> None:
        _close_all(self.connections)
        self.connections.clear()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _start_transaction(conn: pymysql.connections.Connection) -> None:
    with conn.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")


def _mariadb_snapshot_position(conn: pymysql.connections.Connection) -> tuple[str, int]:
    with conn.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
        status = {str(name).lower(): str(value) for name, value in cursor.fetchall()}
    file, offset = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or offset is None:
        raise SourceError(
            "the server reports no binlog_snapshot_file: binary logging is off",
            hint="start the source with --log-bin (and binlog_format=ROW, binlog_row_image=FULL)",
        )
    return file, int(offset)


@contextmanager
def global_read_lock(conn: pymysql.connections.Connection) -> Iterator[None]:
    """``FLUSH TABLES WITH READ LOCK`` for as long as the block runs (it should be milliseconds)."""
    with conn.cursor() as cursor:
        try:
            cursor.execute("SET SESSION lock_wait_timeout = 60")
            cursor.execute("FLUSH TABLES WITH READ LOCK")
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            if code in _ACCESS_DENIED:
                raise SourceError(
                    f"the source does not allow FLUSH TABLES WITH READ LOCK for this user: {exc.args[-1]}",
                    hint="GRANT RELOAD ON *.* to the lakesync user, or load with --mode chunked "
                         "(snapshot.mode: chunked), which needs no lock",
                ) from exc
            raise SourceError(
                f"could not take the brief global read lock for the snapshot: {exc.args[-1]}",
                hint="a long-running query or DDL holds tables open; retry when it is done, or use --mode chunked",
            ) from exc
        try:
            yield
        finally:
            cursor.execute("UNLOCK TABLES")


def open_snapshot(connection: MySQLConnection, *, database: str, connections: int = 2,
                  lock_free_attempts: int = 5) -> Snapshot:
    """Start ``connections`` transactions that see one consistent snapshot, and find its exact position."""
    conns = [connect(connection, database=database) for _ in range(max(1, connections))]
    try:
        if is_mariadb(conns[0]):
            return _open_mariadb(connection, database, conns, lock_free_attempts)
        return _open_mysql(connection, database, conns)
    except BaseException:
        _close_all(conns)
        raise


def _close_all(conns: list[pymysql.connections.Connection]) -> None:
    for conn in conns:
        try:
            conn.rollback()
            conn.close()
        except pymysql.MySQLError:
            log.debug("closing a snapshot connection failed", exc_info=True)


def _open_mariadb(connection: MySQLConnection, database: str, conns: list[pymysql.connections.Connection],
                  attempts: int) -> Snapshot:
    for _ in range(attempts):
        positions = set()
        for conn in conns:
            _start_transaction(conn)
            positions.add(_mariadb_snapshot_position(conn))
        if len(positions) == 1:
            method = "MariaDB binlog_snapshot status (no lock)"
            break
        for conn in conns:
            conn.rollback()
    else:
        try:
            positions = _mariadb_under_lock(connection, database, conns)
            method = "MariaDB binlog_snapshot status, snapshots started under FLUSH TABLES WITH READ LOCK"
        except SourceError as exc:
            # No RELOAD: one connection always gets a consistent snapshot without a lock; read on that one.
            log.warning("%s; reading on one connection instead of %d", exc.message, len(conns))
            _close_all(conns[1:])
            del conns[1:]
            conns[0].rollback()
            _start_transaction(conns[0])
            positions = {_mariadb_snapshot_position(conns[0])}
            method = "MariaDB binlog_snapshot status (no lock, one connection: the lock was refused)"
    ((file, offset),) = positions
    with conns[0].cursor() as cursor:
        cursor.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, offset))
        row = cursor.fetchone()
        gtid = (row[0] if row else None) or None
    position = SourcePosition(file, offset, 0, gtid)
    log.info("snapshot at %s via %s (%d connections)", position, method, len(conns))
    return Snapshot(position, method, conns)


def _mariadb_under_lock(connection: MySQLConnection, database: str, conns: list[pymysql.connections.Connection]
                        ) -> set[tuple[str, int]]:
    for conn in conns:
        conn.rollback()
    control = connect(connection, database=database)
    try:
        with global_read_lock(control):
            positions = set()
            for conn in conns:
                _start_transaction(conn)
                positions.add(_mariadb_snapshot_position(conn))
    finally:
        control.close()
    return positions


def _open_mysql(connection: MySQLConnection, database: str, conns: list[pymysql.connections.Connection]
                ) -> Snapshot:
    control = connect(connection, database=database)
    try:
        with global_read_lock(control):
            for conn in conns:
                _start_transaction(conn)
            position = current_position(control)
    finally:
        control.close()
    method = "FLUSH TABLES WITH READ LOCK + SHOW BINARY LOG STATUS"
    log.info("snapshot at %s via %s (%d connections)", position, method, len(conns))
    return Snapshot(position, method, conns)

