"""MySQL/MariaDB column types -> Arrow -> Delta, and the JSON form of values in change events.

docs/types.md holds the map as one table; this module is its implementation. Three value forms meet here:

* what the source drivers return: PyMySQL for the snapshot (text protocol) and python-mysql-replication for
  binlog rows. They differ per type (BIT is ``bytes`` vs a ``'0101'`` string, SET is ``'a,b'`` vs a Python
  set, zero dates are strings vs ``None``, BINARY loses its trailing NULs in the binlog...), so every
  converter accepts both;
* the JSON form carried in change events (ints as numbers, DECIMAL as exact strings, temporal values as
  ISO strings, TIME as signed microseconds, binary data as base64);
* the Python value Arrow accepts for the stored type.

Converters are built once per column (or per Arrow type) and cached, so the per-row paths run one
pre-chosen function per value instead of dispatching on the type each time.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import re
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any, NamedTuple

import pyarrow as pa

from lakesync.core.errors import SourceError

#: Delta's decimal limit: wider DECIMAL columns are stored as exact strings.
MAX_DECIMAL_PRECISION = 38
#: The statement a snapshot session must run so that TIMESTAMP values arrive in UTC, as in the binlog.
SNAPSHOT_TIME_ZONE_SQL = "SET time_zone = '+00:00'"

_EPOCH = dt.datetime(1970, 1, 1)
_ONE_MICROSECOND = dt.timedelta(microseconds=1)
_ONE_SECOND_US = 1_000_000
#: python-mysql-replication decodes the MySQL zero YEAR (0000) as 1900, which is never a valid YEAR.
_BINLOG_ZERO_YEAR = 1900
_TYPE_ARGS = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
_QUOTED_VALUE = re.compile(r"'((?:[^'\\]|''|\\.)*)'")


@dataclass(frozen=True)
class ColumnSpec:
    """One source column.

    ``data_type`` is ``information_schema.COLUMNS.DATA_TYPE`` in lower case (``int``, ``decimal``,
    ``varchar``, ``enum``...); ``column_type`` is the full ``COLUMN_TYPE`` (``int(10) unsigned``,
    ``decimal(65,30)``, ``enum('a','b')``, ``datetime(6)``). ``enum_values`` holds the allowed values of an
    ENUM or SET in definition order (parsed from ``column_type`` when left empty).
    """

    name: str
    data_type: str
    column_type: str
    nullable: bool = True
    charset: str | None = None
    enum_values: tuple[str, ...] = field(default=())

    @property
    def unsigned(self) -> bool:
        return " unsigned" in self.column_type.lower()

    @property
    def type_args(self) -> tuple[int, ...]:
        """The numbers in the type's parentheses: ``decimal(65,30)`` -> ``(65, 30)``, ``bit(1)`` -> ``(1,)``."""
        match = _TYPE_ARGS.search(self.column_type)
        if not match:
            return ()
        return tuple(int(group) for group in match.groups() if group is not None)

    @property
    def allowed_values(self) -> tuple[str, ...]:
        """The ENUM/SET members in definition order."""
        if self.enum_values:
            return self.enum_values
        body = self.column_type[self.column_type.find("(") + 1 : self.column_type.rfind(")")]
        return tuple(_unquote(raw) for raw in _QUOTED_VALUE.findall(body))


def _unquote(raw: str) -> str:
    return raw.replace("''", "'").replace("\\\\", "\\")


# -- the map --------------------------------------------------------------------------------------------


class _Plan(NamedTuple):
    """How one column is stored and converted; built once per column."""

    arrow_type: pa.DataType
    #: Zero dates become NULL, so such columns are nullable in Arrow even when NOT NULL in MySQL.
    always_nullable: bool
    #: Driver value (PyMySQL or binlog) -> JSON form; never called with None.
    to_json: Callable[[Any], Any]
    #: Binlog value -> JSON form, where the binlog needs a correction the snapshot must not get.
    to_json_binlog: Callable[[Any], Any]
    #: PyMySQL values of one column -> Arrow array (vectorised where Arrow can take them directly).
    db_array: Callable[[Sequence[Any], pa.DataType], pa.Array]


def _identity(value: Any) -> Any:
    return value


def _direct_array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=arrow_type)


def _mapped_array(convert: Callable[[Any], Any]) -> Callable[[Sequence[Any], pa.DataType], pa.Array]:
    def build(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
        return pa.array([None if v is None else convert(v) for v in values], type=arrow_type)

    return build


def _plan(
    arrow_type: pa.DataType,
    to_json: Callable[[Any], Any] = _identity,
    *,
    to_json_binlog: Callable[[Any], Any] | None = None,
    db_array: Callable[[Sequence[Any], pa.DataType], pa.Array] = _direct_array,
    always_nullable: bool = False,
) -> _Plan:
    return _Plan(arrow_type, always_nullable, to_json, to_json_binlog or to_json, db_array)


# Integers ----------------------------------------------------------------------------------------------

#: data_type -> (signed Arrow type, unsigned Arrow type): the smallest signed type that holds the range.
_INTEGERS: dict[str, tuple[pa.DataType, pa.DataType]] = {
    "tinyint": (pa.int8(), pa.int16()),
    "smallint": (pa.int16(), pa.int32()),
    "mediumint": (pa.int32(), pa.int32()),
    "int": (pa.int32(), pa.int64()),
    "integer": (pa.int32(), pa.int64()),
    "bigint": (pa.int64(), pa.decimal128(20, 0)),
}


def _integer_plan(column: ColumnSpec) -> _Plan:
    signed, unsigned = _INTEGERS[column.data_type]
    return _plan(unsigned if column.unsigned else signed)


# Decimals and floats ----------------------------------------------------------------------------------


def _decimal_json(value: Any) -> str:
    """Exact, never in exponent notation: ``Decimal('0E-10')`` -> ``'0.0000000000'``."""
    return format(value if isinstance(value, Decimal) else Decimal(value), "f")


def _decimal_plan(column: ColumnSpec) -> _Plan:
    args = column.type_args
    precision = args[0] if args else 10
    scale = args[1] if len(args) > 1 else 0
    if precision <= MAX_DECIMAL_PRECISION:
        return _plan(pa.decimal128(precision, scale), _decimal_json)
    return _plan(pa.string(), _decimal_json, db_array=_mapped_array(_decimal_json))


def _float_plan(column: ColumnSpec) -> _Plan:
    return _plan(pa.float32() if column.data_type == "float" else pa.float64(), float)


# BIT: an unsigned integer of n bits --------------------------------------------------------------------


def _bit_value(value: Any) -> int:
    """PyMySQL gives big-endian bytes, python-mysql-replication a string of '0'/'1'."""
    if isinstance(value, str):
        return int(value, 2) if value else 0
    if isinstance(value, int):
        return value
    return int.from_bytes(value, "big")


def _bit_plan(column: ColumnSpec) -> _Plan:
    bits = column.type_args[0] if column.type_args else 1
    arrow_type = pa.int64() if bits < 64 else pa.decimal128(20, 0)
    return _plan(arrow_type, _bit_value, db_array=_mapped_array(_bit_value))


# Dates and times ---------------------------------------------------------------------------------------
# PyMySQL returns a zero or partly zero date ('0000-00-00', '2020-00-05') as the raw string because Python
# can't hold it; python-mysql-replication returns None. Both become NULL, as Debezium does.


def _date_json(value: Any) -> str | None:
    return None if isinstance(value, str) else value.isoformat()


def _date_arrow(value: Any) -> Any:
    return None if isinstance(value, str) else value


def _temporal_array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """Vectorised unless the column holds zero dates (strings), which become NULL first."""
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([_date_arrow(v) for v in values], type=arrow_type)


def _datetime_json(value: Any) -> str | None:
    return None if isinstance(value, str) else value.isoformat(timespec="microseconds")


def _timestamp_json(value: Any) -> str | None:
    """TIMESTAMP is an instant: rendered in UTC with ``Z``.

    The binlog holds seconds since the epoch and python-mysql-replication returns them as naive UTC; the
    snapshot session must run :data:`SNAPSHOT_TIME_ZONE_SQL` so that PyMySQL's naive values are UTC too.
    The zero TIMESTAMP is stored as epoch 0 (never a valid TIMESTAMP), which the binlog decodes as
    1970-01-01 00:00:00."""
    if isinstance(value, str) or value == _EPOCH:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


def _time_json(value: dt.timedelta) -> int:
    return value // _ONE_MICROSECOND


def _time_json_binlog(value: dt.timedelta) -> int:
    """Undo python-mysql-replication's decoding of negative TIME2 values with a fraction.

    MySQL stores a negative TIME as the two's complement of the whole packed value, fraction included; the
    library (<= 1.0.17) complements the integer part and the fraction separately, so ``-00:00:01.25`` comes
    back as ``-(1 s + 1 s - 0.25 s)``. For a wrong magnitude ``w`` with fraction ``f = w mod 1``, the true
    magnitude is ``floor(w) + (1 - f)``. tests/integration/test_type_map.py pins this against the library.
    """
    micros = value // _ONE_MICROSECOND
    if micros >= 0:
        return micros
    wrong = -micros
    fraction = wrong % _ONE_SECOND_US
    if fraction == 0:
        return micros
    return -(wrong - fraction + (_ONE_SECOND_US - fraction))


def _time_array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=pa.duration("us")).cast(arrow_type)


def _year_json(value: Any) -> int:
    return 0 if value == _BINLOG_ZERO_YEAR else int(value)


def _temporal_plan(column: ColumnSpec) -> _Plan:
    kind = column.data_type
    if kind == "date":
        return _plan(pa.date32(), _date_json, db_array=_temporal_array, always_nullable=True)
    if kind == "datetime":
        return _plan(pa.timestamp("us"), _datetime_json, db_array=_temporal_array, always_nullable=True)
    if kind == "timestamp":
        return _plan(
            pa.timestamp("us", tz="UTC"), _timestamp_json, db_array=_temporal_array, always_nullable=True
        )
    if kind == "time":
        return _plan(pa.int64(), _time_json, to_json_binlog=_time_json_binlog, db_array=_time_array)
    return _plan(pa.int16(), _year_json)


# Strings, binary data and the types stored as either ------------------------------------------------------


def _text_json(value: Any) -> str:
    return value if isinstance(value, str) else value.decode("utf-8")


def _as_bytes(value: Any) -> bytes:
    """The binlog decoder returns an empty binary value as ``''``."""
    return value.encode() if isinstance(value, str) else bytes(value)


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _binary_plan(column: ColumnSpec) -> _Plan:
    if column.data_type == "binary":
        # The binlog strips BINARY(n)'s trailing NUL padding; PyMySQL returns the full n bytes.
        width = column.type_args[0] if column.type_args else 1

        def padded(value: Any) -> bytes:
            return _as_bytes(value).ljust(width, b"\0")

        return _plan(pa.binary(), lambda v: _b64(padded(v)), db_array=_mapped_array(padded))
    return _plan(pa.binary(), lambda v: _b64(_as_bytes(v)), db_array=_mapped_array(_as_bytes))


def _geometry_wkb(value: Any) -> bytes:
    """MySQL's internal geometry value is a 4-byte little-endian SRID followed by standard WKB."""
    return bytes(value[4:])


def _geometry_plan(_: ColumnSpec) -> _Plan:
    return _plan(pa.binary(), lambda v: _b64(_geometry_wkb(v)), db_array=_mapped_array(_geometry_wkb))


def _json_text(value: Any) -> str:
    """MariaDB's JSON is LONGTEXT (a string on both paths); MySQL 8's binlog holds parsed binary JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return json.dumps(_plain_json(value), ensure_ascii=False)


def _plain_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, dict):
        return {_plain_json(key): _plain_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_json(item) for item in value]
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dt.date | dt.time | dt.timedelta):
        return str(value)
    return value


def _set_plan(column: ColumnSpec) -> _Plan:
    order = {member: index for index, member in enumerate(column.allowed_values)}

    def set_json(value: Any) -> str:
        """PyMySQL gives ``'a,c'``; the binlog an unordered Python set, put back in definition order."""
        if isinstance(value, str):
            return value
        return ",".join(sorted(value, key=lambda member: order.get(member, len(order))))

    return _plan(pa.string(), set_json, db_array=_mapped_array(set_json))


def _fixed_bytes(value: Any, width: int) -> bytes:
    return _as_bytes(value).ljust(width, b"\0")


def _uuid_text(value: Any) -> str:
    """MariaDB's UUID: PyMySQL returns the text, the binlog 16 bytes with trailing zero bytes stripped (so
    the nil UUID arrives as ``''``, like every empty binary value)."""
    return value if value and isinstance(value, str) else str(uuid.UUID(bytes=_fixed_bytes(value, 16)))


def _inet6_text(value: Any) -> str:
    """MariaDB prints INET6 exactly as inet_ntop does (IPv4-mapped as ``::ffff:1.2.3.4``)."""
    if value and isinstance(value, str):
        return value
    return socket.inet_ntop(socket.AF_INET6, _fixed_bytes(value, 16))


def _inet4_text(value: Any) -> str:
    if value and isinstance(value, str):
        return value
    return socket.inet_ntop(socket.AF_INET, _fixed_bytes(value, 4))


def _text_plan(convert: Callable[[Any], str]) -> Callable[[ColumnSpec], _Plan]:
    def build(_: ColumnSpec) -> _Plan:
        return _plan(pa.string(), convert, db_array=_mapped_array(convert))

    return build


def _string_plan(_: ColumnSpec) -> _Plan:
    return _plan(pa.string(), _text_json)


_PLANNERS: dict[str, Callable[[ColumnSpec], _Plan]] = {
    **dict.fromkeys(_INTEGERS, _integer_plan),
    "decimal": _decimal_plan,
    "numeric": _decimal_plan,
    "float": _float_plan,
    "double": _float_plan,
    "real": _float_plan,
    "bit": _bit_plan,
    **dict.fromkeys(("date", "datetime", "timestamp", "time", "year"), _temporal_plan),
    **dict.fromkeys(
        ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"), _string_plan
    ),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"), _binary_plan),
    "json": _text_plan(_json_text),
    "set": _set_plan,
    "uuid": _text_plan(_uuid_text),
    "inet6": _text_plan(_inet6_text),
    "inet4": _text_plan(_inet4_text),
    **dict.fromkeys(
        (
            "geometry",
            "point",
            "linestring",
            "polygon",
            "multipoint",
            "multilinestring",
            "multipolygon",
            "geometrycollection",
            "geomcollection",
        ),
        _geometry_plan,
    ),
}


@lru_cache(maxsize=4096)
def _column_plan(column: ColumnSpec) -> _Plan:
    planner = _PLANNERS.get(column.data_type.lower())
    if planner is None:
        raise SourceError(
            f"column {column.name!r} has type {column.column_type!r}, which lakesync cannot map to Delta",
            hint="exclude the column from the pipeline, or change its type; docs/types.md lists the supported types",
        )
    if column.data_type != column.data_type.lower():
        column = dataclasses.replace(column, data_type=column.data_type.lower())
    return planner(column)


# -- public API ------------------------------------------------------------------------------------------


def arrow_field(column: ColumnSpec) -> pa.Field:
    """The Arrow field lakesync stores the column as; the Delta type follows from it.

    Raises :class:`SourceError` naming the column for a type lakesync does not map."""
    plan = _column_plan(column)
    return pa.field(column.name, plan.arrow_type, nullable=column.nullable or plan.always_nullable)


def arrow_schema(columns: Iterable[ColumnSpec]) -> pa.Schema:
    return pa.schema([arrow_field(column) for column in columns])


def json_converter(column: ColumnSpec, *, binlog: bool = False) -> Callable[[Any], Any]:
    """A function from a driver value of this column to its JSON form, built once (NULL stays None)."""
    plan = _column_plan(column)
    convert = plan.to_json_binlog if binlog else plan.to_json

    def to_json(value: Any) -> Any:
        return None if value is None else convert(value)

    return to_json


def binlog_value_converter(column: ColumnSpec) -> Callable[[Any], Any] | None:
    """The binlog-value -> JSON conversion of a column, or None when the JSON form *is* the decoder's
    value (integers), so the relay can skip the call. Never called with None."""
    convert = _column_plan(column).to_json_binlog
    return None if convert is _identity else convert


def json_value(column: ColumnSpec, value: Any, *, binlog: bool = False) -> Any:
    """The JSON form of ``value`` in change events (docs/types.md has the form per type).

    ``value`` is what PyMySQL returns for the column, or, with ``binlog=True``, what
    python-mysql-replication returns from a rows event; the flag matters for TIME only, whose negative
    fractional values the binlog decoder gets wrong. For whole binlog rows use :func:`json_row_from_binlog`,
    which also tells an empty SET from NULL."""
    if value is None:
        return None
    plan = _column_plan(column)
    return plan.to_json_binlog(value) if binlog else plan.to_json(value)


@lru_cache(maxsize=1024)
def _row_converters(
    columns: tuple[ColumnSpec, ...], binlog: bool
) -> tuple[tuple[str, Callable[[Any], Any], bool], ...]:
    """Per column of a row: its name, its JSON converter and whether it is a SET; built once per table."""
    return tuple(
        (
            column.name,
            _column_plan(column).to_json_binlog if binlog else _column_plan(column).to_json,
            column.data_type.lower() == "set",
        )
        for column in columns
    )


def binlog_row_json_converter(
    columns: Sequence[ColumnSpec],
) -> Callable[[Mapping[str, Any], Mapping[str, str] | None], dict[str, Any]]:
    """A function from a binlog row image (``row["values"]``, ``row["none_sources"]`` of
    python-mysql-replication) to its JSON form, keyed by column name in column order. Build it once per
    table and call it per row.

    The decoder returns None for an empty SET and says so in ``none_sources``; that becomes ``''``."""
    plan = _row_converters(tuple(columns), True)

    def convert_row(values: Mapping[str, Any], none_sources: Mapping[str, str] | None = None) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for name, convert, is_set in plan:
            value = values.get(name)
            if value is not None:
                row[name] = convert(value)
            elif is_set and none_sources and none_sources.get(name) == "empty set":
                row[name] = ""
            else:
                row[name] = None
        return row

    return convert_row


def db_row_json_converter(columns: Sequence[ColumnSpec]) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """A function from a PyMySQL row tuple (columns in ``columns`` order) to its JSON form, keyed by
    column name. Build it once per table and call it per row."""
    plan = [(name, convert) for name, convert, _ in _row_converters(tuple(columns), False)]

    def convert_row(row: Sequence[Any]) -> dict[str, Any]:
        return {
            name: None if value is None else convert(value)
            for (name, convert), value in zip(plan, row, strict=True)
        }

    return convert_row


def json_row_from_binlog(
    columns: Sequence[ColumnSpec],
    values: Mapping[str, Any],
    none_sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One binlog row image in JSON form; see :func:`binlog_row_json_converter` for many rows."""
    return binlog_row_json_converter(columns)(values, none_sources)


def json_row_from_db(columns: Sequence[ColumnSpec], row: Sequence[Any]) -> dict[str, Any]:
    """One PyMySQL row tuple in JSON form; see :func:`db_row_json_converter` for many rows."""
    return db_row_json_converter(columns)(row)


# JSON form -> Arrow values ------------------------------------------------------------------------------


def _timestamp_utc_from_json(value: str) -> dt.datetime:
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    return dt.datetime.fromisoformat(value)


def _b64decode(value: str) -> bytes:
    return base64.b64decode(value, validate=True)


@lru_cache(maxsize=256)
def _from_json(arrow_type: pa.DataType) -> Callable[[Any], Any]:
    if pa.types.is_integer(arrow_type) or pa.types.is_string(arrow_type):
        return _identity
    if pa.types.is_floating(arrow_type):
        return float
    if pa.types.is_decimal(arrow_type):
        # DECIMAL arrives as an exact string; BIGINT UNSIGNED and BIT(64) as JSON numbers.
        return Decimal
    if pa.types.is_binary(arrow_type):
        return _b64decode
    if pa.types.is_date32(arrow_type):
        return dt.date.fromisoformat
    if pa.types.is_timestamp(arrow_type):
        return _timestamp_utc_from_json if arrow_type.tz else dt.datetime.fromisoformat
    raise SourceError(
        f"no JSON decoding for Arrow type {arrow_type}",
        hint="only the Arrow types that lakesync.core.types.arrow_field produces can be decoded",
    )


def arrow_value_from_json(arrow_type: pa.DataType, value: Any) -> Any:
    """The Python value Arrow accepts for ``arrow_type`` from the JSON form; needs the Arrow type only,
    so the sink can decode with the Delta schema alone."""
    if value is None:
        return None
    return _from_json(arrow_type)(value)


def _json_array(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """Vectorised where Arrow parses the JSON form itself (numbers, strings, ISO dates and timestamps)."""
    if (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_string(arrow_type)
    ):
        return pa.array(values, type=arrow_type)
    if pa.types.is_date32(arrow_type) or pa.types.is_timestamp(arrow_type):
        return pa.array(values, type=pa.string()).cast(arrow_type)
    convert = _from_json(arrow_type)
    return pa.array([None if v is None else convert(v) for v in values], type=arrow_type)


def arrow_table_from_json_rows(schema: pa.Schema, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows in JSON form (``after`` images) -> an Arrow table of ``schema``; a missing key is NULL."""
    arrays = [_json_array([row.get(f.name) for row in rows], f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def arrow_table_from_db_rows(columns: Sequence[ColumnSpec], rows: Sequence[Sequence[Any]]) -> pa.Table:
    """PyMySQL row tuples (``SELECT`` in column order, see :func:`snapshot_select_list`) -> an Arrow table."""
    schema = arrow_schema(columns)
    if not rows:
        return schema.empty_table()
    by_column = list(zip(*rows, strict=True))
    arrays = [
        _column_plan(column).db_array(values, f.type)
        for column, values, f in zip(columns, by_column, schema, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


# Reading the source losslessly ---------------------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """A MySQL identifier in backticks, embedded backticks doubled."""
    return "`" + name.replace("`", "``") + "`"


def snapshot_select_expression(column: ColumnSpec) -> str:
    """The SELECT expression that reads the column without loss over the text protocol.

    The server prints FLOAT with 6 significant digits (1.2345678 -> '1.23457'), so FLOAT is read as DOUBLE,
    which prints the stored single-precision value exactly, as the binlog has it."""
    quoted = quote_identifier(column.name)
    if column.data_type.lower() == "float":
        return f"CAST({quoted} AS DOUBLE) AS {quoted}"
    return quoted


def snapshot_select_list(columns: Iterable[ColumnSpec]) -> str:
    return ", ".join(snapshot_select_expression(column) for column in columns)
