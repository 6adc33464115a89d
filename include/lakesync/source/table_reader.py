"""Reading a table, or one key range of it, into Arrow, fast, through a connection the caller owns.

Why this shape: the full load must read inside the snapshot's own connections (a second connection would
not see the same snapshot), so the fast client readers that open their own connections (connectorx, the
``mariadb`` client) can't be used, and PyMySQL's row-by-row decoding reaches only ~150k rows/s. Instead the
server formats a whole key range as CSV text in one value (``GROUP_CONCAT`` of one quoted line per row) and
Arrow's C++ CSV parser turns it into typed columns with the schema from :mod:`lakesync.core.types`. Measured on
the 1M-row demo ``transactions`` table (2 cores): ~0.85M rows/s on one connection, ~1.3-1.5M rows/s on two
connections sharing one snapshot, about what the ``mariadb`` client needs to dump the table to /dev/null.

Text forms, chosen so that the parser gets exactly the value the type map expects:

* numbers, decimals, dates and datetimes go as the server prints them (sessions run with
  ``time_zone='+00:00'``, so TIMESTAMP is UTC); zero dates (``0000-00-00``) become NULL;
* text (CHAR, VARCHAR, TEXT, ENUM, SET, JSON) goes double-quoted with ``"`` doubled, which is exact for
  every byte (MySQL's ``QUOTE()`` is faster but turns NUL into ``\\0``, which CSV can't undo);
* binary strings go as hex and are decoded here;
* any other column (TIME, BIT, spatial... or an Arrow type the fast path doesn't know) goes as hex and is
  decoded the slow, exact way: into the value PyMySQL would return, then through
  :func:`lakesync.core.types.json_value` and :func:`lakesync.core.types.arrow_value_from_json`, the same path the
  stream takes, so snapshot rows and streamed rows agree.

``GROUP_CONCAT`` is capped by ``group_concat_max_len`` and the server's ``max_allowed_packet``, so ranges are
sized by the table's average row length, and every read also counts its rows and fails loudly when the
text came back short instead of loading a truncated chunk.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pymysql
import pymysql.converters
import pymysql.cursors
from sqlalchemy import Select, TableClause, func, select

from lakesync.core import types
from lakesync.core.errors import SchemaChangeError, SourceError
from lakesync.core.identifiers import quote_identifier
from lakesync.source import queries
from lakesync.source.schema import read_key_columns, read_table_columns

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"}
TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
TEMPORAL_TYPES = {"date", "datetime", "timestamp"}
NUMBER_TYPES = INTEGER_TYPES | {"decimal", "numeric", "float", "double", "real"}
#: Types PyMySQL returns as bytes (everything else it decodes as text).
RAW_BYTES_TYPES = BINARY_TYPES | {"bit", "geometry", "point", "linestring", "polygon", "multipoint",
                                  "multilinestring", "multipolygon", "geometrycollection", "geomcollection"}
#: Upper bound for the text of one read; the server's max_allowed_packet may lower it.
MAX_TEXT_BYTES = 8 * 1024 * 1024
_NULL = "NULL"
#: The one collation every text field of a row's line is put in (binary: it compares nothing, only joins).
LINE_COLLATION = "utf8mb4_bin"
_END_FIELD = "_lakesync_end_of_line"
#: The CSV reader's block; a text longer than this is parsed as one block of its own size (see ``parse``).
_CSV_BLOCK_BYTES = 1 << 24
_TMP_FILE_RETRIES = 3


# -- describing a table -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableShape:
    """What the reader needs to know about a table: its columns, key and size."""

    database: str
    name: str
    columns: tuple[types.ColumnSpec, ...]
    key_columns: tuple[str, ...]
    estimated_rows: int
    avg_row_length: int

    @property
    def has_key(self) -> bool:
        return bool(self.key_columns)

    @property
    def integer_key(self) -> bool:
        """A single integer key column: ranges can be cut by arithmetic instead of by walking the index."""
        if len(self.key_columns) != 1:
            return False
        column = next(c for c in self.columns if c.name == self.key_columns[0])
        return column.data_type in INTEGER_TYPES - {"year"}

    def arrow_schema(self) -> pa.Schema:
        return types.arrow_schema(list(self.columns))

    def source_table(self) -> TableClause:
        """The table for :mod:`lakesync.source.queries` statements."""
        return queries.source_table(self.database, self.name, [column.name for column in self.columns])


def describe_table(connection: pymysql.connections.Connection, database: str, table: str, *,
                   key_columns: list[str] | None = None) -> TableShape:
    """Columns, key and size of ``database.table``.

    The key is the one :func:`lakesync.source.schema.read_key_columns` finds (primary key, else the first
    unique NOT NULL key), else ``key_columns`` from the pipeline; a table with none is read whole.
    """
    columns = tuple(read_table_columns(connection, database, table))
    key = read_key_columns(connection, database, table) or list(key_columns or [])
    missing = [name for name in key if name not in {column.name for column in columns}]
    if missing:
        raise SourceError(
            f"key_columns of table {table} name columns it does not have: {', '.join(missing)}",
            hint=f"fix tables.overrides.{table}.key_columns in the pipeline file",
        )
    with connection.cursor(pymysql.cursors.Cursor) as cursor:
        cursor.execute(
            "SELECT COALESCE(TABLE_ROWS, 0), COALESCE(AVG_ROW_LENGTH, 0) FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (database, table),
        )
        estimated_rows, avg_row_length = cursor.fetchone() or (0, 0)
    return TableShape(database, table, columns, tuple(key), int(estimated_rows), int(avg_row_length))


# -- key ranges ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyRange:
    """Rows with ``lower < key <= upper`` (key tuples in index order); ``None`` leaves that side open."""

    chunk_id: str
    lower: tuple[Any, ...] | None = None
    upper: tuple[Any, ...] | None = None


def rows_per_read(shape: TableShape, cursor: pymysql.cursors.Cursor, wanted: int) -> int:
    """How many rows one ``GROUP_CONCAT`` read may hold: ``wanted``, capped so its text stays well under the
    server's ``max_allowed_packet``."""
    cursor.execute("SELECT @@max_allowed_packet")
    packet = int(queries.one_row(cursor)[0])
    budget = min(MAX_TEXT_BYTES, packet // 2)
    # The text form of a row is about as long as InnoDB's average row (numbers shrink, quoting grows).
    per_row = max(shape.avg_row_length, 16 * len(shape.columns), 64)
    return max(100, min(wanted, budget // per_row))


def plan_ranges(cursor: pymysql.cursors.Cursor, shape: TableShape, rows_per_range: int) -> list[KeyRange]:
    """Split a keyed table into ranges of about ``rows_per_range`` rows (a keyless table is one range).

    A single integer key is cut by arithmetic between MIN and MAX (sized by the row-count estimate, so sparse
    ids still give even chunks); other keys by walking the key index, one index-only LIMIT query per range.
    """
    if not shape.has_key:
        return [KeyRange("all")]
    if shape.integer_key:
        queries.execute(cursor, queries.key_bounds(shape.database, shape.name, shape.key_columns[0]))
        low, high, count = queries.one_row(cursor)
        if low is None:
            return [KeyRange("all")]
        pieces = max(1, math.ceil(count / rows_per_range))
        step = max(1, math.ceil((high - low + 1) / pieces))
        ranges = []
        start = low - 1
        while start < high:
            end = min(start + step, high)
            ranges.append(KeyRange(f"{start + 1}-{end}", (start,), (end,)))
            start = end
        # Open ends: rows inserted below MIN or above MAX after planning are still read (chunked mode).
        ranges[0] = KeyRange(ranges[0].chunk_id, None, ranges[0].upper)
        ranges[-1] = KeyRange(ranges[-1].chunk_id, ranges[-1].lower, None)
        return ranges
    ranges = []
    lower: tuple[Any, ...] | None = None
    source = shape.source_table()
    keys = [source.c[name] for name in shape.key_columns]
    while True:
        walk = select(*keys).select_from(source).order_by(*keys).limit(1).offset(rows_per_range - 1)
        where = queries.in_key_range(source, shape.key_columns, lower, None)
        queries.execute(cursor, walk if where is None else walk.where(where))
        row = cursor.fetchone()
        if row is None:
            ranges.append(KeyRange(f"{len(ranges):06d}", lower, None))
            return ranges
        ranges.append(KeyRange(f"{len(ranges):06d}", lower, tuple(row)))
        lower = tuple(row)


# -- reading -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ColumnPlan:
    """How one column travels: its SQL text expression in the fast and in the safe form, the CSV parse
    type, and the conversion after parsing."""

    fast_sql: str
    safe_sql: str
    parse_type: pa.DataType
    target: pa.Field
    convert: str  # "none", "cast", "unhex" (binary), "exact" (slow path through lakesync.core.types)
    #: Fast form of a nullable text column: NULL is sent as '' and every value with a '=' in front.
    marked: bool = False


def _is_utf8mb4(column: types.ColumnSpec) -> bool:
    """Whether the column's text is utf8mb4 as stored (no charset, as MySQL 8 says of JSON, is converted)."""
    return (column.charset or "").lower() == "utf8mb4"


def _plan_column(column: types.ColumnSpec, target: pa.Field) -> _ColumnPlan:
    """The text forms for the types :mod:`lakesync.core.types` maps to plain Arrow types; else the exact path."""
    name = quote_identifier(column.name)
    kind, arrow_type = column.data_type, target.type

    def nullable(expr: str) -> str:
        return f"IFNULL({expr}, '{_NULL}')" if target.nullable else expr

    def same(expr: str, parse: pa.DataType, convert: str = "none") -> _ColumnPlan:
        return _ColumnPlan(nullable(expr), nullable(expr), parse, target, convert)

    if kind == "float" and pa.types.is_floating(arrow_type):
        # The server prints FLOAT with 6 significant digits; as DOUBLE it prints the stored value exactly.
        return same(f"CAST({name} AS DOUBLE)", pa.float64(), "cast")
    if kind in NUMBER_TYPES and pa.types.is_string(arrow_type):
        # DECIMAL wider than Delta's 38 digits is stored as its exact text: the fast form parses strings
        # without nulls, so a NULL must be marked like a text column's, or it is stored as the text 'NULL'.
        fast = f"IFNULL(CONCAT('=', {name}), '')" if target.nullable else name
        return _ColumnPlan(fast, nullable(name), arrow_type, target, "none", marked=target.nullable)
    if kind in NUMBER_TYPES and (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)
                                 or pa.types.is_decimal(arrow_type)):
        return same(name, arrow_type)
    if kind == "bit" and (pa.types.is_integer(arrow_type) or pa.types.is_decimal(arrow_type)):
        return same(f"CAST({name} AS UNSIGNED)", arrow_type)
    if kind == "time" and pa.types.is_int64(arrow_type):  # signed microseconds
        return same(f"CAST(TIME_TO_SEC({name}) * 1000000 AS SIGNED)", arrow_type)
    if kind in TEMPORAL_TYPES and (pa.types.is_date32(arrow_type) or pa.types.is_timestamp(arrow_type)):
        # Zero and partly zero dates ('0000-00-00', '2020-00-05') become NULL, as the type map says; the
        # guard costs ~10% more server time, so only the safe form has it.
        guarded = (f"IF({name} IS NULL OR YEAR({name}) = 0 OR MONTH({name}) = 0 OR DAYOFMONTH({name}) = 0, "
                   f"'{_NULL}', {name})")
        parse = pa.date32() if pa.types.is_date32(arrow_type) else pa.timestamp("us")
        return _ColumnPlan(nullable(name), guarded, parse, target, "none" if parse == arrow_type else "cast")
    if kind in TEXT_TYPES and pa.types.is_string(arrow_type):
        # Every text column goes as utf8mb4 (CONCAT would keep latin1's bytes, which are not UTF-8) under one
        # explicit collation: columns of different collations in one CONCAT_WS are an "Illegal mix of
        # collations" error otherwise. COLLATE changes no byte; the key ranges still compare in each column's own.
        text = f"{name if _is_utf8mb4(column) else f'CONVERT({name} USING utf8mb4)'} COLLATE {LINE_COLLATION}"
        fast = f"IFNULL(CONCAT('=', {text}), '')" if target.nullable else text
        quoted = nullable(f"CONCAT('\"', REPLACE({text}, '\"', '\"\"'), '\"')")
        return _ColumnPlan(fast, quoted, arrow_type, target, "none", marked=target.nullable)
    if kind in BINARY_TYPES and pa.types.is_binary(arrow_type):
        return same(f"HEX({name})", pa.string(), "unhex")
    # Hex keeps any byte intact through the CSV; types PyMySQL returns as text go as their utf8mb4 text.
    raw = name if kind in RAW_BYTES_TYPES else f"CONVERT({name} USING utf8mb4)"
    return same(f"HEX({raw})", pa.string(), "exact")


class RangeReader:
    """Reads key ranges of one table as Arrow tables with the type map's schema.

    Two text forms. The **fast** one sends text bare, fields separated by the ASCII unit separator (0x1F),
    with an empty field closing each line; the **safe** one quotes text (``"`` doubled), separates by
    commas and turns zero dates into NULL. Quoting is ~20% of the server's work, and bare text is exact
    unless a value holds a line break or a 0x1F, which can't go unnoticed: the line then has the wrong
    number of fields, or the range the wrong number of rows (empty lines are rows too, and no value ends a
    line, so a trailing CR can't merge into the line break). A range whose fast text doesn't parse, or
    has zero dates, is read again in the safe form, and so is the rest of the table.
    """

    def __init__(self, shape: TableShape) -> None:
        self.shape = shape
        self.schema = shape.arrow_schema()
        self._plans = [_plan_column(column, field) for column, field in zip(shape.columns, self.schema, strict=True)]
        names = [column.name for column in shape.columns]
        self._fast_line = "CONCAT_WS(CHAR(31 USING utf8mb4), " + ", ".join(plan.fast_sql for plan in self._plans) + ", '')"
        self._safe_line = "CONCAT_WS(',', " + ", ".join(plan.safe_sql for plan in self._plans) + ")"
        #: Set once a range needed the safe form: the rest of the table is read in it too.
        self._safe = False
        column_types = {name: plan.parse_type for name, plan in zip(names, self._plans, strict=True)}
        self._fast_options = (
            pacsv.ReadOptions(column_names=[*names, _END_FIELD], use_threads=False, block_size=_CSV_BLOCK_BYTES),
            pacsv.ParseOptions(delimiter="\x1f", quote_char=False, ignore_empty_lines=False),
            pacsv.ConvertOptions(column_types=column_types, null_values=[_NULL], strings_can_be_null=False,
                                 include_columns=names),
        )
        self._safe_options = (
            pacsv.ReadOptions(column_names=names, use_threads=False, block_size=_CSV_BLOCK_BYTES),
            pacsv.ParseOptions(double_quote=True, newlines_in_values=True, ignore_empty_lines=False),
            pacsv.ConvertOptions(column_types=column_types, null_values=[_NULL], strings_can_be_null=True,
                                 quoted_strings_can_be_null=False),
        )

    def range_query(self, key_range: KeyRange, *, safe: bool) -> Select:
        line = self._safe_line if safe else self._fast_line
        source = self.shape.source_table()
        query = select(func.count(), queries.expression(f"CAST(GROUP_CONCAT({line} SEPARATOR '\\n') AS BINARY)")
                       ).select_from(source)
        where = queries.in_key_range(source, self.shape.key_columns, key_range.lower, key_range.upper)
        return query if where is None else query.where(where)

    def read_range(self, cursor: pymysql.cursors.Cursor, key_range: KeyRange) -> pa.Table:
        """One key range, in one statement (so it is consistent on its own, even outside a snapshot)."""
        return self.read_range_with(lambda: nullcontext(cursor), key_range)

    def read_range_with(self, borrow: Callable[[], AbstractContextManager[pymysql.cursors.Cursor]],
                        key_range: KeyRange) -> pa.Table:
        """Like :meth:`read_range`, holding a cursor from ``borrow()`` only while the server answers."""
        while True:
            safe = self._safe
            with borrow() as cursor:
                count, text = self._query(cursor, self.range_query(key_range, safe=safe))
            try:
                table = self.parse(text or b"", safe=safe)
            except pa.ArrowInvalid as exc:
                if safe:
                    raise SourceError(
                        f"reading {self.shape.name} range {key_range.chunk_id}: a value did not parse as the "
                        f"type map's Arrow type: {exc}",
                        hint="report it with the table's SHOW CREATE TABLE; exclude the table meanwhile",
                    ) from exc
            else:
                if table.num_rows == count:
                    return table
                if safe:
                    raise SourceError(
                        f"reading {self.shape.name} range {key_range.chunk_id}: the server returned "
                        f"{table.num_rows} of {count} rows (its text was cut at group_concat_max_len or "
                        "max_allowed_packet)",
                        hint="lower snapshot.chunk_rows (or tables.overrides.<table>.chunk_rows) in the pipeline",
                    )
            self._safe = True

    @staticmethod
    def _query(cursor: pymysql.cursors.Cursor, query: Select) -> tuple[int, bytes | None]:
        for attempt in range(_TMP_FILE_RETRIES):
            try:
                queries.execute(cursor, query)
                break
            except pymysql.err.InternalError as exc:
                # GROUP_CONCAT over TEXT columns uses an on-disk temporary table; seen here (several servers
                # sharing /tmp as tmpdir) failing now and then with "Error on delete of '/tmp/#sql-temptable..'"
                # (errno 6). The statement changed nothing, so it is safe to run again inside the snapshot.
                if exc.args[0] != 6 or attempt == _TMP_FILE_RETRIES - 1:
                    raise
        count, text = queries.one_row(cursor)
        return int(count), text

    def stream_all(self, connection: pymysql.connections.Connection, batch_rows: int) -> Iterator[pa.Table]:
        """The whole table with an unbuffered cursor, one line per row: for tables without a key, which
        can't be cut into ranges. ~0.7M rows/s; memory stays at one batch."""
        with connection.cursor(pymysql.cursors.SSCursor) as cursor:
            line = queries.expression(f"CAST({self._safe_line} AS BINARY)")
            queries.execute(cursor, select(line).select_from(self.shape.source_table()))
            while rows := cursor.fetchmany(batch_rows):
                yield self.parse(b"\n".join(row[0] for row in rows), safe=True)

    def parse(self, text: bytes, *, safe: bool) -> pa.Table:
        if not text:
            return self.schema.empty_table()
        read_options, parse_options, convert_options = self._safe_options if safe else self._fast_options
        if len(text) >= _CSV_BLOCK_BYTES:
            # A row must fit in one CSV block: a range holding a 50 MB BLOB is parsed as a single block.
            read_options = pacsv.ReadOptions(column_names=read_options.column_names, use_threads=False,
                                             block_size=len(text) + 1)
        parsed = pacsv.read_csv(io.BytesIO(text), read_options=read_options, parse_options=parse_options,
                                convert_options=convert_options)
        columns = [self._finish(plan, column, parsed.column(i), safe=safe)
                   for i, (plan, column) in enumerate(zip(self._plans, self.shape.columns, strict=True))]
        return pa.Table.from_arrays(columns, schema=self.schema)

    @staticmethod
    def _finish(plan: _ColumnPlan, column: types.ColumnSpec, values: pa.ChunkedArray, *, safe: bool
                ) -> pa.ChunkedArray:
        if plan.marked and not safe:
            values = pc.if_else(pc.equal(values, pa.scalar("")), pa.scalar(None, values.type),
                                pc.utf8_slice_codeunits(values, 1))
        if plan.convert == "none":
            return values
        if plan.convert == "cast":
            return pc.cast(values, plan.target.type)
        # The fast form can't parse strings as null, so a NULL arrives as the marker text (never valid hex).
        raw = [None if hexed is None or hexed == _NULL else bytes.fromhex(hexed) for hexed in values.to_pylist()]
        if plan.convert == "unhex":
            return pa.chunked_array([pa.array(raw, type=plan.target.type)])
        converted = [None if value is None else types.arrow_value_from_json(
            plan.target.type, types.json_value(column, pymysql_value(column, value))) for value in raw]
        try:
            return pa.chunked_array([pa.array(converted, type=plan.target.type)])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaChangeError(
                f"column {column.name} ({column.column_type}) can't be stored as {plan.target.type}: {exc}",
                hint="see docs/types.md for how each MySQL type is mapped",
            ) from exc


def pymysql_value(column: types.ColumnSpec, raw: bytes) -> Any:
    """The value PyMySQL's text protocol would give for ``raw`` (the column's bytes as the server sent them).

    Only the slow path needs this: it lets :func:`lakesync.core.types.json_value` see snapshot values in the same
    form as values read any other way.
    """
    kind = column.data_type
    if kind in RAW_BYTES_TYPES:
        return raw
    text = raw.decode("utf-8")
    if kind in INTEGER_TYPES:
        return int(text)
    if kind in {"decimal", "numeric"}:
        return Decimal(text)
    if kind in {"float", "double", "real"}:
        return float(text)
    if kind == "date":
        return pymysql.converters.convert_date(text)
    if kind in {"datetime", "timestamp"}:
        return pymysql.converters.convert_datetime(text)
    if kind == "time":
        return pymysql.converters.convert_timedelta(text)
    return text
