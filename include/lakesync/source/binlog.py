"""Reading row changes from the binlog with python-mysql-replication, each with its source position.

:class:`BinlogSource` yields, in binlog order:

* :class:`~lakesync.events.envelope.ChangeEvent` for each row of a selected table, at position
  ``(file, end offset of the rows event, row index + 1)`` with the transaction's GTID;
* :class:`TransactionEnd` after each commit (XID event, ``COMMIT`` query, or a DDL's implicit commit):
  the only places where progress may be stored, so a resume never starts inside a transaction;
* :class:`DdlStatement` for each statement that is not ``BEGIN``/``COMMIT`` (the relay parses it);
* :class:`Heartbeat` when the source is idle (the server sends heartbeats every ``heartbeat_seconds``).

Rows are decoded with the columns of the binlog's own table-map event (``binlog_row_metadata=FULL``
gives names, signedness, charsets, ENUM/SET values and the primary key), never with today's
``information_schema``: python-mysql-replication 1.0.17 reads ``optional_metadata`` when the server has
``binlog_row_metadata=FULL`` and only falls back to ``information_schema`` when names are missing *and*
``use_column_name_cache=True``, which we never set. (Its ``is_mariadb=True`` mode ignores ``log_file`` /
``log_pos`` and streams from the first binlog, so we use the classic file/position dump on MariaDB too;
MariaDB GTID events still arrive and are decoded.)

A primary-key change is a delete of the old key and a create of the new one, as Debezium emits it.
Row images of common column types are decoded by :mod:`lakesync.source.binlog_rows` (same values, several
times faster than the library's decoder); other tables go through the library.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.constants import CR, ER
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from lakesync.core import types as lakesync_types
from lakesync.core.errors import BinlogPurgedError, SourceError, SourceUnavailableError
from lakesync.core.mysql_client import connect_mysql
from lakesync.core.positions import SourcePosition
from lakesync.events.envelope import ChangeEvent
from lakesync.source.binlog_rows import decode_rows, full_bitmap, row_plan
from lakesync.source.server_checks import is_connection_error

#: MariaDB GTID flag: the transaction is one statement with no BEGIN/COMMIT around it (DDL).
_FL_STANDALONE = 0x01
_MISSING_BINLOG_ERRORS = (ER.MASTER_FATAL_ERROR_READING_BINLOG,)  # file purged or position invalid
#: Access denied on the replication connection: the user logged in for the checks, so it lacks the grant.
_NO_REPLICATION_GRANT = (ER.ACCESS_DENIED_ERROR, ER.SPECIFIC_ACCESS_DENIED_ERROR)
#: the database pymysqlreplication's control connection (table schemas) names; its stream connection does not
_CONTROL_DATABASE = "information_schema"


class StreamConnectedOnce:
    """The connection factory (``pymysql_wrapper``) of one binlog stream: its first stream connection only.

    pymysqlreplication re-requests a lost stream by itself when the server answers again quickly (a restart
    within its retry), from the last event it read, which may be inside a transaction, and without the checks
    lakesync makes after a server restart (server id, purged binlog). So a second stream connection is refused
    as the loss it stands for: the relay then resumes from its committed progress, a transaction boundary, as
    after any other loss. The control connection is made again freely."""

    def __init__(self) -> None:
        self.stream_connections = 0

    def __call__(self, **settings: Any) -> pymysql.connections.Connection:
        if settings.get("db") != _CONTROL_DATABASE:
            self.stream_connections += 1
            if self.stream_connections > 1:
                raise pymysql.err.OperationalError(
                    CR.CR_SERVER_LOST, "the binlog stream was lost (the relay resumes from its committed progress)")
        return connect_mysql(**settings)


@dataclass(frozen=True, slots=True)
class TransactionEnd:
    """A commit: every change before ``position`` is complete; resuming from here is safe."""

    position: SourcePosition
    ts_ms: int


@dataclass(frozen=True, slots=True)
class DdlStatement:
    """A statement (DDL) in ``schema`` (the session's default database), ending its own transaction."""

    sql: str
    schema: str
    position: SourcePosition
    ts_ms: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The source had nothing to send for a while; ``at`` is when we noticed (epoch seconds)."""

    at: float


SourceItem = ChangeEvent | TransactionEnd | DdlStatement | Heartbeat

# -- values -> lakesync's JSON form ------------------------------------------------------------------------
# Every value goes through the type map (lakesync.core.types, docs/types.md), the same conversion the full
# load uses; only columns whose JSON form is the decoder's value itself (integers) skip the call. There is
# no second list of "types that need no conversion" here: such a list once let YEAR 0000 through as 1900.

_DATA_TYPES = {
    FIELD_TYPE.TINY: "tinyint", FIELD_TYPE.SHORT: "smallint", FIELD_TYPE.INT24: "mediumint",
    FIELD_TYPE.LONG: "int", FIELD_TYPE.LONGLONG: "bigint", FIELD_TYPE.FLOAT: "float",
    FIELD_TYPE.DOUBLE: "double", FIELD_TYPE.NEWDECIMAL: "decimal", FIELD_TYPE.DECIMAL: "decimal",
    FIELD_TYPE.DATE: "date", FIELD_TYPE.NEWDATE: "date", FIELD_TYPE.DATETIME: "datetime",
    FIELD_TYPE.DATETIME2: "datetime", FIELD_TYPE.TIMESTAMP: "timestamp", FIELD_TYPE.TIMESTAMP2: "timestamp",
    FIELD_TYPE.TIME: "time", FIELD_TYPE.TIME2: "time", FIELD_TYPE.YEAR: "year", FIELD_TYPE.BIT: "bit",
    FIELD_TYPE.JSON: "json", FIELD_TYPE.ENUM: "enum", FIELD_TYPE.SET: "set", FIELD_TYPE.GEOMETRY: "geometry",
}
#: MariaDB writes UUID, INET4 and INET6 to the binlog as BINARY(16)/BINARY(4): the table map can't tell them
#: apart, so for binary columns of these widths the data type is read from the server's catalog.
_AMBIGUOUS_BINARY_WIDTHS = frozenset({4, 16})
_CATALOG_TYPES = ("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
                  "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s")


def _is_binary_string(column: Any) -> bool:
    return column.type == FIELD_TYPE.STRING and column.character_set_name in (None, "binary")


def _data_type(column: Any) -> str:
    if column.type in _DATA_TYPES:
        return _DATA_TYPES[column.type]
    binary = column.character_set_name in (None, "binary")
    if column.type in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
        return "varbinary" if binary else "varchar"
    if column.type == FIELD_TYPE.STRING:
        return "binary" if binary else "char"
    if column.type in (FIELD_TYPE.BLOB, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB):
        return "blob" if binary else "text"
    return "unknown"


def column_spec(column: Any, data_type: str | None = None) -> lakesync_types.ColumnSpec:
    """The :class:`~lakesync.core.types.ColumnSpec` of a table-map column (what the binlog says it is).

    ``data_type`` overrides what the table map says, for the types it cannot name (UUID, INET4, INET6)."""
    data_type = data_type or _data_type(column)
    column_type = data_type
    fsp: int = getattr(column, "fsp", None) or 0
    max_length: int = getattr(column, "max_length", None) or 0
    if data_type == "decimal":
        column_type = f"decimal({column.precision},{column.decimals})"
    elif data_type in ("datetime", "timestamp", "time") and fsp:
        column_type = f"{data_type}({fsp})"
    elif data_type == "binary" and max_length:
        # the binlog strips BINARY(n)'s trailing NULs; the width is what puts them back
        column_type = f"binary({max_length})"
    elif data_type in ("enum", "set"):
        members = column.enum_values if data_type == "enum" else column.set_values
        column_type = f"{data_type}(" + ",".join("'" + str(v).replace("'", "''") + "'" for v in members or ()) + ")"
    if column.unsigned:
        column_type += " unsigned"
    members = tuple(str(v) for v in (column.enum_values or column.set_values or ()))
    return lakesync_types.ColumnSpec(
        name=column.name, data_type=data_type, column_type=column_type,
        charset=column.character_set_name, enum_values=members,
    )


class _RowConverter:
    """Per-table-map value conversion, built once per table-map and applied in place to each row."""

    __slots__ = ("converters", "full_bitmap", "key_columns", "plan", "set_columns")

    def __init__(self, columns: list[Any], key_columns: tuple[str, ...],
                 data_types: Mapping[str, str] | None = None) -> None:
        self.plan = row_plan(columns)
        self.full_bitmap = full_bitmap(len(columns))
        self.converters: list[tuple[str, Callable[[Any], Any]]] = []
        self.set_columns: tuple[str, ...] = ()
        for column in columns:
            spec = column_spec(column, (data_types or {}).get(column.name))
            if spec.data_type == "set":
                self.set_columns += (column.name,)
            convert = lakesync_types.binlog_value_converter(spec)
            if convert is not None:
                self.converters.append((column.name, convert))
        self.key_columns = key_columns

    def __call__(self, row: dict[str, Any], none_sources: dict[str, str] | None) -> dict[str, Any]:
        for name, convert in self.converters:
            value = row[name]
            if value is not None:
                row[name] = convert(value)
        if none_sources and self.set_columns:
            for name in self.set_columns:
                if none_sources.get(name) == "empty set":
                    row[name] = ""  # the decoder returns None for an empty SET; it is not NULL
        return row


def _primary_key(table_pk: Any) -> tuple[str, ...]:
    if not table_pk:
        return ()
    return (table_pk,) if isinstance(table_pk, str) else tuple(table_pk)


class BinlogSource:
    """An iterator over the changes of one database's selected tables, from ``start`` on.

    ``selects(table)`` says whether a table is replicated; ``key_overrides`` gives key columns for tables
    without a primary key (the pipeline's ``key_columns``). ``blocking=False`` stops at the end of the
    binlog (benchmarks, tests); otherwise the source waits for new events and sends heartbeats.
    """

    def __init__(
        self,
        connection: Mapping[str, Any],
        *,
        server_id: int,
        database: str,
        start: SourcePosition,
        selects: Callable[[str], bool],
        key_overrides: Mapping[str, tuple[str, ...]] | None = None,
        name: str = "lakesync",
        blocking: bool = True,
        heartbeat_seconds: float = 1.0,
    ) -> None:
        self._connection = dict(connection)
        self._server_id = server_id
        self._database = database
        self._start = start
        self._selects = selects
        self._key_overrides = dict(key_overrides or {})
        self._name = name
        self._blocking = blocking
        self._heartbeat = heartbeat_seconds
        self._converters: dict[int, tuple[Any, _RowConverter]] = {}
        self._selected: dict[str, bool] = {}
        self._reader: BinLogStreamReader | None = None

    def _open(self) -> BinLogStreamReader:
        return BinLogStreamReader(
            connection_settings=dict(self._connection),
            server_id=self._server_id,
            log_file=self._start.file,
            log_pos=self._start.offset,
            resume_stream=True,
            blocking=self._blocking,
            only_schemas=[self._database],
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent,
                         GtidEvent, MariadbGtidEvent, RotateEvent, HeartbeatLogEvent],
            slave_heartbeat=self._heartbeat if self._blocking else None,
            report_slave=f"lakesync-{self._name}",
            enable_logging=False,
            pymysql_wrapper=StreamConnectedOnce(),
            # A table-map event whose table id is already known is not parsed again (the library's
            # freeze_schema): with one table map per transaction, parsing them was most of the relay's time on
            # single-row transactions. Safe because a table's id changes whenever its definition does (ALTER,
            # re-open), and __iter__ forgets every id at a DDL statement and at a binlog rotation (ids are reused
            # after a server restart, which always starts a new binlog file).
            freeze_schema=True,
        )

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _is_selected(self, table: str) -> bool:
        selected = self._selected.get(table)
        if selected is None:
            selected = self._selected[table] = bool(self._selects(table))
        return selected

    def _converter(self, event: Any) -> _RowConverter:
        table_obj = event.table_map[event.table_id]
        cached = self._converters.get(event.table_id)
        if cached is not None and cached[0] is table_obj:
            return cached[1]
        key = _primary_key(event.primary_key) or tuple(self._key_overrides.get(event.table, ()))
        converter = _RowConverter(event.columns, key, self._catalog_types(event.schema, event.table, event.columns))
        self._converters[event.table_id] = (table_obj, converter)
        return converter

    def _catalog_types(self, schema: str, table: str, columns: list[Any]) -> dict[str, str]:
        """The catalog's data types of a table's binary columns of width 4 or 16 (see
        :data:`_AMBIGUOUS_BINARY_WIDTHS`), read once per table map; empty when there are none.

        This is the one place the relay reads today's catalog rather than the binlog: a column changed
        between UUID and BINARY(16) while the relay is behind would be rendered in its newer form."""
        wanted = {c.name for c in columns if _is_binary_string(c) and c.max_length in _AMBIGUOUS_BINARY_WIDTHS}
        if not wanted:
            return {}
        settings = {key: value for key, value in self._connection.items() if key != "database"}
        with connect_mysql(**settings) as conn, conn.cursor() as cur:
            cur.execute(_CATALOG_TYPES, (schema, table))
            return {name: data_type.lower() for name, data_type in cur.fetchall() if name in wanted}

    @staticmethod
    def _require_full_image(event: Any, full: bytes, file: str, log_pos: int) -> None:
        """A session may still write partial row images (``SET SESSION binlog_row_image=MINIMAL``) on a
        server whose global setting is FULL; publishing them would put NULLs where values are."""
        if event.columns_present_bitmap == full and (
            type(event) is not UpdateRowsEvent or event.columns_present_bitmap2 == full
        ):
            return
        raise SourceError(
            f"the rows event for {event.schema}.{event.table} at {file}:{log_pos} has a partial row image "
            "(a session wrote it with binlog_row_image MINIMAL or NOBLOB); lakesync needs every column",
            hint="make the writing application keep binlog_row_image=FULL, then re-run the full load of this table "
            "and restart the relay after this position",
        )

    def __iter__(self) -> Iterator[SourceItem]:
        self._reader = reader = self._open()
        file = self._start.file
        gtid: str | None = None
        in_transaction = False
        database, name, server_id = self._database, self._name, self._server_id
        try:
            for event in self._reader:
                event_type = type(event)
                log_pos = event.packet.log_pos
                if event_type is WriteRowsEvent or event_type is UpdateRowsEvent or event_type is DeleteRowsEvent:
                    if not self._is_selected(event.table):
                        continue
                    convert = self._converter(event)
                    self._require_full_image(event, convert.full_bitmap, file, log_pos)
                    key_columns = convert.key_columns
                    ts_ms = event.timestamp * 1000
                    table = event.table
                    rows = decode_rows(event, convert.plan) if convert.plan is not None else None
                    if rows is None:
                        rows = event.rows
                    for index, row in enumerate(rows, start=1):
                        pos = SourcePosition(file, log_pos, index, gtid)
                        if event_type is UpdateRowsEvent:
                            before = convert(row["before_values"], row.get("before_none_sources"))
                            after = convert(row["after_values"], row.get("after_none_sources"))
                            if key_columns and any(before[c] != after[c] for c in key_columns):
                                yield ChangeEvent("d", database, table, before, None, pos, ts_ms,
                                                  {c: before[c] for c in key_columns}, False, server_id, name)
                                yield ChangeEvent("c", database, table, None, after, pos, ts_ms,
                                                  {c: after[c] for c in key_columns}, False, server_id, name)
                                continue
                            op, image = "u", after
                        elif event_type is WriteRowsEvent:
                            before, after = None, convert(row["values"], row.get("none_sources"))
                            op, image = "c", after
                        else:
                            before, after = convert(row["values"], row.get("none_sources")), None
                            op, image = "d", before
                        key = {c: image[c] for c in key_columns} if key_columns else None
                        yield ChangeEvent(op, database, table, before, after, pos, ts_ms, key,
                                          not key_columns, server_id, name)
                elif event_type is XidEvent:
                    in_transaction = False
                    yield TransactionEnd(SourcePosition(file, log_pos, 0, gtid), event.timestamp * 1000)
                elif event_type is MariadbGtidEvent:
                    gtid = event.gtid
                    in_transaction = not (event.flags & _FL_STANDALONE)
                elif event_type is GtidEvent:
                    gtid = event.gtid
                elif event_type is QueryEvent:
                    sql = event.query if isinstance(event.query, str) else event.query.decode("utf-8", "replace")
                    statement = sql.strip().upper()
                    if statement == "BEGIN":
                        in_transaction = True
                        continue
                    position = SourcePosition(file, log_pos, 0, gtid)
                    ts_ms = event.timestamp * 1000
                    if statement in ("COMMIT", "ROLLBACK"):
                        in_transaction = False
                        yield TransactionEnd(position, ts_ms)
                        continue
                    schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema or "")
                    reader.table_map.clear()  # a DDL may have changed a table: parse its next table map
                    yield DdlStatement(sql, schema, position, ts_ms)
                    if not in_transaction:
                        yield TransactionEnd(position, ts_ms)
                elif event_type is RotateEvent:
                    file = event.next_binlog
                    reader.table_map.clear()  # table ids are reused after a server restart (see _open)
                elif event_type is HeartbeatLogEvent:
                    yield Heartbeat(dt.datetime.now().timestamp())
            if self._blocking:
                # A blocking stream only ends when the server closes it (shutdown, restart, KILL): that is a
                # failure to report with a non-zero exit, not the quiet end of a --stop-when-idle run.
                raise SourceUnavailableError("the source closed the binlog stream (server shut down or restarted?)",
                                             hint="the relay reconnects and resumes from its committed progress")
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code in _MISSING_BINLOG_ERRORS:
                raise BinlogPurgedError(
                    f"the source cannot stream from {self._start.token()}: {exc.args[1] if len(exc.args) > 1 else exc}",
                    hint="the binlog was purged or the position is not an event boundary; re-run the full load",
                ) from exc
            if code in _NO_REPLICATION_GRANT:
                raise SourceError(
                    f"the source refused to stream its binlog to {self._connection.get('user')!r}: "
                    f"{exc.args[-1]} (the user needs the REPLICATION SLAVE privilege)",
                    hint="GRANT REPLICATION SLAVE ON *.* TO the lakesync user (docs/security.md lists every grant)",
                ) from exc
            error = SourceUnavailableError if is_connection_error(exc) else SourceError
            raise error(f"lost the binlog stream: {exc}", hint="check the source server; the relay "
                        "resumes from its committed progress") from exc
        finally:
            self.close()
