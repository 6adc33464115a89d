"""Lossy Debezium connector settings are recognised from the column schemas in its events, judged against the
Delta table's types: DECIMAL as double, BIGINT UNSIGNED as int64, Kafka Connect's millisecond time types."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakesync.events.debezium import EventFormatError, lossy_settings, refuse_lossy_settings

TARGET = {"id": pa.int32(), "amount": pa.decimal128(10, 2), "big": pa.decimal128(20, 0), "ratio": pa.float64(),
          "count": pa.int64(), "at": pa.timestamp("us")}


def test_precise_settings_are_not_lossy():
    fields = ({"field": "amount", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal"},
              {"field": "big", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal"},
              {"field": "ratio", "type": "double"}, {"field": "count", "type": "int64"},
              {"field": "at", "type": "int64", "name": "io.debezium.time.MicroTimestamp"})
    assert lossy_settings(fields, TARGET) == []


def test_a_decimal_column_arriving_as_double_names_decimal_handling_mode():
    (problem,) = lossy_settings(({"field": "amount", "type": "double"},), TARGET)
    assert "decimal.handling.mode=double" in problem and "precise" in problem


def test_a_bigint_unsigned_column_arriving_as_int64_names_the_unsigned_mode():
    (problem,) = lossy_settings(({"field": "big", "type": "int64"},), TARGET)
    assert "bigint.unsigned.handling.mode=long" in problem


def test_connect_millisecond_time_types_name_time_precision_mode():
    fields = ({"field": "at", "type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"},)
    (problem,) = lossy_settings(fields, TARGET)
    assert "time.precision.mode=connect" in problem


def test_a_column_the_table_does_not_have_is_judged_by_its_schema_alone():
    assert lossy_settings(({"field": "new_col", "type": "double"},), TARGET) == []


def test_refusal_lists_every_problem_and_how_to_recover():
    fields = ({"field": "amount", "type": "double"}, {"field": "big", "type": "int64"})
    with pytest.raises(EventFormatError, match=r"decimal\.handling\.mode=double.*bigint\.unsigned") as refused:
        refuse_lossy_settings("shop.orders", fields, TARGET)
    assert "shop.orders" in refused.value.message
    assert "lakesync snapshot" in str(refused.value.hint)


def test_a_wide_decimal_stored_as_text_arriving_as_double_is_lossy_too():
    """DECIMAL past 38 digits is a string column in Delta (docs/types.md); Debezium never writes text as double."""
    (problem,) = lossy_settings(({"field": "wide", "type": "double"},), {"wide": pa.string()})
    assert "decimal.handling.mode=double" in problem


def _double_decimal_event(pos: int):
    """A record the real connector wrote, its DECIMAL column ``d`` rewritten the way decimal.handling.mode=double
    writes it, at binlog offset ``pos``."""
    import copy
    import json
    from pathlib import Path

    from lakesync.events.envelope import decode

    record = copy.deepcopy(json.loads((Path(__file__).parents[1] / "fixtures" / "debezium_mariadb_added_columns.json")
                                      .read_text())["before_ddl"])
    for image in record["schema"]["fields"]:
        if image["field"] in ("before", "after"):
            image["fields"] = [{"type": "double", "optional": True, "field": "d"} if column["field"] == "d" else column
                               for column in image["fields"]]
    record["payload"]["after"]["d"] = 1.5
    record["payload"]["source"]["pos"] = pos
    return decode(json.dumps(record).encode())


def test_only_events_after_the_tables_load_are_judged():
    """Events at or before the load change nothing; a re-load after the settings were fixed moves the load past
    the lossy events, so a stream that reads them again goes on."""
    from lakesync.stream.decode import TableChanges

    event = _double_decimal_event(5_000)
    changes = TableChanges([event])
    schema = pa.schema([("d", pa.decimal128(10, 2))])
    changes.refuse_lossy_settings("t", schema, after=event.position.key())
    with pytest.raises(EventFormatError, match=r"decimal\.handling\.mode=double"):
        changes.refuse_lossy_settings("t", schema, after="")
