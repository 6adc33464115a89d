"""The change-event format: lakesync's own events round-trip, and Debezium's MySQL events decode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakesync.core.positions import SourcePosition
from lakesync.events.envelope import (
    EVENT_FORMAT,
    ChangeEvent,
    EventFormatError,
    SchemaChangeEvent,
    decode,
    decode_schema_change,
    encode,
    encode_schema_change,
    record_position_key,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _event(**overrides: object) -> ChangeEvent:
    fields: dict[str, object] = dict(
        op="u", db="bank", table="accounts",
        before={"id": 7, "balance": "10.00", "note": None},
        after={"id": 7, "balance": "12.50", "note": "ünïcode ✓"},
        position=SourcePosition("binlog.000003", 1542, 2, "0-1-17"),
        ts_ms=1_700_000_000_000, key={"id": 7}, server_id=4101, name="lakesync",
    )
    fields.update(overrides)
    return ChangeEvent(**fields)  # type: ignore[arg-type]


def test_encoded_event_is_the_debezium_envelope_with_position_headers() -> None:
    key, value, headers = encode(_event())
    document = json.loads(value)
    assert set(document) == {"before", "after", "source", "op", "ts_ms"}
    assert document["op"] == "u"
    assert document["source"] == {
        "version": EVENT_FORMAT, "connector": "mysql", "name": "lakesync", "db": "bank", "table": "accounts",
        "server_id": 4101, "ts_ms": 1_700_000_000_000, "snapshot": "false", "gtid": "0-1-17",
        "file": "binlog.000003", "pos": 1542, "row": 1,
    }
    assert json.loads(key) == {"id": 7}
    header_map = dict(headers)
    assert header_map["lakesync.pos"] == SourcePosition("binlog.000003", 1542, 2).key().encode()
    assert header_map["lakesync.op"] == b"u"
    assert header_map["lakesync.key"] == b"pk"


def test_event_round_trips_through_encode_and_decode() -> None:
    event = _event()
    key, value, headers = encode(event)
    decoded = decode(value, headers, key=key)
    assert decoded.position == event.position and decoded.position.gtid == "0-1-17"
    assert (decoded.op, decoded.db, decoded.table, decoded.before, decoded.after, decoded.key) == (
        event.op, event.db, event.table, event.before, event.after, event.key)
    assert decoded.ts_ms == event.ts_ms and not decoded.snapshot


def test_position_is_recovered_from_the_source_block_without_headers() -> None:
    event = _event(position=SourcePosition("binlog.000003", 1542, 5))
    _, value, _ = encode(event)
    assert decode(value).position == event.position


def test_snapshot_row_sits_at_the_snapshot_position_itself() -> None:
    event = _event(op="r", before=None, position=SourcePosition("binlog.000003", 900, 0), snapshot=True)
    _, value, headers = encode(event)
    for decoded in (decode(value, headers), decode(value)):
        assert decoded.position == SourcePosition("binlog.000003", 900, 0)
        assert decoded.snapshot


def test_keyless_table_uses_the_whole_row_as_key_and_says_so() -> None:
    event = _event(op="d", key=None, key_is_row=True, after=None)
    key, _, headers = encode(event)
    assert json.loads(key) == event.before
    assert dict(headers)["lakesync.key"] == b"row"


def test_composite_and_string_keys_encode_as_json_objects() -> None:
    key, _, _ = encode(_event(key={"account": "AC-1", "day": "2026-01-01"}))
    assert json.loads(key) == {"account": "AC-1", "day": "2026-01-01"}


def test_debezium_update_event_from_the_documentation_decodes() -> None:
    raw = (FIXTURES / "debezium_mysql_update.json").read_bytes()
    event = decode(raw)
    assert event.op == "u"
    assert (event.db, event.table, event.server_id, event.name) == ("inventory", "customers", 223344, "dbserver1")
    assert event.before == {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
    assert event.after is not None and event.after["first_name"] == "Anne Marie"
    assert event.position == SourcePosition("mysql-bin.000003", 364, 1)
    assert event.ts_ms == 1486501486000 and event.emitted_ms == 1486501486308
    assert not event.snapshot


def test_debezium_event_without_its_schema_is_refused_with_the_converter_setting_to_change() -> None:
    """schemas.enable=false: the JSON converter writes the payload alone. Its values can't be read exactly."""
    document = json.loads((FIXTURES / "debezium_mysql_update.json").read_text())
    bare = json.dumps(document["payload"]).encode()
    for attempt in (lambda: decode(bare), lambda: record_position_key(bare, None)):
        with pytest.raises(EventFormatError, match=r"schemas\.enable=false") as refused:
            attempt()
        assert "value.converter.schemas.enable=true" in (refused.value.hint or "")
        assert "inventory.customers" in refused.value.message


def test_lakesyncs_own_events_need_no_schema_wrapper() -> None:
    _, value, _ = encode(_event())
    assert decode(value).after == _event().after


def test_debezium_logical_types_become_lakesync_json_values() -> None:
    event = decode((FIXTURES / "debezium_mysql_logical_types.json").read_bytes())
    assert event.after == {
        "id": 7,
        "order_date": "2024-01-01",
        "created_at": "2024-01-01T12:00:00.123456",
        "shipped_at": "2024-01-01T13:00:00.500000",
        "paid_at": "2024-01-01T12:30:00Z",
        "cutoff": 45_296_000_001,
        "amount": "-2.05",
        "rate": "0.482",
        "flags": "a,c",
        "note": None,
    }
    assert event.position == SourcePosition("mysql-bin.000012", 4577, 2, "3e11fa47-71ca-11e1-9e33-c80aa9429562:23")


def test_debezium_snapshot_read_event_sits_at_row_zero() -> None:
    document = json.loads((FIXTURES / "debezium_mysql_update.json").read_text())
    document["payload"].update(op="r", before=None)
    document["payload"]["source"]["snapshot"] = "true"
    event = decode(json.dumps(document))
    assert event.snapshot and event.position == SourcePosition("mysql-bin.000003", 364, 0)


@pytest.mark.parametrize("raw", [None, b"not json", b"[]", b'{"op": "x", "source": {"file": "b.000001"}}',
                                 b'{"schema": {}, "payload": null}'])
def test_records_that_are_not_change_events_are_refused_clearly(raw: bytes | None) -> None:
    with pytest.raises(EventFormatError):
        decode(raw)


def test_schema_change_event_round_trips() -> None:
    change = SchemaChangeEvent(
        db="bank", table="accounts", kind="alter_table", ddl="ALTER TABLE accounts ADD COLUMN c INT",
        position=SourcePosition("binlog.000004", 77), ts_ms=1_700_000_000_000,
        changes=[{"change": "add", "column": "c", "type": "INT"}], server_id=4101,
    )
    key, value, headers = encode_schema_change(change)
    assert json.loads(key) == {"databaseName": "bank", "table": "accounts"}
    decoded = decode_schema_change(value, headers)
    assert decoded == change
