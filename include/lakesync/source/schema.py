"""A source table's shape from ``information_schema``: its columns (as :class:`ColumnSpec`), its key, and
the tables of a database.

Every query passes the database and table names as parameters, never formatted into the SQL, so a name
with quotes or backticks in it is just a name. Rows are read through a plain tuple cursor whatever cursor
class the caller's connection defaults to.

Why not SQLAlchemy's MySQL reflection (``inspect(engine).get_columns``): it parses ``SHOW CREATE TABLE``
into its own type objects, which loses what the type map (:mod:`lakesync.core.types`) keys on. Measured on
the type-map table of ``tests/integration/test_type_map.py`` (47 columns, MariaDB 10.11, SQLAlchemy 2): 4
columns (``POINT``, ``GEOMETRY``, ``INET4``, ``INET6``) came back as ``NullType``; 6 text columns lost their
character set (``SHOW CREATE TABLE`` omits it when it equals the table default, ``information_schema``
gives the effective one); and every type would have to be rendered back to ``COLUMN_TYPE`` text. Keys
need the same columns' nullability and the server's index order, which the one query below gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pymysql
import pymysql.cursors

from lakesync.core.errors import SourceError
from lakesync.core.types import ColumnSpec

if TYPE_CHECKING:
    from lakesync.core.config import Pipeline

_COLUMNS_SQL = """
SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s
ORDER BY ORDINAL_POSITION
"""

# Without ORDER BY the server lists a table's indexes in definition order (PRIMARY first): the order InnoDB
# uses to pick the first unique NOT NULL index as its clustered key. A functional key part (MySQL 8) has no
# COLUMN_NAME, so the LEFT JOIN keeps it and the key is not used.
_UNIQUE_KEY_PARTS_SQL = """
SELECT s.INDEX_NAME, s.SEQ_IN_INDEX, s.COLUMN_NAME, c.IS_NULLABLE
FROM information_schema.STATISTICS AS s
LEFT JOIN information_schema.COLUMNS AS c
  ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME
WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s AND s.NON_UNIQUE = 0
"""

# MariaDB lists system-versioned tables as 'SYSTEM VERSIONED'; they are base tables too.
_TABLES_SQL = """
SELECT TABLE_NAME
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = %s AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')
ORDER BY TABLE_NAME
"""


def _fetch(conn: pymysql.connections.Connection, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    try:
        with conn.cursor(pymysql.cursors.Cursor) as cursor:
            cursor.execute(sql, args)
            return list(cursor.fetchall())
    except pymysql.MySQLError as exc:
        raise SourceError(
            f"could not read information_schema for {'.'.join(str(a) for a in args)}: {exc}",
            hint="check that the source is reachable and that the lakesync user has SELECT on the database",
        ) from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_table_columns(conn: pymysql.connections.Connection, database: str, table: str) -> list[ColumnSpec]:
    """The table's columns in ordinal order; raises :class:`SourceError` when the table does not exist."""
    rows = _fetch(conn, _COLUMNS_SQL, (database, table))
    if not rows:
        raise SourceError(
            f"table {database}.{table} does not exist or has no columns visible to this user",
            hint="check the database and table names in the pipeline and the user's SELECT grant",
        )
    columns: list[ColumnSpec] = []
    for name, data_type, column_type, is_nullable, charset in rows:
        spec = ColumnSpec(
            name=_text(name),
            data_type=_text(data_type).lower(),
            column_type=_text(column_type),
            nullable=_text(is_nullable) == "YES",
            charset=_text(charset) if charset is not None else None,
        )
        if spec.data_type in ("enum", "set"):
            spec = ColumnSpec(
                spec.name, spec.data_type, spec.column_type, spec.nullable, spec.charset, spec.allowed_values
            )
        columns.append(spec)
    return columns


def read_key_columns(conn: pymysql.connections.Connection, database: str, table: str) -> list[str]:
    """The columns that identify a row: the primary key, else the first unique key whose columns are all
    NOT NULL, else ``[]`` (the table then gets an append-only change log; see the architecture)."""
    keys: dict[str, list[tuple[int, str | None, bool]]] = {}
    for index_name, seq, column_name, is_nullable in _fetch(conn, _UNIQUE_KEY_PARTS_SQL, (database, table)):
        part = (int(seq), _text(column_name) if column_name is not None else None, is_nullable != "NO")
        keys.setdefault(_text(index_name), []).append(part)
    candidates = sorted(keys.items(), key=lambda item: item[0] != "PRIMARY")  # stable: keeps server order
    for _, parts in candidates:
        if all(name is not None and not nullable for _, name, nullable in parts):
            return [name for _, name, _ in sorted(parts) if name is not None]
    return []


def list_tables(conn: pymysql.connections.Connection, database: str) -> list[str]:
    """The database's base tables (no views, no sequences), by name."""
    return [_text(name) for (name,) in _fetch(conn, _TABLES_SQL, (database,))]


def selected_tables(conn: pymysql.connections.Connection, pipeline: Pipeline) -> list[str]:
    """The base tables of the pipeline's source database that the pipeline selects (``tables:``)."""
    return [name for name in list_tables(conn, pipeline.source.database) if pipeline.tables.selects(name)]
