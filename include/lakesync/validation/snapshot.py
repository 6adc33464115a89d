"""The source snapshot a validation round reads in, with its binlog position.

Normally the loader's own consistent snapshot (:func:`lakesync.source.snapshot.open_snapshot`: a brief lock on
MySQL, none on MariaDB). A MySQL user without RELOAD may not take that lock: then a lock-free snapshot is
tagged with the position read just before it started.
"""

from __future__ import annotations

from typing import Any

import pymysql
from pymysql.constants import ER

from lakesync.core.errors import SourceError

#: Server errors meaning "not allowed" (no RELOAD for FLUSH TABLES WITH READ LOCK, say).
_LOCK_DENIED = {ER.DBACCESS_DENIED_ERROR, ER.TABLEACCESS_DENIED_ERROR, ER.SPECIFIC_ACCESS_DENIED_ERROR}


def open_validation_snapshot(connection: Any, database: str) -> Any:
    """A one-connection snapshot of ``database``: the loader's, or the lock-free one when the lock is denied."""
    from lakesync.source.snapshot import open_snapshot

    try:
        return open_snapshot(connection, database=database, connections=1)
    except SourceError as exc:
        cause = exc.__cause__
        if not (isinstance(cause, pymysql.MySQLError) and cause.args and cause.args[0] in _LOCK_DENIED):
            raise
        return lock_free_snapshot(connection, database)


def lock_free_snapshot(connection: Any, database: str) -> Any:
    """A snapshot tagged with the position read just *before* it started, for a MySQL user without RELOAD
    (no ``FLUSH TABLES WITH READ LOCK``). The position may be a little early: a row committed in between is
    read with its new value while its Delta row is positioned after the tag, so it counts as in flight and
    is re-checked, never reported as a false mismatch."""
    from lakesync.source.server_checks import current_position
    from lakesync.source.snapshot import Snapshot, connect

    conn = connect(connection, database=database)
    position = current_position(conn)
    with conn.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    return Snapshot(position, "position read before START TRANSACTION WITH CONSISTENT SNAPSHOT (no lock)", [conn])
