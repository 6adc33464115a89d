"""Reading what Debezium's MySQL connector writes: its source block as a lakesync position, and its
logical types (JSON converter with schemas) as lakesync's JSON form (docs/types.md, docs/events.md).

Both are pure functions of the event's JSON, so the stream's decoder (on the driver or vectorised on
executors) and the handoff's seek use the same rules.

Positions. Debezium's ``source`` block holds ``file``, ``pos`` (where the rows event starts) and ``row``
(0-based row inside it); lakesync's relay writes the *end* offset of the event instead. Either way a
change committed after a full load's position P sits after P and one committed before sits before it
(an event that starts at or after P ends after it, one that ends at or before P starts before it), so a
Debezium topic can be handed off from a lakesync full load of the same server, and replays order the
same. What does not carry over: positions from a *different* server (after a failover the coordinates
change), and GTID-only positions (Debezium always writes file and pos for MySQL, so none are expected).

Values. Debezium's encodings are decoded exactly: DECIMAL from its unscaled two's-complement bytes with
no decimal context (a DECIMAL(65,30) keeps all 65 digits) and rendered without exponent notation,
``io.debezium.data.Bits`` (little-endian bytes) and BIT(1) (a boolean) as the unsigned integer lakesync
stores for BIT, temporal types as lakesync's ISO strings and TIME as microseconds.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from lakesync.core.errors import ConfigError, LakesyncError
from lakesync.core.positions import SourcePosition

_EPOCH = dt.datetime(1970, 1, 1)
#: the ``source.version`` lakesync's relay writes (lakesync.events.envelope.EVENT_FORMAT, which imports this module)
LAKESYNC_EVENT_FORMAT = "lakesync.event.v1"
_EPOCH_DATE = dt.date(1970, 1, 1)


class EventFormatError(LakesyncError):
    """A Kafka record is not a change event lakesync (or Debezium) wrote."""


# -- positions ---------------------------------------------------------------------------------------------

def _whole_number(source: Mapping[str, Any], name: str) -> int:
    value = source.get(name)
    if value is None or value == "":
        return 0
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise EventFormatError(f"the event's source block has {name}={value!r}, not a whole number >= 0",
                               hint="the stream reads events written by lakesync's relay or Debezium's MySQL "
                               "connector; see docs/events.md")
    return int(value)


def position_from_source_block(source: Mapping[str, Any], op: str = "c") -> SourcePosition:
    """The source position of a change event from its ``source`` block alone (no Kafka headers).

    ``(file, pos, row + 1)`` with the block's GTID; a snapshot read (``op`` ``r``) sits at ``(file, pos, 0)``,
    the position its snapshot was taken at. Works for lakesync's and Debezium's MySQL events alike.
    Raises :class:`EventFormatError` when the block has no usable binlog file and offset."""
    file = source.get("file")
    if not file or not isinstance(file, str):
        raise EventFormatError("the event's source block has no binlog file, so it cannot be ordered",
                               hint="lakesync needs MySQL/MariaDB binlog events with source.file and "
                               "source.pos (Debezium's MySQL connector writes them); see docs/events.md")
    offset = _whole_number(source, "pos")
    row = 0 if op == "r" else _whole_number(source, "row") + 1
    try:
        return SourcePosition(file, offset, row, source.get("gtid") or None)
    except ConfigError as exc:
        raise EventFormatError(f"the event's source block has no usable binlog position: {exc}",
                               hint=exc.hint) from None


# -- logical types -> lakesync's JSON form -------------------------------------------------------------------

def _iso_datetime(value: dt.datetime) -> str:
    return value.isoformat(timespec="microseconds")


def _from_days(days: int) -> str:
    return (_EPOCH_DATE + dt.timedelta(days=int(days))).isoformat()


def _from_epoch(unit_per_second: int) -> Callable[[int], str]:
    def convert(value: int) -> str:
        seconds, fraction = divmod(int(value), unit_per_second)
        micros = fraction * 1_000_000 // unit_per_second
        return _iso_datetime(_EPOCH + dt.timedelta(seconds=seconds, microseconds=micros))
    return convert


def _time_micros(unit_per_second: int) -> Callable[[int], int]:
    """TIME as microseconds since midnight (MySQL TIME may be negative or exceed 24 h)."""
    return lambda value: int(value) * 1_000_000 // unit_per_second


def decimal_text(unscaled: int, scale: int) -> str:
    """``unscaled * 10**-scale`` as plain decimal text, exact at any precision (no context rounding) and
    never in exponent notation: ``(0, 10)`` -> ``'0.0000000000'``, ``(1, -5)`` -> ``'100000'``."""
    digits = tuple(int(d) for d in str(abs(unscaled)))
    return format(Decimal((1 if unscaled < 0 else 0, digits, -scale)), "f")


def _unscaled(value: str) -> int:
    """Kafka Connect Decimal bytes: base64 of the big-endian two's-complement unscaled value."""
    return int.from_bytes(base64.b64decode(value), "big", signed=True)


def _decimal(scale: int) -> Callable[[str], str]:
    return lambda value: decimal_text(_unscaled(value), scale)


def _variable_scale_decimal(value: Mapping[str, Any]) -> str:
    return decimal_text(_unscaled(value["value"]), int(value["scale"]))


def _bits(value: str) -> int:
    """``io.debezium.data.Bits``: Debezium reverses MySQL's big-endian BIT bytes to little-endian."""
    return int.from_bytes(base64.b64decode(value), "little")


def _geometry_wkb(value: Mapping[str, Any]) -> str:
    """``io.debezium.data.geometry.Geometry``/``Point`` is ``{wkb, srid}``; lakesync stores the WKB alone (base64
    in its JSON form), as the full load does with MySQL's SRID-prefixed value."""
    return str(value["wkb"])


def _boolean(value: Any) -> int:
    """Debezium writes BIT(1) as a boolean; lakesync's BIT is an unsigned integer."""
    return int(value)


_BY_NAME: dict[str, Callable[[Any], Any]] = {
    "io.debezium.time.Date": _from_days,
    "org.apache.kafka.connect.data.Date": _from_days,
    "io.debezium.time.Timestamp": _from_epoch(1_000),
    "org.apache.kafka.connect.data.Timestamp": _from_epoch(1_000),
    "io.debezium.time.MicroTimestamp": _from_epoch(1_000_000),
    "io.debezium.time.NanoTimestamp": _from_epoch(1_000_000_000),
    "io.debezium.time.Time": _time_micros(1_000),
    "org.apache.kafka.connect.data.Time": _time_micros(1_000),
    "io.debezium.time.MicroTime": _time_micros(1_000_000),
    "io.debezium.time.NanoTime": _time_micros(1_000_000_000),
    "io.debezium.data.VariableScaleDecimal": _variable_scale_decimal,
    "io.debezium.data.Bits": _bits,
    "io.debezium.data.geometry.Geometry": _geometry_wkb,
    "io.debezium.data.geometry.Point": _geometry_wkb,
}


def field_converter(field_schema: Mapping[str, Any]) -> Callable[[Any], Any] | None:
    """How to turn one Debezium field value into lakesync's JSON form; None when it already is."""
    name = field_schema.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        return _decimal(int((field_schema.get("parameters") or {}).get("scale", 0)))
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name is None and field_schema.get("type") == "boolean":
        return _boolean
    # ZonedTimestamp/ZonedTime are ISO strings already; Json, Enum, EnumSet are strings; bytes are base64.
    return None


RowFields = tuple[Mapping[str, Any], ...]
#: one shared tuple per distinct column list: every event carries its schema, and a batch's events must not
#: each keep their own copy alive (bounded: cleared when it grows past _ROW_FIELDS_MAX column lists)
_row_fields: dict[tuple[str, ...], RowFields] = {}
_ROW_FIELDS_MAX = 1024


def row_fields(schema: Mapping[str, Any]) -> RowFields | None:
    """The column schemas of the row images (the ``after`` struct, the same as ``before``): what a column that
    appears in the events is, as Debezium describes it; the same object for every event with the same columns.
    None when the schema has no row struct."""
    for part in schema.get("fields") or ():
        if part.get("field") in ("after", "before") and part.get("type") == "struct":
            fields = part.get("fields") or ()
            names = tuple(str(column.get("field")) for column in fields)
            shared = _row_fields.get(names)
            if shared is None:
                if len(_row_fields) >= _ROW_FIELDS_MAX:
                    _row_fields.clear()
                shared = _row_fields[names] = tuple(fields)
            return shared
    return None


def describe_field(field_schema: Mapping[str, Any]) -> str:
    """A column's type as Debezium's schema gives it, for messages: ``int32``, ``io.debezium.time.Date``,
    ``org.apache.kafka.connect.data.Decimal(10,2)``; ``NOT NULL`` when the field is not optional."""
    text = str(field_schema.get("name") or field_schema.get("type") or "?")
    parameters = field_schema.get("parameters") or {}
    if "connect.decimal.precision" in parameters:
        text += f"({parameters['connect.decimal.precision']},{parameters.get('scale', 0)})"
    if field_schema.get("optional") is False:
        text += " NOT NULL"
    return text


def refuse_schemaless(source: Mapping[str, Any]) -> None:
    """Raise when an event without the JSON converter's ``{"schema", "payload"}`` wrapper was not written by
    lakesync's relay: Debezium's connector ran with ``schemas.enable=false``, so DECIMAL (base64 bytes),
    BIT, and temporal columns (epoch numbers) cannot be told from plain strings and numbers, and would be
    stored wrong. lakesync's own events need no schema: their values are already in lakesync's JSON form."""
    version = source.get("version")
    if version is None or version == LAKESYNC_EVENT_FORMAT:
        return
    connector = source.get("connector") or "?"
    raise EventFormatError(
        f"a change event of {source.get('db')}.{source.get('table')} was written by Debezium ({connector} "
        f"connector, version {version}) without its schema: Kafka Connect's JSON converter ran with "
        "schemas.enable=false, and without the schema DECIMAL, BIT, date and time values cannot be read exactly",
        hint="set value.converter.schemas.enable=true (and key.converter.schemas.enable=true) for the connector "
        "(worker or connector configuration), restart it so that its topics carry {\"schema\", \"payload\"}, "
        "then re-run the full load of the affected tables (`lakesync snapshot --pipeline P --tables T`) so the "
        "stream starts after the records without schema; docs/debezium.md")


def envelope_converters(schema: Mapping[str, Any]) -> dict[str, dict[str, Callable[[Any], Any]]]:
    """Per row image (``before``/``after``), the converters of the columns that need one."""
    out: dict[str, dict[str, Callable[[Any], Any]]] = {}
    for part in schema.get("fields") or ():
        if part.get("field") in ("before", "after") and part.get("type") == "struct":
            converters = {}
            for column in part.get("fields") or ():
                converter = field_converter(column)
                if converter is not None:
                    converters[column["field"]] = converter
            out[part["field"]] = converters
    return out


def convert_row(row: dict[str, Any] | None, converters: dict[str, Callable[[Any], Any]] | None
                ) -> dict[str, Any] | None:
    """A row image with Debezium's encodings replaced by lakesync's JSON form."""
    if row is None or not converters:
        return row
    return {name: (converters[name](value) if value is not None and name in converters else value)
            for name, value in row.items()}
