"""Reading the source losslessly over the text protocol: the snapshot session's setup.

The lossless SELECT list itself (FLOAT read as DOUBLE) is built by :func:`lakesync.source.queries.select_rows`.
"""

from __future__ import annotations

#: The statement a snapshot session must run so that TIMESTAMP values arrive in UTC, as in the binlog.
SNAPSHOT_TIME_ZONE_SQL = "SET time_zone = '+00:00'"
