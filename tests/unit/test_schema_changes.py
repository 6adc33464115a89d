"""What a schema event from the relay asks of a streamed Delta table (pure decisions, no servers)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakesync.core.errors import SchemaChangeError
from lakesync.core.positions import SourcePosition
from lakesync.events.envelope import SchemaChangeEvent
from lakesync.stream.schema_changes import column_spec_from_ddl, plan_schema_change

CURRENT = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(18, 2))])


def event(kind: str, changes: list[dict] | None = None, ddl: str = "ALTER TABLE t ...") -> SchemaChangeEvent:
    return SchemaChangeEvent(db="bank", table="t", kind=kind, ddl=ddl,
                             position=SourcePosition("binlog.000002", 900), ts_ms=0, changes=changes or [])


def test_add_column_becomes_a_nullable_field_of_the_mapped_type():
    action = plan_schema_change(event("alter_table", [{"change": "add", "column": "fee", "type": "DECIMAL(10, 2)"},
                                                      {"change": "add", "column": "flag", "type": "BOOLEAN"}]),
                                CURRENT, pipeline="demo")
    assert action.stop_reason is None
    assert [(f.name, f.type, f.nullable) for f in action.add] == [
        ("fee", pa.decimal128(10, 2), True), ("flag", pa.int8(), True)]


def test_adding_a_column_the_table_already_has_changes_nothing():
    action = plan_schema_change(event("alter_table", [{"change": "add", "column": "name", "type": "VARCHAR(20)"}]),
                                CURRENT, pipeline="demo")
    assert action.add == [] and action.stop_reason is None


def test_a_longer_varchar_needs_nothing_but_a_new_type_stops_the_table():
    same = plan_schema_change(event("alter_table", [{"change": "modify", "column": "name", "type": "VARCHAR(500)"}]),
                              CURRENT, pipeline="demo")
    assert same.add == [] and same.stop_reason is None
    other = plan_schema_change(event("alter_table", [{"change": "modify", "column": "amount", "type": "VARCHAR(20)"}]),
                               CURRENT, pipeline="demo")
    assert "changed type" in other.stop_reason
    assert "lakesync snapshot --pipeline demo --tables t" in other.stop_reason


@pytest.mark.parametrize("kind", ["truncate", "drop_table", "rename_table"])
def test_table_level_ddl_stops_the_table_with_the_re_snapshot_command(kind):
    action = plan_schema_change(event(kind, ddl=f"{kind.upper()} t"), CURRENT, pipeline="bankday")
    assert action.stop_reason.startswith(kind.replace("_", " "))
    assert "lakesync snapshot --pipeline bankday --tables t" in action.stop_reason


def test_a_renamed_column_stops_the_table():
    action = plan_schema_change(event("alter_table", [{"change": "rename", "column": "name", "new_column": "nm"}]),
                                CURRENT, pipeline="demo")
    assert "renamed" in action.stop_reason


def test_an_unreadable_column_type_is_a_schema_change_error():
    with pytest.raises(SchemaChangeError, match="cannot read the column type"):
        column_spec_from_ddl("x", "")
