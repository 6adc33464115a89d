"""A column added at the source, as Debezium's events show it (records the real connector wrote, in
tests/fixtures/debezium_mariadb_added_columns.json): found with the position of the first event carrying it,
sent to the driver instead of dropped, and turned into a re-load of the table that names the column; and a
Debezium record without its schema (``schemas.enable=false``) refused with the setting to change."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from lakesync.events.envelope import EventFormatError, decode, encode
from lakesync.stream.columnar_decode import DecodePlan, decode_table
from lakesync.stream.decode import ColumnsAddedError, TableChanges
from lakesync.stream.reduce import ReducePlan, reduce_partition, reduced_batch
from lakesync.stream.schema_changes import columns_added_in_events
from tests.unit.test_columnar_decode import kafka_records

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RECORDED = json.loads((FIXTURES / "debezium_mariadb_added_columns.json").read_text())
TOPIC = "dbz.db.t"


def _value(name: str) -> bytes:
    return json.dumps(RECORDED[name]).encode()


def _schema_before_the_ddl() -> pa.Schema:
    """The table's columns before the ALTERs (types do not matter to what is found missing)."""
    return pa.schema([(name, pa.string()) for name in RECORDED["before_ddl"]["payload"]["after"]])


def test_columns_added_at_the_source_are_found_with_the_first_event_that_carries_them() -> None:
    old, new = decode(_value("before_ddl")), decode(_value("after_ddl"))
    added = TableChanges([old, new]).added_columns(_schema_before_the_ddl())
    assert [c.name for c in added] == sorted(f"c{n}" for n in range(1, 25))
    assert {c.first_position for c in added} == {new.position.key()}
    types = {c.name: c.event_type for c in added}
    assert types["c1"] == types["c16"] == "int32"  # INT NULL and INT DEFAULT (1+1): the same schema
    assert types["c2"] == "int32 NOT NULL"
    assert types["c6"] == "org.apache.kafka.connect.data.Decimal(10,2)"


def test_events_at_or_before_the_load_position_and_lakesyncs_own_events_add_no_column() -> None:
    new = decode(_value("after_ddl"))
    assert TableChanges([new]).added_columns(_schema_before_the_ddl(), after=new.position.key()) == []
    relayed = decode(encode(new)[1])  # lakesync's envelope: its schema changes come on the schema topic
    assert relayed.after == new.after and relayed.row_fields is None
    assert TableChanges([relayed]).added_columns(_schema_before_the_ddl()) == []


def test_debeziums_records_with_a_new_column_reach_the_driver_instead_of_being_dropped() -> None:
    schema = _schema_before_the_ddl()
    records = kafka_records([(_value("before_ddl"), []), (_value("after_ddl"), [])], topic=TOPIC)
    with pytest.raises(ColumnsAddedError, match="c1"):
        decode_table(records, TOPIC, "t", schema)
    plan = DecodePlan(topic_tables={TOPIC: "t"}, schemas={"t": schema})
    chunks = list(reduce_partition(ReducePlan(plan, {"t": ["id"]}, frozenset({TOPIC})), records.to_batches()))
    assert {kind for kind, *_ in chunks} == {"raw", "newest"}
    batch = reduced_batch(chunks, plan)
    assert batch.raw is not None and not batch.tables
    assert [c.name for c in batch.raw.tables["t"].added_columns(schema)][:2] == ["c1", "c10"]
    # a stopped table's newest position, read from the source block (Debezium writes no lakesync.pos header)
    assert batch.newest == {TOPIC: decode(_value("after_ddl")).position.key()}


def test_a_column_added_in_debeziums_events_reloads_the_table_naming_the_column_and_the_command() -> None:
    new = decode(_value("after_ddl"))
    added = TableChanges([new]).added_columns(_schema_before_the_ddl())
    action = columns_added_in_events("t", added[:2], pipeline="demo")
    assert action.reload and not action.add
    assert action.stop_reason is not None
    assert "'c1' (int32), 'c10' (string)" in action.stop_reason
    assert new.position.key() in action.stop_reason
    assert "`lakesync snapshot --pipeline demo --tables t`" in action.stop_reason


def test_a_record_the_real_connector_wrote_without_its_schema_is_refused_with_the_setting_to_change() -> None:
    """With ``value.converter.schemas.enable=false`` the JSON converter writes the payload alone."""
    bare = json.dumps(RECORDED["after_ddl"]["payload"]).encode()
    with pytest.raises(EventFormatError, match=r"schemas\.enable=false") as refused:
        decode(bare)
    assert "value.converter.schemas.enable=true" in (refused.value.hint or "")
    assert "mariadb connector, version 3.5.0.Final" in refused.value.message


def test_events_with_the_same_columns_share_one_column_list() -> None:
    """Every Debezium record carries its schema; a batch's decoded events must not each keep a copy alive."""
    first, second = decode(_value("after_ddl")), decode(_value("after_ddl"))
    assert first.row_fields is not None and first.row_fields is second.row_fields
    assert decode(_value("before_ddl")).row_fields is not first.row_fields
