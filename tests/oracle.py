"""The independent oracle: is a Delta table exactly its MySQL/MariaDB source table?

This module shares no code with lakesync (it imports nothing from ``lakesync``), so a bug in lakesync's type
map, its sink or ``lakesync validate`` cannot make it agree. It reads

- the **source** with plain SQL over PyMySQL, with PyMySQL's own value conversions, and learns each column's
  type and the table's key from ``information_schema``;
- the **Delta table** by replaying its transaction log itself (commits and checkpoints of every kind,
  ``tests/oracle_delta_log.py``), reading the live data files with pyarrow's Parquet reader, leaving out the
  rows their deletion vectors delete (``tests/oracle_deletion_vectors.py``), finding each column under its
  physical name or field id when the table maps column names and taking partition columns from the log
  (``tests/oracle_delta_columns.py``), and reading each column as the table's current type, also in files
  written before a type widening (``tests/oracle_delta_types.py``): not through delta-rs nor delta-spark, the
  libraries lakesync writes with.

Both sides are turned into plain Python values by the table below, then compared row by row on the source
key. The table is the oracle's whole idea of "equal"; it follows the documented type map (docs/types.md):

| source type (``DATA_TYPE``) | source value, as read here | Delta value | compared as |
|---|---|---|---|
| integers, ``BIGINT UNSIGNED``, ``YEAR`` | ``int`` | int, or ``Decimal`` (unsigned 64-bit) | ``int`` |
| ``BIT(n)`` | big-endian ``bytes`` | int or ``Decimal`` | ``int`` |
| ``DECIMAL(p,s)`` | ``Decimal`` | ``Decimal`` (p <= 38) or its exact text (p > 38) | ``Decimal`` (and, for text, the text must not use exponent notation) |
| ``FLOAT`` | read as ``CAST(c AS DOUBLE)``: the stored single-precision value | float32 | ``float`` |
| ``DOUBLE`` | ``float`` | float64 | ``float`` |
| ``DATE``, ``DATETIME`` | ``date``/``datetime``; a zero or partly zero value comes back as text | ``date``/naive ``datetime`` | the value; zero dates are ``None`` |
| ``TIMESTAMP`` | naive ``datetime`` in UTC (session ``time_zone = '+00:00'``) | UTC ``datetime`` | naive UTC ``datetime``; zero is ``None`` |
| ``TIME`` | ``timedelta`` | int64 microseconds | ``int`` microseconds |
| text types, ``ENUM``, ``SET``, ``JSON`` (MariaDB), ``UUID``, ``INET4``, ``INET6`` | ``str`` | ``str`` | ``str`` (exact; NUL, emoji and empty strings included) |
| ``BINARY``, ``VARBINARY``, blobs | ``bytes`` | ``bytes`` | ``bytes`` |
| spatial types | read as ``ST_AsWKB(c)`` (no SRID) | WKB ``bytes`` | ``bytes`` |

Rows in Delta are taken as they are: a row the sink marked deleted but left visible is a difference, not
something to filter out (readers of the target must see live rows only; a row a deletion vector deletes is
not live, as for every Delta reader). lakesync's own ``_lakesync_*`` columns are left out; columns Delta has
that the source no longer has (dropped columns) are ignored.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pymysql

from tests.oracle_deletion_vectors import deleted_rows
from tests.oracle_delta_columns import TableColumn, partition_columns_of, stored_names, table_columns
from tests.oracle_delta_log import LiveFile, replay_log
from tests.oracle_delta_types import arrow_schema, read_as

META_PREFIX = "_lakesync_"
INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"}
SPATIAL_TYPES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                 "multipolygon", "geometrycollection", "geomcollection"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


# -- the source --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceColumn:
    name: str
    data_type: str  # information_schema.COLUMNS.DATA_TYPE, lower case
    column_type: str


def quote_identifier(name: str) -> str:
    """A MySQL identifier in backticks (the oracle's own quoting; tests that build SQL use it too)."""
    return "`" + name.replace("`", "``") + "`"


def source_columns(conn: pymysql.connections.Connection, database: str, table: str) -> list[SourceColumn]:
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (database, table))
        rows = cur.fetchall()
    if not rows:
        raise AssertionError(f"oracle: source table {database}.{table} does not exist")
    return [SourceColumn(_text(name), _text(data_type).lower(), _text(column_type).lower())
            for name, data_type, column_type in rows]


def source_key(conn: pymysql.connections.Connection, database: str, table: str) -> list[str]:
    """The primary key, else the first unique index whose columns are all NOT NULL; [] for a keyless table."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT s.INDEX_NAME, s.COLUMN_NAME, c.IS_NULLABLE FROM information_schema.STATISTICS s "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = s.TABLE_SCHEMA "
            "AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME "
            "WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s AND s.NON_UNIQUE = 0 "
            "ORDER BY s.INDEX_NAME = 'PRIMARY' DESC, s.INDEX_NAME, s.SEQ_IN_INDEX", (database, table))
        rows = cur.fetchall()
    indexes: dict[str, list[tuple[str, str]]] = {}
    for index, column, nullable in rows:
        indexes.setdefault(_text(index), []).append((_text(column), _text(nullable)))
    for columns in indexes.values():
        if all(nullable == "NO" for _, nullable in columns):
            return [name for name, _ in columns]
    return []


def _select_expression(column: SourceColumn) -> str:
    name = quote_identifier(column.name)
    if column.data_type == "float":
        return f"CAST({name} AS DOUBLE)"
    if column.data_type in SPATIAL_TYPES:
        return f"ST_AsWKB({name})"
    return name


def read_source(conn: pymysql.connections.Connection, database: str, table: str,
                columns: list[SourceColumn]) -> list[tuple[Any, ...]]:
    select = ", ".join(_select_expression(c) for c in columns)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT {select} FROM {quote_identifier(database)}.{quote_identifier(table)}")
        return [tuple(_from_source(c, value) for c, value in zip(columns, row, strict=True))
                for row in cur.fetchall()]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _from_source(column: SourceColumn, value: Any) -> Any:
    if value is None:
        return None
    kind = column.data_type
    if kind == "bit":
        return int.from_bytes(value, "big")
    if kind in ("date", "datetime", "timestamp"):
        # PyMySQL hands back zero and partly zero dates as the text it could not parse
        return None if isinstance(value, str | bytes) else value
    if kind == "time":
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if kind in ("decimal", "numeric"):
        return Decimal(value)
    if kind in BINARY_TYPES or kind in SPATIAL_TYPES:
        return bytes(value)
    return value


# -- the Delta table -----------------------------------------------------------------------------------------
def _filesystem(uri: str, storage_options: Mapping[str, str] | None) -> tuple[pafs.FileSystem, str]:
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return pafs.LocalFileSystem(), parts.path if parts.scheme else uri
    if parts.scheme in ("s3", "s3a"):
        options = {k.upper(): v for k, v in (storage_options or {}).items()}
        endpoint = options.get("AWS_ENDPOINT_URL") or options.get("AWS_ENDPOINT")
        s3 = pafs.S3FileSystem(
            access_key=options.get("AWS_ACCESS_KEY_ID"), secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
            region=options.get("AWS_REGION", "us-east-1"),
            endpoint_override=urlsplit(endpoint).netloc if endpoint else None,
            scheme=urlsplit(endpoint).scheme if endpoint else "https")
        return s3, parts.netloc + parts.path
    raise AssertionError(f"oracle: cannot read {uri!r} (local paths and s3:// only)")


def read_delta_table(uri: str, storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """The live rows of the Delta table at its newest version, every column typed as its current schema says.

    Live rows: the rows of the snapshot's data files minus those their deletion vectors delete. Columns have
    their logical names (the ones readers see, under column mapping too). A file written before a type widening
    is read as the wider type, one written before ADD COLUMN has NULL in that column
    (``tests/oracle_delta_types.py`` says which stored types are accepted)."""
    fs, root = _filesystem(uri, storage_options)
    root = root.rstrip("/")
    snapshot = replay_log(fs, root)
    schema = arrow_schema(snapshot.schema)
    columns = table_columns(snapshot.schema, snapshot.configuration, snapshot.partition_columns)
    parts = [_live_rows(fs, root, live, schema, columns) for live in snapshot.files]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _live_rows(fs: pafs.FileSystem, root: str, live: LiveFile, schema: pa.Schema,
               columns: list[TableColumn]) -> pa.Table:
    with fs.open_input_file(live.path) as file:
        # Spark stores ``timestamp`` as INT96: read in microseconds, nanoseconds would overflow past 2262
        parquet = pq.ParquetFile(file, coerce_int96_timestamp_unit="us")
        stored_as = stored_names(columns, parquet.schema_arrow, live.path)
        stored = parquet.read(columns=list(stored_as.values()))
        rows = parquet.metadata.num_rows
    partitions = partition_columns_of(columns, live.partition_values, rows, live.path)
    # read_as gives each column its schema type or fails; from_arrays would otherwise cast silently (even text)
    table = pa.Table.from_arrays(
        [partitions[f.name] if f.name in partitions
         else read_as(stored.column(stored_as[f.name]), f, live.path) if f.name in stored_as
         else pa.nulls(rows, f.type) for f in schema], schema=schema)
    if not live.deletion_vector:
        return table
    deleted = deleted_rows(live.deletion_vector, fs, root)
    if len(deleted) and deleted[-1] >= rows:
        raise AssertionError(f"oracle: the deletion vector of {live.path} deletes row {deleted[-1]}, "
                             f"the file has {rows} rows")
    keep = np.ones(rows, dtype=bool)
    keep[deleted] = False
    return table.filter(pa.array(keep))


def read_delta(uri: str, storage_options: Mapping[str, str] | None = None, *, lakesync_columns: bool = False
               ) -> tuple[list[str], list[dict[str, Any]]]:
    """The user columns (schema order) and rows of the Delta table at its newest version.

    ``lakesync_columns`` keeps the ``_lakesync_*`` columns too (to check an append log's positions)."""
    table = read_delta_table(uri, storage_options)
    names = [name for name in table.column_names if lakesync_columns or not name.startswith(META_PREFIX)]
    return names, table.select(names).to_pylist()


def _from_delta(column: SourceColumn, value: Any) -> Any:
    if value is None:
        return None
    kind = column.data_type
    if kind in INTEGER_TYPES or kind == "bit":
        return int(value)
    if kind in ("decimal", "numeric"):
        if isinstance(value, str):
            if "e" in value.lower():
                return ("exponent notation", value)  # never equal to a Decimal: the text must be exact
            return Decimal(value)
        return value
    if kind == "timestamp" and isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if kind == "float":
        return float(value)
    return value


# -- the comparison ------------------------------------------------------------------------------------------
@dataclass
class Comparison:
    """What differs between a source table and its Delta table (empty lists: identical)."""

    table: str
    key: list[str]
    source_rows: int = 0
    delta_rows: int = 0
    missing_columns: list[str] = field(default_factory=list)
    missing_in_delta: list[tuple[Any, ...]] = field(default_factory=list)
    extra_in_delta: list[tuple[Any, ...]] = field(default_factory=list)
    duplicate_keys_in_delta: list[tuple[Any, ...]] = field(default_factory=list)
    differing: dict[tuple[Any, ...], dict[str, tuple[Any, Any]]] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return not (self.missing_columns or self.missing_in_delta or self.extra_in_delta
                    or self.duplicate_keys_in_delta or self.differing)

    def differing_keys(self) -> set[tuple[Any, ...]]:
        """Every key whose row is not the same on both sides (missing, extra, duplicated or different)."""
        return {*self.missing_in_delta, *self.extra_in_delta, *self.duplicate_keys_in_delta, *self.differing}

    def describe(self, limit: int = 10) -> str:
        if self.identical:
            return f"{self.table}: identical ({self.source_rows} rows)"
        lines = [f"{self.table}: source {self.source_rows} rows, Delta {self.delta_rows} rows (key {self.key})"]
        if self.missing_columns:
            lines.append(f"  columns missing in Delta: {self.missing_columns}")
        for label, keys in (("missing in Delta", self.missing_in_delta), ("extra in Delta", self.extra_in_delta),
                            ("duplicated in Delta", self.duplicate_keys_in_delta)):
            if keys:
                lines.append(f"  {len(keys)} keys {label}: {sorted(keys, key=repr)[:limit]}")
        for key, columns in sorted(self.differing.items(), key=lambda item: repr(item[0]))[:limit]:
            lines.append(f"  key {key}: " + ", ".join(f"{name}: source={s!r} delta={d!r}"
                                                     for name, (s, d) in columns.items()))
        if len(self.differing) > limit:
            lines.append(f"  ... {len(self.differing) - limit} more differing keys")
        return "\n".join(lines)


def compare_table(conn: pymysql.connections.Connection, database: str, table: str, delta_uri: str, *,
                  storage_options: Mapping[str, str] | None = None,
                  exclude_columns: Iterable[str] = ()) -> Comparison:
    """Compare one source table with its Delta table. A keyless table is compared as a multiset of rows."""
    excluded = set(exclude_columns)
    columns = [c for c in source_columns(conn, database, table) if c.name not in excluded]
    key = source_key(conn, database, table)
    source = read_source(conn, database, table, columns)
    delta_names, delta_rows = read_delta(delta_uri, storage_options)
    result = Comparison(table, key, source_rows=len(source), delta_rows=len(delta_rows))
    result.missing_columns = [c.name for c in columns if c.name not in delta_names]
    present = [c for c in columns if c.name in delta_names]
    index = [i for i, c in enumerate(columns) if c.name in delta_names]
    source_values = [tuple(row[i] for i in index) for row in source]
    delta_values = [tuple(_from_delta(c, row[c.name]) for c in present) for row in delta_rows]
    if not key:
        _compare_multisets(result, source_values, delta_values)
        return result
    key_at = [[c.name for c in present].index(name) for name in key]
    by_key_source = {tuple(row[i] for i in key_at): row for row in source_values}
    by_key_delta: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in delta_values:
        row_key = tuple(row[i] for i in key_at)
        if row_key in by_key_delta:
            result.duplicate_keys_in_delta.append(row_key)
        by_key_delta[row_key] = row
    result.missing_in_delta = [k for k in by_key_source if k not in by_key_delta]
    result.extra_in_delta = [k for k in by_key_delta if k not in by_key_source]
    for row_key, source_row in by_key_source.items():
        delta_row = by_key_delta.get(row_key)
        if delta_row is None:
            continue
        diff = {c.name: (s, d) for c, s, d in zip(present, source_row, delta_row, strict=True) if not _same(s, d)}
        if diff:
            result.differing[row_key] = diff
    return result


def _same(source: Any, delta: Any) -> bool:
    return type(source) is type(delta) and source == delta if source is not None else delta is None


def _compare_multisets(result: Comparison, source: list[tuple[Any, ...]], delta: list[tuple[Any, ...]]) -> None:
    from collections import Counter

    wanted, have = Counter(map(repr, source)), Counter(map(repr, delta))
    result.missing_in_delta = [(text,) for text in (wanted - have).elements()]
    result.extra_in_delta = [(text,) for text in (have - wanted).elements()]


def assert_tables_match(conn: pymysql.connections.Connection, database: str, tables: Mapping[str, str], *,
                        storage_options: Mapping[str, str] | None = None) -> list[Comparison]:
    """Assert every ``table -> delta_uri`` pair is identical; the message lists what differs."""
    results = [compare_table(conn, database, table, uri, storage_options=storage_options)
               for table, uri in tables.items()]
    different = [r for r in results if not r.identical]
    assert not different, "Delta differs from the source:\n" + "\n".join(r.describe() for r in different)
    return results
