"""A Delta table's column types as Arrow types, and which stored Parquet types the oracle reads as them.

A data file keeps the types it was written with. After type widening (PROTOCOL.md, "Type Widening":
``ALTER COLUMN c TYPE BIGINT`` on an INT column, DECIMAL(10,2) -> DECIMAL(12,4), FLOAT -> DOUBLE, ...), files
written before the change still hold the narrower type, and a reader must convert their values to the
table's current type. Other writers store one Delta type in several Parquet ways (Spark: ``timestamp`` as
INT96, read by pyarrow as a zone-less timestamp; delta-rs: as TIMESTAMP_MICROS with UTC). The oracle
converts only what is one of those two cases, each a lossless cast, and calls anything else an error:
a file holding a type its table's schema doesn't allow is a writer's bug, not something to cast away.

Only the primitive types lakesync's type map produces (docs/types.md) are read; a table with nested types
(array, map, struct) or another type is refused.

A partition column's value is not in the data file but in the log, as text (PROTOCOL.md, "Partition Value
Serialization"); :func:`partition_value` reads that text as the column's type, and refuses text that isn't
one of the protocol's forms rather than guessing.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa

_PRIMITIVE = {
    "boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "string": pa.string(), "binary": pa.binary(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_INTEGERS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
#: The widenings the protocol lists, as (from, to) Delta type names; decimals are checked by their digits.
_WIDENINGS = {("byte", "short"), ("byte", "integer"), ("byte", "long"), ("short", "integer"), ("short", "long"),
              ("integer", "long"), ("float", "double"), ("byte", "double"), ("short", "double"),
              ("integer", "double"), ("date", "timestamp_ntz")}


def arrow_type(delta_type: Any, column: str) -> pa.DataType:
    """The Arrow type of a Delta column type (a type name from ``schemaString``)."""
    if isinstance(delta_type, str):
        if delta_type in _PRIMITIVE:
            return _PRIMITIVE[delta_type]
        if m := _DECIMAL.match(delta_type):
            return pa.decimal128(int(m[1]), int(m[2]))
    raise AssertionError(f"oracle: column {column!r} has Delta type {delta_type!r}, which the oracle does not read")


def arrow_schema(schema: Mapping[str, Any]) -> pa.Schema:
    """The Arrow schema of a Delta schema (``metaData.schemaString``, parsed), checking its type changes."""
    fields = []
    for f in schema["fields"]:
        for change in f.get("metadata", {}).get("delta.typeChanges", []):
            _check_type_change(f["name"], change)
        fields.append(pa.field(f["name"], arrow_type(f["type"], f["name"]), nullable=f.get("nullable", True)))
    return pa.schema(fields)


def _check_type_change(column: str, change: Mapping[str, Any]) -> None:
    """The protocol's reader requirement: fail on a type change the reader doesn't support."""
    if change.get("fieldPath") or not _widens(change["fromType"], change["toType"]):
        raise AssertionError(f"oracle: column {column!r} went through a type change the oracle does not read: "
                             f"{change}")


def _widens(old: str, new: str) -> bool:
    if (old, new) in _WIDENINGS:
        return True
    if not (m_new := _DECIMAL.match(new)):
        return False
    precision, scale = int(m_new[1]), int(m_new[2])
    if m_old := _DECIMAL.match(old):  # Decimal(p, s) -> Decimal(p + k1, s + k2), k1 >= k2 >= 0
        return scale >= int(m_old[2]) and precision - scale >= int(m_old[1]) - int(m_old[2])
    integer_digits = {"byte": 10, "short": 10, "integer": 10, "long": 20}.get(old)
    return integer_digits is not None and precision - scale >= integer_digits


def read_as(values: pa.ChunkedArray, target: pa.Field, file: str) -> pa.ChunkedArray:
    """A column as stored in ``file``, as the table's current type (``target``)."""
    stored = values.type
    if stored == target.type:
        return values
    if not _readable_as(stored, target.type):
        raise AssertionError(f"oracle: {file} stores column {target.name!r} as {stored}, which is not "
                             f"{target.type} nor a type widened to it")
    return values.cast(target.type, safe=True)


def _readable_as(stored: pa.DataType, target: pa.DataType) -> bool:
    if pa.types.is_string(target):
        return pa.types.is_large_string(stored) or pa.types.is_string_view(stored)
    if pa.types.is_binary(target):
        return (pa.types.is_large_binary(stored) or pa.types.is_binary_view(stored)
                or pa.types.is_fixed_size_binary(stored))
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(stored):
        # an instant: any unit, UTC or zone-less (INT96); a wall-clock time (ntz): any unit, zone-less only
        return target.tz is not None or stored.tz is None
    if pa.types.is_timestamp(target) and target.tz is None:
        return pa.types.is_date32(stored)
    if pa.types.is_integer(target):
        return stored in _INTEGERS and target in _INTEGERS and stored.bit_width <= target.bit_width
    if pa.types.is_float64(target):
        return pa.types.is_float32(stored) or stored in _INTEGERS[:3]
    if pa.types.is_decimal(target):
        if pa.types.is_decimal(stored):
            return target.scale >= stored.scale and target.precision - target.scale >= stored.precision - stored.scale
        digits = {8: 10, 16: 10, 32: 10, 64: 20}.get(stored.bit_width) if stored in _INTEGERS else None
        return digits is not None and target.precision - target.scale >= digits
    return False


#: Partition values as the protocol writes them: booleans in lower case, numbers as decimal text (floats also
#: ``NaN``, ``Infinity``, ``-Infinity``), dates ``yyyy-MM-dd``.
_BOOLEANS = {"true": True, "false": False}
_INTEGER_TEXT = re.compile(r"^-?\d+$")
_FLOAT_TEXT = re.compile(r"^(-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|NaN|-?Infinity)$")
_DECIMAL_TEXT = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
_DATE_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: ``yyyy-MM-dd HH:mm:ss[.SSSSSS]``, or ISO 8601 in UTC (``yyyy-MM-ddTHH:mm:ss[.SSSSSS]Z``), which delta-spark
#: 4.4 writes for ``timestamp`` (``timestamp_ntz`` gets the first form).
_TIMESTAMP_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z)?$")


def partition_value(text: str | None, delta_type: Any, column: str) -> pa.Scalar:
    """A partition value from ``add.partitionValues`` (text, or None for null) as a scalar of the column's type.

    Null is null. The empty string is null too by the protocol, and so delta-spark reads it for every type but
    ``string`` and ``binary``, where it reads ``''`` and ``b''``: there, readers disagree and the oracle refuses
    the value (delta-spark itself never writes it: it writes an empty string or binary as null). A timestamp without ``Z`` is, by the protocol, in the writer's time
    zone: the oracle reads it as UTC for ``timestamp`` (lakesync's Spark sessions run in UTC; delta-rs and Delta
    Kernel read it so too) and as a wall-clock time for ``timestamp_ntz``. Text that is not the type's form, or a
    value the type cannot hold (300 for a ``byte``, 1.234 for a ``decimal(10,2)``), is an error."""
    target = arrow_type(delta_type, column)
    if text == "" and delta_type in ("string", "binary"):
        raise AssertionError(f"oracle: partition column {column!r} ({delta_type}) has value '', null by the "
                             "protocol and empty by delta-spark's reader: the oracle does not pick one")
    if not text:
        return pa.scalar(None, target)
    try:
        value = _parse_partition_text(text, delta_type if isinstance(delta_type, str) else None)
        if value is not None:
            return pa.scalar(value, target)
    except (ValueError, ArithmeticError, pa.ArrowInvalid) as exc:
        problem = f": {exc}"
    else:
        problem = ""
    raise AssertionError(f"oracle: partition column {column!r} ({delta_type}) has value {text!r}, which is not "
                         f"the protocol's serialization of a {delta_type}{problem}")


def _parse_partition_text(text: str, kind: str | None) -> Any:
    """The value of ``text`` for a column of Delta type ``kind``, or None if it isn't that type's form."""
    if kind == "string":
        return text
    if kind == "binary":
        return text.encode()  # the writer's text of the bytes; delta-spark turns bytes to text as UTF-8
    if kind == "boolean":
        return _BOOLEANS.get(text)
    if kind in ("byte", "short", "integer", "long"):
        return int(text) if _INTEGER_TEXT.match(text) else None
    if kind in ("float", "double"):
        return float(text) if _FLOAT_TEXT.match(text) else None
    if kind == "date":
        return dt.date.fromisoformat(text) if _DATE_TEXT.match(text) else None
    if kind in ("timestamp", "timestamp_ntz") and (m := _TIMESTAMP_TEXT.match(text)):
        if kind == "timestamp_ntz":
            return None if m[2] else dt.datetime.fromisoformat(text)
        return dt.datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=dt.UTC)
    if kind is not None and _DECIMAL.match(kind) and _DECIMAL_TEXT.match(text):
        return Decimal(text)
    return None
