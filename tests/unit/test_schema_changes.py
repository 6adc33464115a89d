"""What a schema event from the relay asks of a streamed Delta table (pure decisions, no servers)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from lakesync.core.errors import SchemaChangeError
from lakesync.core.positions import SourcePosition
from lakesync.events.envelope import SchemaChangeEvent
from lakesync.sink.schema_evolution import sql_literal
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


def test_adding_a_column_the_table_already_has_fills_its_default_or_null_again_and_another_type_stops():
    """Delta has the column already when the DDL is replayed after its batch died before the fill, or when the
    source dropped the column (Delta kept it, with its old values) and added it again: MySQL gave every row
    the default, or NULL."""
    def added(definition: dict):
        return plan_schema_change(event("alter_table", [{"change": "add", "column": "name", **definition}]),
                                  CURRENT, pipeline="demo")

    plain = added({"type": "VARCHAR(20)"})
    assert plain.add == [] and plain.stop_reason is None and plain.fill["name"].equals(pa.scalar(None, pa.string()))
    with_default = added({"type": "VARCHAR(20)", "default": {"value": "x"}})
    assert with_default.add == [] and with_default.fill["name"].equals(pa.scalar("x"))
    other_type = added({"type": "INT"})
    assert "added again as INT" in other_type.stop_reason and other_type.fill == {}
    assert sql_literal(plain.fill["name"]) == "NULL"


def test_add_column_if_not_exists_of_a_column_delta_has_and_any_add_to_a_change_log_fill_nothing_again():
    """MariaDB's IF NOT EXISTS is a no-op where the source has the column (Delta can't tell that from a column
    dropped before); a change log keeps the values it logged."""
    if_not_exists = plan_schema_change(event("alter_table", [{"change": "add", "column": "name", "type": "VARCHAR(20)",
                                                              "default": {"value": "x"}, "if_not_exists": True}]),
                                       CURRENT, pipeline="demo")
    assert (if_not_exists.add, if_not_exists.fill, if_not_exists.stop_reason) == ([], {}, None)
    change_log = plan_schema_change(event("alter_table", [{"change": "add", "column": "name", "type": "VARCHAR(20)"}]),
                                    CURRENT, pipeline="demo", keeps_history=True)
    assert (change_log.add, change_log.fill, change_log.stop_reason) == ([], {}, None)


def test_a_longer_varchar_needs_nothing_but_a_new_type_stops_the_table():
    same = plan_schema_change(event("alter_table", [{"change": "modify", "column": "name", "type": "VARCHAR(500)"}]),
                              CURRENT, pipeline="demo")
    assert same.add == [] and same.stop_reason is None
    other = plan_schema_change(event("alter_table", [{"change": "modify", "column": "amount", "type": "VARCHAR(20)"}]),
                               CURRENT, pipeline="demo")
    assert "changed type" in other.stop_reason
    assert "lakesync snapshot --pipeline demo --tables t" in other.stop_reason


def test_a_widening_type_change_widens_in_place_only_where_the_writer_can_and_others_still_stop():
    """INT -> BIGINT and a DECIMAL with more digits are Delta type widenings: delta-spark follows them in place,
    delta-rs (``widen_in_place`` off) re-loads; a narrowing or a change to text re-loads with either."""
    wider = event("alter_table", [{"change": "modify", "column": "amount", "type": "DECIMAL(22,4)"}])
    in_place = plan_schema_change(wider, CURRENT, pipeline="demo", widen_in_place=True)
    assert in_place.stop_reason is None and in_place.widen == [pa.field("amount", pa.decimal128(22, 4))]
    reload = plan_schema_change(wider, CURRENT, pipeline="demo")
    assert reload.widen == [] and reload.reload and "changed type" in reload.stop_reason
    for narrower in ("DECIMAL(12,2)", "DECIMAL(19,4)", "VARCHAR(30)"):
        action = plan_schema_change(event("alter_table", [{"change": "modify", "column": "amount", "type": narrower}]),
                                    CURRENT, pipeline="demo", widen_in_place=True)
        assert action.widen == [] and "changed type" in action.stop_reason, narrower


def test_a_change_to_an_unsigned_type_re_loads_even_where_the_arrow_type_widens():
    """INT -> INT UNSIGNED is int32 -> int64, a widening in Delta; but under a non-strict sql_mode MySQL turns
    negative values into 0 during the ALTER without a row event, so only a re-load brings Delta back to the source."""
    table = pa.schema([("id", pa.int64()), ("n", pa.int32())])
    for kind in ("INT UNSIGNED", "BIGINT UNSIGNED", "int unsigned zerofill"):
        action = plan_schema_change(event("alter_table", [{"change": "modify", "column": "n", "type": kind}]),
                                    table, pipeline="demo", widen_in_place=True)
        assert action.widen == [] and action.reload and "changed type" in action.stop_reason, kind
    signed = plan_schema_change(event("alter_table", [{"change": "modify", "column": "n", "type": "BIGINT"}]),
                                table, pipeline="demo", widen_in_place=True)
    assert signed.widen == [pa.field("n", pa.int64())]


def test_a_widened_column_that_may_now_hold_null_is_made_nullable_too():
    action = plan_schema_change(event("alter_table", [{"change": "modify", "column": "id", "type": "DECIMAL(20,0)"}]),
                                STRICT, pipeline="demo", widen_in_place=True)
    assert action.widen == [pa.field("id", pa.decimal128(20, 0))] and action.nullable == ["id"]


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


STRICT = pa.schema([pa.field("id", pa.int64(), False), pa.field("name", pa.string(), False),
                    pa.field("amount", pa.decimal128(18, 2), True)])


@pytest.mark.parametrize(("definition", "value", "sql"), [
    ({"type": "INT", "not_null": True, "default": {"value": "7"}}, pa.scalar(7, pa.int32()), "CAST('7' AS INT)"),
    ({"type": "INT", "default": {"value": "-2"}}, pa.scalar(-2, pa.int32()), "CAST('-2' AS INT)"),
    ({"type": "VARCHAR(10)", "default": {"value": "it's"}}, pa.scalar("it's"), "'it''s'"),
    ({"type": "DECIMAL(10,2)", "default": {"value": "1.5"}}, pa.scalar(Decimal("1.50"), pa.decimal128(10, 2)),
     "CAST('1.50' AS DECIMAL(10, 2))"),
    ({"type": "INT", "not_null": True}, pa.scalar(0, pa.int32()), "CAST('0' AS INT)"),  # MySQL's implicit default
    ({"type": "VARCHAR(3)", "not_null": True}, pa.scalar(""), "''"),
    ({"type": "DECIMAL(20,10)", "not_null": True}, pa.scalar(Decimal("0E-10"), pa.decimal128(20, 10)),
     "CAST('0.0000000000' AS DECIMAL(20, 10))"),  # plain notation: DataFusion refuses 0E-10
])
def test_an_added_column_with_a_default_fills_the_rows_that_existed(definition, value, sql):
    action = plan_schema_change(event("alter_table", [{"change": "add", "column": "n", **definition}]),
                                STRICT, pipeline="demo")
    assert action.stop_reason is None and [f.name for f in action.add] == ["n"]
    assert list(action.fill) == ["n"] and action.fill["n"].equals(value)  # typed, not SQL text
    assert sql_literal(action.fill["n"]) == sql  # as the delta-rs writer renders it


def test_an_added_column_without_a_default_fills_nothing():
    action = plan_schema_change(event("alter_table", [{"change": "add", "column": "n", "type": "INT"}]),
                                STRICT, pipeline="demo")
    assert action.fill == {} and action.stop_reason is None


@pytest.mark.parametrize("definition", [
    {"type": "DATETIME", "not_null": True, "default": {"expression": "CURRENT_TIMESTAMP()"}},
    {"type": "DATE", "not_null": True},
    {"type": "INT", "default": {"value": "abc"}},
])
def test_an_added_column_whose_fill_value_is_not_exact_stops_the_table(definition):
    action = plan_schema_change(event("alter_table", [{"change": "add", "column": "n", **definition}]),
                                STRICT, pipeline="demo")
    assert "lakesync snapshot --pipeline demo --tables t" in action.stop_reason


def test_dropping_or_relaxing_a_not_null_column_makes_it_nullable_in_delta():
    dropped = plan_schema_change(event("alter_table", [{"change": "drop", "column": "name"}]), STRICT, pipeline="d")
    assert dropped.nullable == ["name"] and dropped.stop_reason is None
    relaxed = plan_schema_change(event("alter_table", [{"change": "modify", "column": "name", "type": "VARCHAR(9)"}]),
                                 STRICT, pipeline="d")
    assert relaxed.nullable == ["name"] and relaxed.stop_reason is None
    kept = plan_schema_change(event("alter_table", [{"change": "modify", "column": "name", "type": "VARCHAR(9)",
                                                     "not_null": True}]), STRICT, pipeline="d")
    assert kept.nullable == [] and kept.stop_reason is None


def test_an_empty_alter_changes_nothing():
    action = plan_schema_change(event("alter_table", []), STRICT, pipeline="demo")
    assert (action.add, action.fill, action.nullable, action.stop_reason) == ([], {}, [], None)


def test_an_unreadable_statement_stops_the_table_with_its_reason_and_the_command():
    action = plan_schema_change(event("unknown", [{"change": "unknown", "reason": "sqlglot cannot parse it"}]),
                                STRICT, pipeline="demo")
    assert "sqlglot cannot parse it" in action.stop_reason
    assert "`lakesync snapshot --pipeline demo --tables t`" in action.stop_reason


def test_a_table_replaced_by_a_swap_stops_with_the_command_and_a_dropped_one_says_it_is_gone():
    swap = plan_schema_change(event("rename_table", ddl="RENAME TABLE t TO _t_del, _t_gho TO t"), STRICT,
                              pipeline="demo", replaced=True)
    assert "online schema change" in swap.stop_reason and "--tables t" in swap.stop_reason
    gone = plan_schema_change(event("drop_table", ddl="DROP TABLE t"), STRICT, pipeline="demo")
    assert "no longer exists" in gone.stop_reason


@pytest.mark.parametrize(("name", "selected"), [("_orders_gho", False), ("_orders_ghc", False), ("_orders_del", False),
                                                ("_orders_new", False), ("_orders_old", False), ("orders_new", True),
                                                ("orders", True), ("__osc_new_orders", False),
                                                ("__osc_old_orders", False), ("lhmn_orders", False),
                                                ("lhma_2026_11_26_10_00_00_000_orders", False),
                                                ("_vt_HOLD_6ace8bcef73211ea87e9f875a4d24e90_20200915120410", False),
                                                ("lhm_notes", True)])
def test_online_schema_change_shadow_tables_are_never_selected(name, selected):
    from lakesync.core.config import Tables

    assert Tables().selects(name) is selected


@pytest.mark.parametrize(("kind", "changes", "reload"), [
    ("truncate", [], True),
    ("unknown", [{"change": "unknown", "reason": "x"}], True),
    ("alter_table", [{"change": "modify", "column": "amount", "type": "VARCHAR(20)"}], True),
    ("alter_table", [{"change": "primary_key"}], True),
    ("drop_table", [], True),   # tried: the table may be back; the load fails if not
    ("rename_table", [], True),
    ("alter_table", [{"change": "add", "column": "n", "type": "INT"}], False),
])
def test_every_stop_is_first_tried_as_a_re_load(kind, changes, reload):
    action = plan_schema_change(event(kind, changes), STRICT, pipeline="demo")
    assert bool(action.stop_reason) is reload and action.reload is reload


def test_a_stopped_table_counts_as_not_loaded_until_a_load_after_its_stop(tmp_path):
    from lakesync.stream.progress import StreamProgress, TableProgress, stopped_since_load

    StreamProgress({"t": TableProgress(stopped_reason="truncate; run it", stopped_at="00000002.000000000900.000000"),
                    "ok": TableProgress(applied_position="00000002.000000000950.000000")}).save(tmp_path)
    before, after = "00000001.000000000100.000000", "00000003.000000000100.000000"
    assert stopped_since_load(tmp_path, {"t": before, "ok": before}, ["t", "ok"]) == {"t": "truncate; run it"}
    assert stopped_since_load(tmp_path, {"t": after, "ok": before}, ["t", "ok"]) == {}
    assert stopped_since_load(tmp_path, {"t": before}, ["ok"]) == {}, "only the tables asked for"
