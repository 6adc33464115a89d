"""Start-up guards and position reads against the MySQL/MariaDB source.

The relay (and the full load) refuse to start on a server that cannot give them a complete, decodable
change log: row-based binlog with full row images (the sink needs every column of every change) and full
row metadata (column names, signedness, charsets and the primary key come from the binlog's table-map
events, not from today's ``information_schema``). Each refusal names the variable, its value and the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pymysql
from pymysql.constants import CR, ER

from lakesync.core.errors import BinlogPurgedError, ServerIdInUseError, SourceError
from lakesync.core.positions import SourcePosition

log = logging.getLogger(__name__)
_ACCESS_DENIED = (ER.SPECIFIC_ACCESS_DENIED_ERROR, ER.ACCESS_DENIED_ERROR, ER.TABLEACCESS_DENIED_ERROR)
#: Errors that mean the server is not there (yet), went away or is shutting down: worth reconnecting.
#: 1927 is MariaDB's ER_CONNECTION_KILLED (a server shutting down kills its sessions with it).
_CONNECTION_ERRORS = frozenset({CR.CR_CONNECTION_ERROR, CR.CR_CONN_HOST_ERROR, CR.CR_SERVER_GONE_ERROR,
                                CR.CR_SERVER_LOST, CR.CR_SERVER_LOST_EXTENDED, ER.SERVER_SHUTDOWN,
                                ER.NORMAL_SHUTDOWN, ER.SHUTDOWN_COMPLETE, 1927})


def is_connection_error(exc: BaseException) -> bool:
    """Whether a PyMySQL error says the server is unreachable or went away (not that it refused something)."""
    if isinstance(exc, pymysql.err.InterfaceError):
        return True  # the connection object is already closed
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in _CONNECTION_ERRORS

#: (variable, required value) checked by :func:`check_binlog_settings`, in the order a DBA fixes them.
REQUIRED_SETTINGS: tuple[tuple[str, str], ...] = (
    ("log_bin", "ON"),
    ("binlog_format", "ROW"),
    ("binlog_row_image", "FULL"),
    ("binlog_row_metadata", "FULL"),
)

_WHY = {
    "log_bin": "the relay reads changes from the binary log",
    "binlog_format": "only row events carry the changed rows themselves",
    "binlog_row_image": "every change must carry all columns (before and after) for the sink's MERGE",
    "binlog_row_metadata": "column names, signedness and the primary key are read from the binlog itself",
}


def _query_all(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor(pymysql.cursors.Cursor) as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _monitor_query(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    """A binlog-status statement; access denied becomes a :class:`SourceError` that names the grant."""
    try:
        return _query_all(conn, sql)
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in _ACCESS_DENIED:
            raise SourceError(
                f"the source refused {sql.split(' WHERE')[0]!r}: {exc.args[-1]} (lakesync reads binlog "
                "positions with it and needs the REPLICATION CLIENT privilege, shown as BINLOG MONITOR in MariaDB)",
                hint="GRANT REPLICATION CLIENT ON *.* TO the lakesync user (MariaDB: GRANT BINLOG MONITOR); "
                "docs/security.md lists every grant",
            ) from exc
        raise


def server_variables(conn: Any, names: tuple[str, ...]) -> dict[str, str]:
    """Global values of ``names`` (lower-case keys); a variable the server lacks is absent."""
    placeholders = ", ".join(f"'{name}'" for name in names)
    rows = _query_all(conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({placeholders})")
    return {str(name).lower(): str(value) for name, value in rows}


def is_mariadb(conn: Any) -> bool:
    rows = _query_all(conn, "SELECT VERSION()")
    return "mariadb" in str(rows[0][0]).lower()


def check_binlog_settings(
    conn: Any, *, read_variables: Callable[[Any, tuple[str, ...]], dict[str, str]] = server_variables
) -> None:
    """Raise :class:`SourceError` for the first setting that stops lakesync from reading changes."""
    names = tuple(name for name, _ in REQUIRED_SETTINGS)
    values = read_variables(conn, names)
    for name, required in REQUIRED_SETTINGS:
        value = values.get(name)
        if value is None:
            raise SourceError(
                f"the source server has no {name} variable (it needs {name}={required}: {_WHY[name]})",
                hint="use MySQL >= 8.0.14 or MariaDB >= 10.5, which support full row metadata",
            )
        if value.upper() != required:
            fix = (
                "start the server with --log-bin (binary logging cannot be switched on at runtime)"
                if name == "log_bin"
                else f"SET PERSIST {name}='{required}' (MariaDB: SET GLOBAL and add {name}={required} to my.cnf), "
                "then reconnect clients"
            )
            raise SourceError(f"{name} is {value}, lakesync needs {required}: {_WHY[name]}", hint=fix)


def current_position(conn: Any) -> SourcePosition:
    """Where the binlog ends now (the next transaction starts here), with the executed GTID set."""
    try:
        rows = _monitor_query(conn, "SHOW BINARY LOG STATUS")
    except pymysql.err.ProgrammingError:
        rows = _monitor_query(conn, "SHOW MASTER STATUS")
    if not rows:
        raise SourceError(
            "SHOW MASTER STATUS returned nothing: binary logging is off or the user lacks REPLICATION CLIENT",
            hint="enable --log-bin and GRANT REPLICATION CLIENT ON *.* TO the lakesync user",
        )
    file, offset = str(rows[0][0]), int(rows[0][1])
    gtid_sql = "SELECT @@gtid_binlog_pos" if is_mariadb(conn) else "SELECT @@gtid_executed"
    gtid = str(_query_all(conn, gtid_sql)[0][0] or "").replace("\n", "") or None
    return SourcePosition(file, offset, 0, gtid)


def binary_logs(conn: Any) -> list[tuple[str, int]]:
    """``SHOW BINARY LOGS``: (file, size) of every binlog file still on the server, oldest first."""
    return [(str(row[0]), int(row[1])) for row in _monitor_query(conn, "SHOW BINARY LOGS")]


def check_position_available(conn: Any, position: SourcePosition) -> None:
    """Raise :class:`BinlogPurgedError` when ``position``'s file is no longer on the server."""
    logs = binary_logs(conn)
    names = [name for name, _ in logs]
    if position.file in names:
        size = dict(logs)[position.file]
        if position.offset > size:
            raise BinlogPurgedError(
                f"binlog position {position.token()} is past the end of {position.file} ({size} bytes)",
                hint="the position belongs to another server or a reset binlog; re-run the full load",
            )
        return
    oldest = names[0] if names else "none"
    raise BinlogPurgedError(
        f"binlog purged: {position.file} (needed for position {position.token()}) is no longer on the server; "
        f"the oldest binlog there is {oldest}. Changes after that position are lost to the relay: "
        "re-run the full load",
        hint="re-load every table: `lakesync snapshot --pipeline NAME --restart`; the relay then starts from the "
        "new load's position by itself. Raise binlog_expire_logs_seconds so the binlog outlives relay outages",
    )


def check_server_id_unique(conn: Any, server_id: int) -> None:
    """Raise :class:`ServerIdInUseError` when another replica or binlog reader already uses ``server_id``
    (:class:`SourceError` when it is the source's own server id).

    Two readers with one server id make the source kill the older connection, so two relays would
    take turns silently. The relay registers itself (``report_slave``), so a running relay shows in
    SHOW SLAVE HOSTS with its server id, as do replicas; readers that do not register cannot be seen.
    """
    try:
        hosts = _query_all(conn, "SHOW SLAVE HOSTS")
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in _ACCESS_DENIED:
            log.warning(
                "cannot check that server id %d is unique: the user may not run SHOW SLAVE HOSTS "
                "(MariaDB >= 10.5 needs the REPLICATION MASTER ADMIN privilege for it)", server_id)
            hosts = []
        else:
            raise
    if any(int(row[0]) == server_id for row in hosts):
        raise ServerIdInUseError(
            f"server id {server_id} is already used by a replica of the source (SHOW SLAVE HOSTS)",
            hint="give this pipeline another source.server_id, unique among all replicas and binlog readers",
        )
    own = _query_all(conn, "SELECT @@server_id")[0][0]
    if int(own) == server_id:
        raise SourceError(
            f"server id {server_id} is the source server's own server_id",
            hint="give this pipeline another source.server_id",
        )
