"""Is the binlog a pipeline still needs on the source server, and for how long?

Only the relay reads the binlog (the stream reads Kafka), so the position a pipeline needs from the server is
the one the relay resumes from: its stored progress, or before its first start the full load's position
(the order the relay itself uses, :mod:`lakesync.relay.worker`; and as there, a finished re-load newer than
a purged stored progress is where the relay goes on). The server removes whole files: by hand (``PURGE
BINARY LOGS``) or automatically once a file is older than ``binlog_expire_logs_seconds`` (MariaDB 10.11 also
has ``expire_logs_days``; the two are one setting there). So:

* the needed file is not in ``SHOW BINARY LOGS`` -> **purged**: the relay cannot go on; only a new full
  load recovers (:func:`purged_recovery_command`);
* it is the newest file -> **ok**: the server never expires the file it writes to;
* otherwise its age decides, and the server judges age by the file's modification time, which a client
  cannot read. The estimate here is *early, never late*: it starts from the newest time lakesync knows to
  be at or before the file's last write (the commit time of the newest change some table applied from at
  or before the needed position), and counts on the server's clock. It overestimates the file's age by
  however long the server kept writing that file after that moment, so a warning can come early (at most
  by that much), and never after the file is gone. Within ``monitoring.binlog_expiry_warning_seconds`` of
  the estimated expiry -> **expiring** (a warning). Before any table has applied a change (a relay that
  never ran after the load) there is no such time, and only a purge is reported.

``lakesync status``, the status page and the health DAG show the result through
:func:`lakesync.monitoring.attention.attention`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pymysql

from lakesync.core.config import Pipeline
from lakesync.core.connections import MySQLConnection, mysql_connection
from lakesync.core.errors import LakesyncError
from lakesync.core.mysql_client import connect_mysql
from lakesync.core.positions import SourcePosition, binlog_file_index
from lakesync.full_load.state import LoadState
from lakesync.source.server_checks import binary_logs, server_variables
from lakesync.stream.progress import StreamProgress


@dataclass(frozen=True)
class NeededPosition:
    """The position the relay resumes from, who needs it, and a time at or before its file's last write."""

    position: SourcePosition
    needed_by: str
    known_before_ms: int | None


@dataclass(frozen=True)
class ServerBinlogs:
    """What the server holds: its binlog files (oldest first), its expiry (None: never automatic), its clock."""

    files: list[str]
    expire_seconds: int | None
    now_ms: int


def purged_recovery_command(pipeline: str) -> str:
    """The one command that recovers from a purged position: a new full load of every table. A relay started
    afterwards finds its stored progress purged and older than the load, and resumes from the load's position."""
    return f"lakesync snapshot --pipeline {pipeline} --restart"


def expire_seconds(variables: dict[str, str]) -> int | None:
    """The automatic expiry in seconds: ``binlog_expire_logs_seconds``, else ``expire_logs_days`` (0 = off)."""
    seconds = float(variables.get("binlog_expire_logs_seconds") or 0)
    if seconds <= 0:
        seconds = float(variables.get("expire_logs_days") or 0) * 86_400
    return int(seconds) if seconds > 0 else None


def read_server(conn: Any) -> ServerBinlogs:
    files = [name for name, _ in binary_logs(conn)]
    variables = server_variables(conn, ("binlog_expire_logs_seconds", "expire_logs_days"))
    with conn.cursor(pymysql.cursors.Cursor) as cur:
        cur.execute("SELECT UNIX_TIMESTAMP(NOW(3))")
        now = float(cur.fetchone()[0])
    return ServerBinlogs(files, expire_seconds(variables), int(now * 1000))


def assess(needed: NeededPosition, server: ServerBinlogs, *, warn_within_seconds: float) -> dict[str, Any]:
    """The verdict (pure): ``state``, the needed position and file, and the estimated time left."""
    file = needed.position.file
    result: dict[str, Any] = {
        "state": "ok", "needed_position": needed.position.token(), "needed_by": needed.needed_by, "file": file,
        "oldest_file": server.files[0] if server.files else None, "expire_seconds": server.expire_seconds,
        "expires_in_seconds": None,
    }
    if file not in server.files:
        result["state"] = "purged"
        return result
    if file == server.files[-1] or server.expire_seconds is None or needed.known_before_ms is None:
        return result  # the file being written, no automatic expiry, or no honest estimate
    left = server.expire_seconds - max(0, server.now_ms - needed.known_before_ms) / 1000
    result["expires_in_seconds"] = round(left, 1)
    if left <= warn_within_seconds:
        result["state"] = "expiring"
    return result


def _time_bound(pipeline: Pipeline, position: SourcePosition) -> int | None:
    """The newest commit some table applied from at or before ``position``: it was written to the needed file
    or an older one, so before the needed file's last write. (The full load's start is no such bound: a re-load
    of one table restarts that clock while the load's position stays the oldest table's.)"""
    bounds = [progress.applied_source_ts_ms
              for progress in StreamProgress.load(pipeline.pipeline_state_dir).tables.values()
              if progress.applied_source_ts_ms and progress.applied_position
              and progress.applied_position <= position.key()]
    return max(bounds) if bounds else None


def _fed_by_another_producer(pipeline: Pipeline, load_position: SourcePosition) -> bool:
    """The relay never stored progress, yet the stream applied changes newer than the load, and no table has a
    consumed-through mark (which only the relay's progress gives; a relay whose broker lost its data has them):
    the topics are written by another producer (Debezium's topics), which keeps its own binlog position.
    Watching the load's position would call it purged once it ages out, though nothing needs it."""
    tables = StreamProgress.load(pipeline.pipeline_state_dir).tables.values()
    return not any(progress.consumed_through for progress in tables) and any(
        progress.applied_position and progress.applied_position > load_position.key() for progress in tables)


def needed_positions(pipeline: Pipeline, relay_position: SourcePosition | None) -> list[NeededPosition]:
    """What the relay resumes from, in the relay's own order (empty when it would start from the server's
    current position): its stored progress, or the full load's position before its first start. A finished
    load newer than the stored progress comes second: the relay starts there when the stored progress is
    purged (that load is the recovery)."""
    load = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    if relay_position is None:
        if load.position is None or _fed_by_another_producer(pipeline, load.position):
            return []
        return [NeededPosition(load.position, "the relay's first start (the full load's position)",
                               _time_bound(pipeline, load.position))]
    needed = [NeededPosition(relay_position, "the relay (its stored progress)", _time_bound(pipeline, relay_position))]
    if load.finished_at and load.position is not None and load.position > relay_position:
        needed.append(NeededPosition(load.position, "the relay (from the finished re-load's position, as its stored "
                                                    "progress is purged)", _time_bound(pipeline, load.position)))
    return needed


def binlog_status(pipeline: Pipeline, relay: dict[str, Any], *, source: MySQLConnection | None = None,
                  timeout_s: float = 3.0) -> dict[str, Any] | None:
    """The binlog check for ``lakesync status`` (``relay`` is its relay entry): None when nothing is needed
    from the server yet or the relay's progress can't be read (that is reported on its own); ``{"error"}``
    when the server can't be asked."""
    if relay.get("error"):
        return None
    token = relay.get("position_token")
    try:
        needed = needed_positions(pipeline, SourcePosition.parse(token) if token else None)
        if not needed:
            return None
        settings = source or mysql_connection(pipeline)
        conn = connect_mysql(**settings.pymysql_kwargs(), connect_timeout=max(1, int(timeout_s)),
                             read_timeout=max(1, int(timeout_s)), autocommit=True)
        try:
            server = read_server(conn)
        finally:
            conn.close()
    except LakesyncError as exc:
        return {"error": f"cannot check the source's binlog: {exc.message}"}
    except pymysql.err.MySQLError as exc:
        return {"error": f"cannot check the source's binlog: {exc}"}
    warn = pipeline.monitoring.binlog_expiry_warning_seconds
    result = assess(needed[0], server, warn_within_seconds=warn)
    if result["state"] == "purged" and len(needed) > 1:
        return assess(needed[1], server, warn_within_seconds=warn)
    return result


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(0.0, seconds) / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"


def binlog_attention(pipeline: str, binlog: dict[str, Any] | None
                     ) -> tuple[Literal["alert", "warning"], str, str | None] | None:
    """(level, message, command) for ``lakesync status``, or None when all is well."""
    if not binlog:
        return None
    if binlog.get("error"):
        return "warning", binlog["error"], None
    state = binlog["state"]
    if state == "purged":
        file, oldest = binlog["file"], binlog.get("oldest_file")
        if oldest is None:
            gone = "is not on the server (it lists no binlog)"
        elif binlog_file_index(file) < binlog_file_index(oldest):
            gone = "is no longer on the server"
        else:
            gone = "is not on the server (a reset binlog, or another server)"
        return ("alert", f"binlog purged: {binlog['needed_by']} needs {binlog['needed_position']}, and {file} "
                         f"{gone}; the oldest binlog there is {oldest}. The changes after that position are lost "
                         "to the relay: re-load every table (the relay then resumes from the new load)",
                purged_recovery_command(pipeline))
    if state == "expiring":
        return ("warning", f"binlog {binlog['file']}, which {binlog['needed_by']} needs (from "
                           f"{binlog['needed_position']}), may expire in {_duration(binlog['expires_in_seconds'])} "
                           f"(estimated early; the server expires binlogs after {binlog['expire_seconds']:,} s): "
                           "get the relay running and caught up before then, or raise binlog_expire_logs_seconds",
                None)
    return None
