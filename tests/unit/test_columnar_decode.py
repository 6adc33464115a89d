"""The columnar decoder (the executors' path) gives exactly the record decoder's table, for every type.

The record decoder (``decode_batch`` + ``TableChanges.to_arrow``) is today's reference. Values are built
the relay's way: driver values through ``json_value`` into events, ``encode``d into Kafka records.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from lakesync.core.positions import SourcePosition
from lakesync.core.types import ColumnSpec, arrow_schema, json_value
from lakesync.events.envelope import H_FORMAT, H_POS, ChangeEvent, encode
from lakesync.sink.changes import last_change_per_key
from lakesync.stream.columnar_decode import (
    DecodePlan,
    _fast_decode,
    decode_records,
    decode_table,
)
from lakesync.stream.decode import decode_batch, header_column

UTC = dt.UTC
TOPIC = "p.db.t"

#: Every row of docs/types.md: (column type, driver values including the edges; None is added to each).
TYPES: list[tuple[str, list[Any]]] = [
    ("tinyint(4)", [-128, 127, 0]),
    ("tinyint(3) unsigned", [0, 255]),
    ("tinyint(1)", [1, 0, -1]),
    ("smallint(6)", [-32768, 32767]),
    ("smallint(5) unsigned", [0, 65535]),
    ("mediumint(9)", [-8388608, 8388607]),
    ("mediumint(8) unsigned", [0, 16777215]),
    ("int(11)", [-2147483648, 2147483647]),
    ("int(10) unsigned", [0, 4294967295]),
    ("bigint(20)", [-(2**63), 2**63 - 1]),
    ("bigint(20) unsigned", [0, 2**64 - 1]),
    ("decimal(65,30)", [Decimal("-12345678901234567890123456789012345.123456789012345678901234567890"),
                        Decimal(0), Decimal("9" * 35 + "." + "9" * 30)]),
    ("decimal(38,10)", [Decimal("-1234567890123456789012345678.0123456789"), Decimal("0.5"),
                        Decimal("9999999999999999999999999999.9999999999"), Decimal("0E-10")]),
    ("decimal(10,2)", [Decimal("-12.50"), Decimal("0.01"), Decimal("-0.00")]),
    ("decimal(10,0)", [Decimal(-99999), Decimal(12)]),
    ("float", [1.2345677614212036, -3.4028234663852886e38, 1.401298464324817e-45, 0.0]),
    ("double", [0.1, -1.7976931348623157e308, 5e-324, 1e21, 123456789.125]),
    ("bit(1)", [b"\x01", b"\x00"]),
    ("bit(10)", [b"\x02\x01"]),
    ("bit(64)", [b"\xff" * 8, b"\x80" + b"\x00" * 7]),
    ("date", [dt.date(1000, 1, 1), dt.date(9999, 12, 31), dt.date(2020, 2, 29), "0000-00-00"]),
    ("datetime", [dt.datetime(2020, 1, 2, 3, 4, 5), "0000-00-00 00:00:00"]),
    ("datetime(6)", [dt.datetime(1000, 1, 1, 0, 0, 0, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]),
    ("timestamp", [dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)]),
    ("timestamp(6)", [dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)]),
    ("time", [dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(0)]),
    ("time(6)", [dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
                 dt.timedelta(microseconds=-1)]),
    ("year", [1901, 2155, 0]),
    ("char(10)", ["abc", ""]),
    ("varchar(20)", ["漢🙂", "quote \" backslash \\ newline \n tab \t nul \x00", "ü" * 20]),
    ("longtext", ["x" * 5000]),
    ("binary(4)", [b"\x00\xff\x00\x00", b"ab\x00\x00"]),
    ("varbinary(8)", [b"", b"\x00\x01\xfe\xff"]),
    ("blob", [bytes(range(256))]),
    ("json", ['{"a": [1, 2.5], "b": "\\u00e9"}', "[]"]),
    ("enum('x','y','')", ["y", ""]),
    ("set('a','b','c')", ["a,c", ""]),
    ("point", [b"\x00\x00\x00\x00" + bytes.fromhex("0101000000000000000000f03f0000000000000040")]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000"]),
    ("inet6", ["::ffff:1.2.3.4"]),
    ("inet4", ["10.0.0.1"]),
]


def _spec(index: int, column_type: str) -> ColumnSpec:
    data_type = column_type.split("(")[0].split(" ")[0].lower()
    return ColumnSpec(f"c{index}", data_type, column_type)


COLUMNS = [ColumnSpec("id", "int", "int(11)", nullable=False),
           *(_spec(i, column_type) for i, (column_type, _) in enumerate(TYPES))]
SCHEMA = arrow_schema(COLUMNS)


def _rows() -> list[dict[str, Any]]:
    """One row per edge value of the longest column, cycling the shorter ones, and a row of NULLs."""
    depth = max(len(values) for _, values in TYPES)
    rows = []
    for r in range(depth):
        row: dict[str, Any] = {"id": r}
        for spec, (_, values) in zip(COLUMNS[1:], TYPES, strict=True):
            row[spec.name] = json_value(spec, values[r % len(values)])
        rows.append(row)
    rows.append({"id": depth, **{spec.name: None for spec in COLUMNS[1:]}})
    return rows


def _event(op: str, row: dict[str, Any], n: int, *, before: dict[str, Any] | None = None) -> ChangeEvent:
    return ChangeEvent(op=op, db="db", table="t", before=before if op != "c" else None,
                       after=None if op == "d" else row, position=SourcePosition("binlog.000007", 1000 + n, 1 + n % 3),
                       ts_ms=1_700_000_000_000 + n, key={"id": row["id"]})


#: the columns of Spark's Kafka source (``includeHeaders``) as ``mapInArrow`` hands them to the decode
KAFKA_RECORD_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])


def kafka_records(values: list[tuple[bytes | None, list[tuple[str, bytes]]]], topic: str = TOPIC) -> pa.Table:
    """Spark's Kafka columns for records of ``topic``."""
    schema = KAFKA_RECORD_SCHEMA
    n = len(values)
    headers = pa.array([[{"key": k, "value": v} for k, v in h] for _, h in values], schema.field("headers").type)
    return pa.Table.from_arrays([
        pa.array([b"k"] * n, pa.binary()), pa.array([v for v, _ in values], pa.binary()),
        pa.array([topic] * n, pa.string()), pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
        pa.array([None] * n, schema.field("timestamp").type), pa.array([0] * n, pa.int32()), headers,
    ], schema=schema)


def _encoded(events: list[ChangeEvent]) -> list[tuple[bytes | None, list[tuple[str, bytes]]]]:
    return [(value, headers) for _, value, headers in (encode(e) for e in events)]


def _reference(records: pa.Table) -> pa.Table:
    return decode_batch(records, {TOPIC: "t"}).tables["t"].to_arrow(SCHEMA)


def _assert_same(records: pa.Table) -> pa.Table:
    expected = _reference(records)
    got = decode_table(records, TOPIC, "t", SCHEMA)
    assert got.schema == expected.schema
    assert got.to_pylist() == expected.to_pylist()
    assert got.equals(expected)
    return got


def _mixed_events() -> list[ChangeEvent]:
    rows = _rows()
    events = []
    for n, row in enumerate(rows):
        events.append(_event("c", row, 3 * n))
        events.append(_event("u", row, 3 * n + 1, before=row))
        if n % 2:
            events.append(_event("d", row, 3 * n + 2, before=row))
    events.append(_event("r", rows[0], 999))
    return events


def test_every_type_decodes_column_wise_exactly_as_the_record_decoder_does() -> None:
    records = kafka_records(_encoded(_mixed_events()))
    assert _fast_decode(records, SCHEMA) is not None  # the columnar path itself, not the fallback
    got = _assert_same(records)
    assert got.num_rows == len(_mixed_events())
    assert set(got.column("_lakesync_op").to_pylist()) == {"c", "u", "d", "r"}


def test_a_delete_with_only_the_key_in_its_before_image_leaves_the_other_columns_null() -> None:
    events = [_event("d", {"id": 1}, 1, before={"id": 1}), _event("c", _rows()[0], 2)]
    got = _assert_same(kafka_records(_encoded(events)))
    assert got.column("c0").to_pylist()[0] is None


def test_debezium_records_and_records_without_position_headers_take_the_record_path_in_order() -> None:
    events = _mixed_events()[:6]
    encoded = _encoded(events)
    # no lakesync.pos (position from the source block), a foreign format header, a Debezium-wrapped value
    encoded[1] = (encoded[1][0], [h for h in encoded[1][1] if h[0] != H_POS])
    encoded[3] = (encoded[3][0], [(k, b"other" if k == H_FORMAT else v) for k, v in encoded[3][1]])
    wrapped = {"schema": {"type": "struct", "fields": []}, "payload": json.loads(encoded[4][0])}
    encoded[4] = (json.dumps(wrapped).encode(), [])
    _assert_same(kafka_records(encoded))


def test_values_the_json_reader_refuses_fall_back_to_the_record_decoder() -> None:
    encoded = _encoded(_mixed_events()[:2])
    document = json.loads(encoded[0][0])
    document["source"]["ts_ms"] = str(document["source"]["ts_ms"])  # the record decoder reads it with int()
    encoded[0] = (json.dumps(document).encode(), encoded[0][1])
    _assert_same(kafka_records(encoded))


def test_a_malformed_event_fails_as_the_record_decoder_fails() -> None:
    records = kafka_records([(b'{"op": "x", "source": {"file": "binlog.000001"}}',
                              [(H_FORMAT, b"lakesync.event.v1"), (H_POS, b"00000001.000000000004.000001")])])
    with pytest.raises(Exception, match="unknown op"):
        decode_table(records, TOPIC, "t", SCHEMA)


def test_repeated_header_keeps_the_last_value_as_the_record_decoder_does() -> None:
    records = kafka_records([(b"{}", [("a", b"1"), ("b", b"x"), ("a", b"2")]), (b"{}", []), (b"{}", [("a", b"3")])])
    headers = records.column("headers").combine_chunks()
    assert header_column(headers, "a").to_pylist() == [b"2", None, b"3"]


def test_batch_is_split_by_topic_and_changes_after_a_stopping_ddl_are_left_out() -> None:
    events = _mixed_events()
    records = pa.concat_tables([kafka_records(_encoded(events)),
                                kafka_records([(b'{"ddl": 1}', [])], topic="p.db._schema"),
                                kafka_records(_encoded(events[:2]), topic="p.db.other"),
                                kafka_records([(None, [])])])
    stop = events[5].position.key()
    plan = DecodePlan({TOPIC: "t"}, {"t": SCHEMA}, schema_topic="p.db._schema", stop_before={"t": stop})
    out = decode_records(records, plan)
    assert list(out.tables) == ["t"]
    assert out.tables["t"].column("_lakesync_pos").to_pylist() == [e.position.key() for e in events[:5]]
    assert out.schema_records is not None and out.schema_records.num_rows == 1


def test_changes_before_a_tables_read_from_position_are_left_out_and_the_rest_kept_in_order() -> None:
    events = _mixed_events()
    start = events[7].position.key()
    plan = DecodePlan({TOPIC: "t"}, {"t": SCHEMA}, read_from={"t": start})
    out = decode_records(kafka_records(_encoded(events)), plan)
    assert out.tables["t"].column("_lakesync_pos").to_pylist() == [e.position.key() for e in events[7:]]


def test_binary_values_are_base64_decoded_strictly() -> None:
    row = {**_rows()[0], "c32": base64.b64encode(b"\x00\x01").decode()}
    _assert_same(kafka_records(_encoded([_event("c", row, 1)])))


def test_reduction_after_columnar_decode_keeps_the_newest_change_per_key() -> None:
    got = decode_table(kafka_records(_encoded(_mixed_events())), TOPIC, "t", SCHEMA)
    reduced = last_change_per_key(got, ["id"])
    assert reduced.num_rows == len(_rows())
    ops = dict(zip(reduced.column("id").to_pylist(), reduced.column("_lakesync_op").to_pylist(), strict=True))
    assert ops[1] == "d" and ops[2] == "u" and ops[0] == "r"
