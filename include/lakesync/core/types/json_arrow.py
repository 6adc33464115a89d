"""lakesync's JSON form -> Arrow values, knowing only the Arrow type (so the stream's sink can decode events
with the Delta table's schema alone, without a source connection)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

import pyarrow as pa

from lakesync.core.errors import SourceError
from lakesync.core.types.type_map import identity


def _timestamp_utc_from_json(value: str) -> dt.datetime:
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    return dt.datetime.fromisoformat(value)


def _b64decode(value: str) -> bytes:
    return base64.b64decode(value, validate=True)


@lru_cache(maxsize=256)
def _from_json(arrow_type: pa.DataType) -> Callable[[Any], Any]:
    if pa.types.is_integer(arrow_type) or pa.types.is_string(arrow_type):
        return identity
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
