"""Healthcheck of the lakesync-relay container: is the relay holding a binlog stream open on the source?

The relay reads the binlog as a replica does, so while it works the source shows a ``Binlog Dump`` (or
``Binlog Dump GTID``) thread of the lakesync account. An account without the PROCESS privilege sees exactly
its own threads in SHOW PROCESSLIST, so this probe needs no grant beyond LAKESYNC_GRANTS. It resolves the
pipeline and its connection the way the relay does (lakesync.core.config, lakesync.core.connections), so it checks the
relay's real configuration. Exit 0 when such a thread exists, 1 (with the reason on stderr) when not.

Usage: python relay_streaming.py PIPELINE
"""

from __future__ import annotations

import sys

import pymysql

from lakesync.core.config import load_pipeline
from lakesync.core.connections import mysql_connection
from lakesync.core.errors import LakesyncError


def main(pipeline_name: str) -> int:
    try:
        connection = mysql_connection(load_pipeline(pipeline_name))
    except LakesyncError as exc:
        print(f"relay healthcheck: {exc}", file=sys.stderr)
        return 1
    try:
        with pymysql.connect(**connection.pymysql_kwargs(), connect_timeout=5) as conn, conn.cursor() as cur:
            cur.execute("SHOW PROCESSLIST")
            commands = [str(row[4]) for row in cur.fetchall()]
    except pymysql.MySQLError as exc:
        print(f"relay healthcheck: cannot reach {connection.describe()}: {exc}", file=sys.stderr)
        return 1
    if any(command.startswith("Binlog Dump") for command in commands):
        return 0
    print(f"relay healthcheck: no binlog stream of {connection.describe()} is open", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "team"))
