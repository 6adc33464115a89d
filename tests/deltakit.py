"""Test helpers to read and build Delta tables. Never a verdict: "Delta equals the source" is the oracle's
(tests/oracle.py) to say; these only show what a table holds, or build one the way lakesync would.

- :func:`delta_table` / :func:`delta_rows`: what a Delta table holds, read by the oracle's own Delta reader
  (``tests.oracle.read_delta_table``): it reads what delta-spark writes and delta-rs's scan cannot (tables
  with the typeWidening feature), leaves out the rows deletion vectors delete, and gives each column its
  Delta type as a plain Arrow type, so that tests can filter, edit and write the rows back. It reads files
  through pyarrow's C++ filesystems, never a Python one, so the exit abort of docs/sink.md cannot happen;
- :func:`source_arrow`: a source table as lakesync's type map turns it into Arrow, to build a Delta table
  "as the full load would" without running it;
- :func:`commit_history`: a table's commits, newest first, with the custom metadata each writer records in its
  own place (delta-rs: keys of the commit info; delta-spark: one JSON object in ``userMetadata``) as keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pymysql

from tests.oracle import META_PREFIX, read_delta_table


def delta_table(uri: str | Path, *, lakesync_columns: bool = True) -> pa.Table:
    """Every live row of the table's newest version (with or without lakesync's ``_lakesync_*`` columns)."""
    table = read_delta_table(str(uri))
    if not lakesync_columns:
        table = table.select([name for name in table.column_names if not name.startswith(META_PREFIX)])
    return table


def delta_rows(uri: str | Path, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of one Delta table as dicts (``columns``, or all with lakesync's own), sorted by the first."""
    data = delta_table(uri)
    if columns is not None:
        data = data.select(columns)
    first = data.column_names[0]
    return sorted(data.to_pylist(), key=lambda row: repr(row[first]))


def source_arrow(conn: pymysql.connections.Connection, database: str, table: str) -> pa.Table:
    """The whole source table as Arrow, converted by lakesync's type map as the full load converts it."""
    from lakesync.core.types import SNAPSHOT_TIME_ZONE_SQL, arrow_table_from_db_rows
    from lakesync.source import queries
    from lakesync.source.schema import read_table_columns

    columns = read_table_columns(conn, database, table)
    with conn.cursor() as cursor:
        cursor.execute(SNAPSHOT_TIME_ZONE_SQL)
        queries.execute(cursor, queries.select_rows(queries.source_table(database, table, [c.name for c in columns]), columns))
        return arrow_table_from_db_rows(columns, list(cursor.fetchall()))


def commit_history(uri: str | Path, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The table's commit infos, newest first (delta-rs reads the log), each with the keys of its
    ``userMetadata`` JSON object added: where delta-spark keeps what delta-rs writes as custom keys."""
    from deltalake import DeltaTable

    entries = []
    for entry in DeltaTable(str(uri), storage_options=storage_options).history():
        try:
            extra = json.loads(entry.get("userMetadata") or "{}")
        except ValueError:
            extra = {}
        entries.append({**entry, **(extra if isinstance(extra, dict) else {})})
    return entries
