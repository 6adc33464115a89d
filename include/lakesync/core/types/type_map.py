"""The type map: for each MySQL/MariaDB column type, the Arrow type it is stored as and the functions
that turn a driver's value into lakesync's JSON form (docs/types.md has the map as one table).

What the drivers return differs per type (BIT is ``bytes`` vs a ``'0101'`` string, SET is ``'a,b'`` vs a
Python set, zero dates are strings vs ``None``, BINARY loses its trailing NULs in the binlog, YEAR 0000
comes back from the binlog as 1900...), so every converter accepts both; the binlog-only repairs live in
``to_json_binlog``. A :class:`ColumnPlan` is built once per column and cached, so the per-row paths run
one pre-chosen function per value instead of dispatching on the type each time.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import socket
import uuid
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any, NamedTuple

import pyarrow as pa

from lakesync.core.errors import SourceError
from lakesync.core.types.columns import ColumnSpec

#: Delta's decimal limit: wider DECIMAL columns are stored as exact strings.
MAX_DECIMAL_PRECISION = 38
_EPOCH = dt.datetime(1970, 1, 1)
_ONE_MICROSECOND = dt.timedelta(microseconds=1)
_ONE_SECOND_US = 1_000_000
#: python-mysql-replication decodes the MySQL zero YEAR (0000) as 1900, which is never a valid YEAR.
_BINLOG_ZERO_YEAR = 1900


# -- the map --------------------------------------------------------------------------------------------


class ColumnPlan(NamedTuple):
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


def identity(value: Any) -> Any:
    return value


def _direct_array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=arrow_type)


def _mapped_array(convert: Callable[[Any], Any]) -> Callable[[Sequence[Any], pa.DataType], pa.Array]:
    def build(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
        return pa.array([None if v is None else convert(v) for v in values], type=arrow_type)

    return build


def _plan(
    arrow_type: pa.DataType,
    to_json: Callable[[Any], Any] = identity,
    *,
    to_json_binlog: Callable[[Any], Any] | None = None,
    db_array: Callable[[Sequence[Any], pa.DataType], pa.Array] = _direct_array,
    always_nullable: bool = False,
) -> ColumnPlan:
    return ColumnPlan(arrow_type, always_nullable, to_json, to_json_binlog or to_json, db_array)


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


def _integer_plan(column: ColumnSpec) -> ColumnPlan:
    signed, unsigned = _INTEGERS[column.data_type]
    return _plan(unsigned if column.unsigned else signed)


# Decimals and floats ----------------------------------------------------------------------------------


def _decimal_json(value: Any) -> str:
    """Exact, never in exponent notation: ``Decimal('0E-10')`` -> ``'0.0000000000'``."""
    return format(value if isinstance(value, Decimal) else Decimal(value), "f")


def _decimal_plan(column: ColumnSpec) -> ColumnPlan:
    args = column.type_args
    precision = args[0] if args else 10
    scale = args[1] if len(args) > 1 else 0
    if precision <= MAX_DECIMAL_PRECISION:
        return _plan(pa.decimal128(precision, scale), _decimal_json)
    return _plan(pa.string(), _decimal_json, db_array=_mapped_array(_decimal_json))


def _float_plan(column: ColumnSpec) -> ColumnPlan:
    return _plan(pa.float32() if column.data_type == "float" else pa.float64(), float)


# BIT: an unsigned integer of n bits --------------------------------------------------------------------


def _bit_value(value: Any) -> int:
    """PyMySQL gives big-endian bytes, python-mysql-replication a string of '0'/'1'."""
    if isinstance(value, str):
        return int(value, 2) if value else 0
    if isinstance(value, int):
        return value
    return int.from_bytes(value, "big")


def _bit_plan(column: ColumnSpec) -> ColumnPlan:
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


def _temporal_plan(column: ColumnSpec) -> ColumnPlan:
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


def _binary_plan(column: ColumnSpec) -> ColumnPlan:
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


def _geometry_plan(_: ColumnSpec) -> ColumnPlan:
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


def _set_plan(column: ColumnSpec) -> ColumnPlan:
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


def _text_plan(convert: Callable[[Any], str]) -> Callable[[ColumnSpec], ColumnPlan]:
    def build(_: ColumnSpec) -> ColumnPlan:
        return _plan(pa.string(), convert, db_array=_mapped_array(convert))

    return build


def _string_plan(_: ColumnSpec) -> ColumnPlan:
    return _plan(pa.string(), _text_json)


_PLANNERS: dict[str, Callable[[ColumnSpec], ColumnPlan]] = {
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
def column_plan(column: ColumnSpec) -> ColumnPlan:
    planner = _PLANNERS.get(column.data_type.lower())
    if planner is None:
        raise SourceError(
            f"column {column.name!r} has type {column.column_type!r}, which lakesync cannot map to Delta",
            hint="exclude the column from the pipeline, or change its type; docs/types.md lists the supported types",
        )
    if column.data_type != column.data_type.lower():
        column = dataclasses.replace(column, data_type=column.data_type.lower())
    return planner(column)


# -- the Arrow side ----------------------------------------------------------------------------------------


def arrow_field(column: ColumnSpec) -> pa.Field:
    """The Arrow field lakesync stores the column as; the Delta type follows from it.

    Raises :class:`SourceError` naming the column for a type lakesync does not map."""
    plan = column_plan(column)
    return pa.field(column.name, plan.arrow_type, nullable=column.nullable or plan.always_nullable)


def arrow_schema(columns: Iterable[ColumnSpec]) -> pa.Schema:
    return pa.schema([arrow_field(column) for column in columns])
