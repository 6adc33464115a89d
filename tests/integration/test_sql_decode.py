"""``stream.decode: spark_sql`` gives the driver exactly what the Python decode gives it, for every type.

The reference is the Python path (:func:`lakesync.stream.reduce.run_records_on_executors`, itself proven equal
to the record decoder in tests/unit/test_columnar_decode.py) run on the same Spark DataFrame of Kafka records.
The records are built the relay's way (driver values through ``json_value``, ``encode``d events).
"""

from __future__ import annotations

import base64
import json
import logging

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import tests.unit.test_columnar_decode as columnar
from lakesync.core.positions import SourcePosition
from lakesync.core.table_layout import POS
from lakesync.events.envelope import H_FORMAT, H_POS, SchemaChangeEvent, encode_schema_change
from lakesync.sink.changes import last_change_per_key
from lakesync.stream.columnar_decode import DecodePlan
from lakesync.stream.reduce import ReducedBatch, ReducePlan, run_records_on_executors
from lakesync.stream.sql_decode import run_records_in_sql

pytestmark = pytest.mark.spark
TOPIC, SCHEMA_TOPIC = columnar.TOPIC, "p.db._schema"
FALLBACK = "the Python decode takes them"


def _plan(*, keyed: bool = True, **decode: dict[str, str]) -> ReducePlan:
    return ReducePlan(DecodePlan({TOPIC: "t"}, {"t": columnar.SCHEMA}, schema_topic=SCHEMA_TOPIC, **decode),
                      {"t": ["id"]} if keyed else {})


def _frame(spark, records: pa.Table):
    """The records as Spark's Kafka source gives them: each partition holds the records of one topic."""
    parts = [spark.createDataFrame(records.filter(pc.equal(records.column("topic"), topic)))
             for topic in sorted(set(records.column("topic").to_pylist()))]
    rows = spark.sparkContext.union([part.rdd.coalesce(1) for part in parts])
    return spark.createDataFrame(rows, parts[0].schema)


def _seen(batch: ReducedBatch, plan: ReducePlan) -> dict[str, object]:
    """What the driver works with, independent of the order rows arrived in: a key-merged table as the sink
    reduces it (either path may return a key once per task)."""
    tables = {}
    for name, table in batch.tables.items():
        keys = plan.keys.get(name)
        rows = last_change_per_key(table.rows, keys) if keys else table.rows
        tables[name] = (sorted(rows.to_pylist(), key=lambda row: row[POS]), table.changes, table.rows.schema)
    raw = None if batch.raw is None else {name: [e.position.key() for e in changes.events]
                                          for name, changes in batch.raw.tables.items()}
    return {"tables": tables, "raw": raw, "schema_changes": [e.ddl for e in batch.schema_changes],
            "newest": batch.newest}


def _outcome(read, frame, plan: ReducePlan) -> tuple[dict[str, object], ReducedBatch | None]:
    """:func:`_seen` of the batch a path reads (and the batch), or the error it fails with."""
    try:
        batch = read(frame, plan)
    except Exception as exc:  # compared between the two paths: the same failure, said the same way
        return {"failed": f"{type(exc).__name__}: {exc}".splitlines()[0]}, None
    return _seen(batch, plan), batch


def _assert_same_as_python(spark, records: pa.Table, plan: ReducePlan, caplog, *, in_sql: bool = True
                           ) -> ReducedBatch:
    """Both paths give the same batch; ``in_sql``: Spark SQL decoded the tables' records itself (else the
    tables took the Python path)."""
    frame = _frame(spark, records)
    python, _ = _outcome(run_records_on_executors, frame, plan)
    assert "failed" not in python, python
    with caplog.at_level(logging.INFO, logger="lakesync.stream.sql_decode"):
        seen, batch = _outcome(run_records_in_sql, frame, plan)
    assert seen == python
    assert (FALLBACK not in caplog.text) == in_sql, caplog.text
    assert batch is not None
    return batch


def test_every_type_decodes_in_spark_sql_as_the_python_decode_decodes_it(spark, caplog) -> None:
    events = columnar._mixed_events()
    got = _assert_same_as_python(spark, columnar.kafka_records(columnar._encoded(events)), _plan(keyed=False), caplog)
    assert got.tables["t"].changes == len(events)
    assert got.tables["t"].rows.num_rows == len(events)


def test_a_keyed_table_is_reduced_to_its_newest_change_per_key_with_the_count_of_changes(spark, caplog) -> None:
    events = columnar._mixed_events()
    got = _assert_same_as_python(spark, columnar.kafka_records(columnar._encoded(events)), _plan(), caplog)
    reduced = got.tables["t"]
    assert reduced.changes == len(events)
    assert reduced.rows.num_rows == len(columnar._rows())
    ops = dict(zip(reduced.rows.column("id").to_pylist(), reduced.rows.column("_lakesync_op").to_pylist(),
                   strict=True))
    assert ops[1] == "d" and ops[2] == "u" and ops[0] == "r"


@pytest.mark.parametrize("foreign", ["no_position", "debezium", "repeated_header", "other_format", "odd_position"])
def test_a_topic_with_records_other_than_the_relays_events_takes_the_python_path(spark, caplog, foreign) -> None:
    events = columnar._mixed_events()[:6]
    encoded = columnar._encoded(events)
    value, headers = encoded[4]
    if foreign == "no_position":
        headers = [h for h in headers if h[0] != H_POS]
    elif foreign == "debezium":
        value, headers = json.dumps({"schema": {"type": "struct", "fields": []}, "payload": json.loads(value)}).encode(), []
    elif foreign == "repeated_header":  # the record decoder takes the last value
        headers = [*headers, (H_POS, events[5].position.key().encode())]
    elif foreign == "other_format":
        headers = [(k, b"other" if k == H_FORMAT else v) for k, v in headers]
    else:
        headers = [(k, b"7.1000.1" if k == H_POS else v) for k, v in headers]
    encoded[4] = (value, headers)
    got = _assert_same_as_python(spark, columnar.kafka_records(encoded), _plan(keyed=False), caplog, in_sql=False)
    assert got.tables["t"].changes == 6
    assert got.not_relay_topics == {TOPIC}, "the stream decodes such a topic the Python way from then on"
    caplog.clear()
    plan = ReducePlan(_plan(keyed=False).decode, {}, python_topics=frozenset({TOPIC}))
    _assert_same_as_python(spark, columnar.kafka_records(encoded), plan, caplog, in_sql=True)  # not even tried


def test_changes_outside_a_tables_read_from_and_stop_before_positions_are_left_out(spark, caplog) -> None:
    events = columnar._mixed_events()
    plan = _plan(keyed=False, read_from={"t": events[3].position.key()}, stop_before={"t": events[9].position.key()})
    got = _assert_same_as_python(spark, columnar.kafka_records(columnar._encoded(events)), plan, caplog)
    assert [row[POS] for row in got.tables["t"].rows.to_pylist()] == sorted(e.position.key() for e in events[3:9])


@pytest.mark.parametrize("broken", ["overflow", "bad_base64", "unknown_op", "not_json", "decimal_digits",
                                    "date_with_time"])
def test_a_value_spark_sql_cannot_decode_sends_the_tables_records_the_python_way(spark, broken, caplog) -> None:
    """The Python path hands such records to the driver raw (which decodes them with the batch's new schema,
    or says what is wrong): the table's job fails in Spark SQL, and the same records take that path."""
    encoded = columnar._encoded(columnar._mixed_events()[:4])
    document = json.loads(encoded[2][0])
    if broken == "overflow":
        document["after"]["c0"] = 1000  # a tinyint column: a type change in this very batch looks like this
    elif broken == "bad_base64":
        document["after"]["c32"] = "not base64!"
    elif broken == "decimal_digits":  # decimal(10,2): Spark's cast would round it, Python refuses it
        document["after"]["c13"] = "1.235"
    elif broken == "date_with_time":  # Spark's cast would take the date, Python refuses it
        document["after"]["c20"] = "2020-01-01 10:00:00"
    elif broken == "unknown_op":
        document["op"] = "x"
    value = b"{not json" if broken == "not_json" else json.dumps(document).encode()
    encoded[2] = (value, encoded[2][1])
    frame = _frame(spark, columnar.kafka_records(encoded))
    python, _ = _outcome(run_records_on_executors, frame, _plan())
    if broken in ("unknown_op", "not_json"):  # the driver's record decoder refuses the event
        assert "EventFormatError" in str(python["failed"]), python
    else:  # the driver decodes it after the batch's schema changes (here: none, so the stream would stop)
        assert columnar._mixed_events()[2].position.key() in python["raw"]["t"], python
    with caplog.at_level(logging.INFO, logger="lakesync.stream.sql_decode"):
        assert _outcome(run_records_in_sql, frame, _plan())[0] == python
    assert FALLBACK in caplog.text
    if "failed" not in python:  # the relay's events, with a bad value: the topic is tried in Spark SQL next time
        assert not run_records_in_sql(frame, _plan()).not_relay_topics


def test_schema_records_and_the_topics_of_stopped_tables_go_the_python_way(spark, caplog) -> None:
    events = columnar._mixed_events()
    ddl = SchemaChangeEvent(db="db", table="t", kind="add_column", ddl="ALTER TABLE t ADD COLUMN x INT",
                            position=SourcePosition("binlog.000007", 5000, 0), ts_ms=1_700_000_000_000,
                            changes=[{"change": "add", "column": "x", "type": "INT"}])
    _, ddl_value, ddl_headers = encode_schema_change(ddl)
    records = pa.concat_tables([
        columnar.kafka_records(columnar._encoded(events)),
        columnar.kafka_records([(ddl_value, ddl_headers)], topic=SCHEMA_TOPIC),
        columnar.kafka_records(columnar._encoded(events[:3]), topic="p.db.stopped"),
        columnar.kafka_records([(None, [])]),
    ])
    plan = ReducePlan(DecodePlan({TOPIC: "t", "p.db.stopped": "stopped"}, {"t": columnar.SCHEMA},
                                 schema_topic=SCHEMA_TOPIC), {"t": ["id"]}, watch_topics=frozenset({"p.db.stopped"}))
    got = _assert_same_as_python(spark, records, plan, caplog)
    assert [e.ddl for e in got.schema_changes] == [ddl.ddl]
    assert got.newest == {"p.db.stopped": max(e.position.key() for e in events[:3])}
    assert got.tables["t"].changes == len(events)


def test_binary_values_decode_from_strict_base64(spark, caplog) -> None:
    row = {**columnar._rows()[0], "c32": base64.b64encode(b"\x00\x01").decode()}
    records = columnar.kafka_records(columnar._encoded([columnar._event("c", row, 1)]))
    got = _assert_same_as_python(spark, records, _plan(), caplog)
    assert got.tables["t"].rows.column("c32").to_pylist() == [b"\x00\x01"]


@pytest.mark.parametrize(("topics_read", "python_jobs", "persists"), [
    (frozenset({TOPIC}), 0, 0),  # the table's topic alone: one job, nothing to persist
    (frozenset({TOPIC, SCHEMA_TOPIC}), 1, 1),  # and the schema topic: two jobs over one persisted read
    (None, 1, 1),  # not known: every topic may have records
])
def test_the_batch_runs_only_the_jobs_its_topics_need(spark, caplog, monkeypatch, topics_read, python_jobs,
                                                      persists) -> None:
    from lakesync.stream import sql_decode

    events = columnar._mixed_events()
    frame = _frame(spark, columnar.kafka_records(columnar._encoded(events)))
    calls = {"python": 0, "persist": 0}
    python_path, persist = sql_decode.run_records_on_executors, type(frame).persist

    def counted_python(*args, **kwargs):
        calls["python"] += 1
        return python_path(*args, **kwargs)

    def counted_persist(self, *args, **kwargs):
        calls["persist"] += 1
        return persist(self, *args, **kwargs)

    plan = ReducePlan(_plan().decode, {"t": ["id"]}, topics_read=topics_read)
    monkeypatch.setattr(sql_decode, "run_records_on_executors", counted_python)
    monkeypatch.setattr(type(frame), "persist", counted_persist)
    got = run_records_in_sql(frame, plan)
    assert calls == {"python": python_jobs, "persist": persists}
    assert got.tables["t"].changes == len(events)


def test_a_failure_that_is_not_the_records_fails_the_batch_instead_of_going_the_python_way(spark, monkeypatch) -> None:
    from lakesync.stream import sql_decode

    def interrupted(*args, **kwargs):
        raise RuntimeError("py4j: java.lang.InterruptedException (the query is stopping)")

    monkeypatch.setattr(sql_decode, "_collect", interrupted)
    frame = _frame(spark, columnar.kafka_records(columnar._encoded(columnar._mixed_events()[:4])))
    with pytest.raises(RuntimeError, match="InterruptedException"):
        run_records_in_sql(frame, _plan())
