"""The independent oracle: is a Delta table exactly its MySQL/MariaDB source table?

This module shares no code with lakesync (it imports nothing from ``lakesync``), so a bug in lakesync's type
map, its sink or ``lakesync validate`` cannot make it agree. It reads

- the **source** with plain SQL over PyMySQL, with PyMySQL's own value conversions, and learns each column's
  type and the table's key from ``information_schema``;
- the **Delta table** by replaying its transaction log itself (``_delta_log/*.json`` and checkpoint Parquet
  files) and reading the live data files with pyarrow's Parquet reader: not through delta-rs, the library
  lakesync writes with.

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
something to filter out (readers of the target must see live rows only). lakesync's own ``_lakesync_*``
columns are left out; columns Delta has that the source no longer has (dropped columns) are ignored.
"""

from __future__ import annotations

import datetime as dt
import json
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pymysql

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


@dataclass
class DeltaSnapshot:
    """The table's live files and schema at its newest version, from the log alone."""

    version: int
    schema: dict[str, Any]
    files: list[str] = field(default_factory=list)


def replay_log(fs: pafs.FileSystem, root: str) -> DeltaSnapshot:
    log_dir = posixpath.join(root, "_delta_log")
    entries = fs.get_file_info(pafs.FileSelector(log_dir))
    commits = sorted((int(posixpath.basename(e.path)[:20]), e.path) for e in entries
                     if e.path.endswith(".json") and posixpath.basename(e.path)[:20].isdigit())
    checkpoints = sorted((int(posixpath.basename(e.path)[:20]), e.path) for e in entries
                         if ".checkpoint." in e.path and e.path.endswith(".parquet"))
    if not commits and not checkpoints:
        raise AssertionError(f"oracle: {root} is not a Delta table (no _delta_log entries)")
    active: dict[str, dict[str, Any]] = {}
    metadata: dict[str, Any] | None = None
    start = -1
    if checkpoints:
        start = checkpoints[-1][0]
        for path in (p for v, p in checkpoints if v == start):  # a multi-part checkpoint has several files
            for action in pq.read_table(path, filesystem=fs).to_pylist():
                metadata = _apply_action(action, active, metadata)
    for version, path in commits:
        if version <= start:
            continue
        with fs.open_input_stream(path) as stream:
            for line in stream.read().decode().splitlines():
                if line.strip():
                    metadata = _apply_action(json.loads(line), active, metadata)
    if metadata is None:
        raise AssertionError(f"oracle: {root} has no metaData action")
    if metadata.get("partitionColumns"):
        raise AssertionError("oracle: partitioned tables are not supported")
    mode = (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise AssertionError(f"oracle: column mapping mode {mode!r} is not supported")
    if any(add.get("deletionVector") for add in active.values()):
        raise AssertionError("oracle: deletion vectors are not supported")
    version = max([v for v, _ in commits] + [start])
    return DeltaSnapshot(version, json.loads(metadata["schemaString"]),
                         [posixpath.join(root, _unescape(p)) for p in sorted(active)])


def _unescape(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


def _apply_action(action: Mapping[str, Any], active: dict[str, dict[str, Any]],
                  metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    if action.get("add"):
        active[action["add"]["path"]] = action["add"]
    elif action.get("remove"):
        active.pop(action["remove"]["path"], None)
    elif action.get("metaData"):
        metadata = action["metaData"]
    return metadata


def read_delta(uri: str, storage_options: Mapping[str, str] | None = None, *, lakesync_columns: bool = False
               ) -> tuple[list[str], list[dict[str, Any]]]:
    """The user columns (schema order) and rows of the Delta table at its newest version.

    ``lakesync_columns`` keeps the ``_lakesync_*`` columns too (to check an append log's positions)."""
    fs, root = _filesystem(uri, storage_options)
    snapshot = replay_log(fs, root.rstrip("/"))
    names = [f["name"] for f in snapshot.schema["fields"]
             if lakesync_columns or not f["name"].startswith(META_PREFIX)]
    rows: list[dict[str, Any]] = []
    for path in snapshot.files:
        table = pq.read_table(path, filesystem=fs)
        present = [name for name in names if name in table.column_names]
        for row in table.select(present).to_pylist():
            rows.append({name: row.get(name) for name in names})  # a file written before ADD COLUMN: NULL
    return names, rows


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
