"""A stream over topics that Debezium's MySQL connector wrote (JSON converter with schemas, no lakesync
headers): positions come from each event's ``source`` block, values are decoded exactly, and the handoff
from lakesync's full load works end to end; a Debezium topic that starts after the load is refused."""

from __future__ import annotations

import base64
import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.core.errors import GapError
from lakesync.core.positions import SourcePosition
from lakesync.events.envelope import EventFormatError
from lakesync.full_load.load import FullLoad
from lakesync.stream.app import checkpoint_dir, run_stream
from lakesync.stream.progress import StreamProgress
from tests.oracle import assert_tables_match, read_delta

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TABLE = "CREATE TABLE ledger (id INT PRIMARY KEY, amount DECIMAL(65,30), flags BIT(10), label VARCHAR(20))"
ROWS = {1: ("-99999999999999999999999999999999999.123456789012345678901234567891", 513, "one"),
        2: ("0.000000000000000000000000000000", 0, "two"),
        3: ("12345678901234567890123456789012345.000000000000000000000000000001", 1023, None)}
_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "30", "connect.decimal.precision": "65"}, "field": "amount"},
    {"type": "bytes", "optional": True, "name": "io.debezium.data.Bits", "version": 1,
     "parameters": {"length": "10"}, "field": "flags"},
    {"type": "string", "optional": True, "field": "label"},
]


def _pipeline(folder: Path, database: str) -> Pipeline:
    server_id = random.randrange(5_000, 60_000)
    document = {
        "name": "dbz", "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"dbz{server_id}{uuid.uuid4().hex[:6]}"},
        "delta": {"root": str(folder / "delta")}, "state_dir": str(folder / "state"),
    }
    (folder / "pipelines").mkdir(exist_ok=True)
    (folder / "pipelines" / "dbz.yaml").write_text(yaml.safe_dump(document))
    return load_pipeline("dbz", folder / "pipelines")


def _debezium_row(key: int, amount: str, flags: int, label: str | None) -> dict[str, Any]:
    """A row image as Debezium's JSON converter writes it: DECIMAL as unscaled big-endian two's complement,
    BIT(n) as little-endian bytes."""
    unscaled = int(amount.replace(".", ""))
    decimal = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    return {"id": key, "amount": base64.b64encode(decimal).decode(),
            "flags": base64.b64encode(flags.to_bytes(2, "little")).decode(), "label": label}


def _debezium_event(database: str, op: str, before: dict | None, after: dict | None,
                    position: SourcePosition, row: int) -> bytes:
    value_schema = {"type": "struct", "optional": True, "name": f"dbserver1.{database}.ledger.Value",
                    "fields": _FIELDS}
    return json.dumps({
        "schema": {"type": "struct", "name": f"dbserver1.{database}.ledger.Envelope", "optional": False, "fields": [
            {**value_schema, "field": "before"}, {**value_schema, "field": "after"},
            {"type": "struct", "optional": False, "field": "source", "fields": []},
            {"type": "string", "optional": False, "field": "op"}, {"type": "int64", "optional": True, "field": "ts_ms"}]},
        "payload": {"before": before, "after": after, "op": op, "ts_ms": 1_704_110_400_555, "source": {
            "version": "2.5.4.Final", "connector": "mysql", "name": "dbserver1", "ts_ms": 1_704_110_400_000,
            "snapshot": "true" if op == "r" else "false", "db": database, "table": "ledger", "server_id": 1,
            "gtid": None, "file": position.file, "pos": position.offset, "row": row, "thread": 7, "query": None}},
    }).encode()


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value)  # no headers: Debezium writes none
    assert producer.flush(60) == 0, f"{topic}: the broker did not acknowledge every record"  # may create the topic


@pytest.fixture
def loaded(stack, monkeypatch, mariadb, fresh_database, tmp_path):
    """The ``ledger`` table fully loaded by lakesync; returns (pipeline, load position P)."""
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute(TABLE)
        cur.executemany("INSERT INTO ledger VALUES (%s, %s, %s, %s)",
                        [(key, amount, flags, label) for key, (amount, flags, label) in ROWS.items()])
    pipeline = _pipeline(tmp_path, fresh_database)
    (result,) = FullLoad(pipeline=pipeline).run()
    return pipeline, result.position


def test_stream_applies_debezium_topics_from_the_full_load_position(loaded, mariadb, broker, fresh_database, spark):
    pipeline, p = loaded
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE ledger SET amount = '-0.000000000000000000000000000001', flags = b'1' WHERE id = 1")
        cur.execute("DELETE FROM ledger WHERE id = 2")
        cur.execute("INSERT INTO ledger VALUES (4, '1.5', b'1111111111', 'four')")
    rows = {key: _debezium_row(key, *values) for key, values in ROWS.items()}
    updated = _debezium_row(1, "-0.000000000000000000000000000001", 1, "one")
    inserted = _debezium_row(4, "1.500000000000000000000000000000", 1023, "four")
    at = lambda offset: SourcePosition(p.file, p.offset + offset)  # noqa: E731 - after P, in binlog order
    key = lambda k: json.dumps({"id": k}).encode()  # noqa: E731
    records = [(key(k), _debezium_event(fresh_database, "r", None, row, p, 0)) for k, row in rows.items()]
    records += [
        (key(1), _debezium_event(fresh_database, "u", rows[1], updated, at(100), 0)),
        (key(2), _debezium_event(fresh_database, "d", rows[2], None, at(200), 0)),
        (key(2), None),  # Debezium's tombstone after a delete
        (key(4), _debezium_event(fresh_database, "c", None, inserted, at(300), 0)),
    ]
    _produce(broker.bootstrap, pipeline.topic("ledger"), records)

    run_stream(pipeline, once=True, spark=spark)

    with mariadb.connect() as conn:
        assert_tables_match(conn, fresh_database, {"ledger": pipeline.delta.table_uri("ledger")})


def test_records_without_schema_before_the_load_are_passed_over_as_the_refusals_hint_promises(
        loaded, mariadb, broker, fresh_database, spark):
    """The refusal of records without schema says: fix the converter, re-run the full load, and the stream
    starts after them. They stay in the topic (retention) before the load's position; the search for the
    stream's start passes over them instead of refusing again."""
    pipeline, p = loaded
    assert p.offset > 4
    before_load = SourcePosition(p.file, p.offset - 1)
    row = _debezium_row(1, *ROWS[1])
    bare = json.loads(_debezium_event(fresh_database, "u", row, row, before_load, 0))["payload"]
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE ledger SET label = 'after' WHERE id = 3")
    before, after = _debezium_row(3, *ROWS[3]), _debezium_row(3, ROWS[3][0], ROWS[3][1], "after")
    _produce(broker.bootstrap, pipeline.topic("ledger"), [
        (b'{"id": 1}', json.dumps(bare).encode()),
        (b'{"id": 3}', _debezium_event(fresh_database, "u", before, after, SourcePosition(p.file, p.offset + 100), 0)),
    ])

    run_stream(pipeline, once=True, spark=spark)

    with mariadb.connect() as conn:
        assert_tables_match(conn, fresh_database, {"ledger": pipeline.delta.table_uri("ledger")})


def test_debezium_topic_starting_after_the_full_load_is_refused(loaded, broker, fresh_database, spark):
    pipeline, p = loaded
    late = SourcePosition(p.file, p.offset + 500)
    row = _debezium_row(1, "1.000000000000000000000000000000", 1, "late")
    _produce(broker.bootstrap, pipeline.topic("ledger"),
             [(b'{"id": 1}', _debezium_event(fresh_database, "u", row, row, late, 0))])

    with pytest.raises(GapError, match="Debezium topics are accepted when") as refused:
        run_stream(pipeline, once=True, spark=spark)

    assert "re-run the full load" in str(refused.value.hint)
    assert not (checkpoint_dir(pipeline) / "offsets").exists(), "no Spark batch may have been planned"


def _schema_change_record(database: str, table: str, position: SourcePosition) -> bytes:
    """A record of Debezium's schema-change topic as its snapshot writes it (shape of Debezium 3.5's MariaDB
    connector): the table's CREATE TABLE at the snapshot's binlog position."""
    return json.dumps({"schema": {"type": "struct", "fields": []}, "payload": {
        "source": {"version": "3.5.0.Final", "connector": "mariadb", "name": "dbserver1", "ts_ms": 1_704_110_400_000,
                   "snapshot": "true", "db": database, "table": None, "server_id": 0, "gtid": None,
                   "file": position.file, "pos": position.offset, "row": 0, "thread": None, "query": None},
        "ts_ms": 1_704_110_400_555, "databaseName": database, "schemaName": None,
        "ddl": f"CREATE TABLE `{table}` (...)", "tableChanges": [{"type": "CREATE", "id": f'"{database}"."{table}"'}],
    }}).encode()


def test_a_table_whose_topic_starts_after_the_load_is_covered_by_its_ddl_on_debeziums_schema_change_topic(
        loaded, mariadb, broker, fresh_database, spark):
    """A table with no event before the load (empty then, or its snapshot reads expired): its CREATE TABLE on
    Debezium's schema-change topic, written at the connector's snapshot position before the load, proves
    that every change after it is in the table's topic."""
    pipeline, p = loaded
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO ledger VALUES (4, '1.5', b'1111111111', 'four')")
    inserted = _debezium_row(4, "1.500000000000000000000000000000", 1023, "four")
    _produce(broker.bootstrap, pipeline.kafka.topic_prefix,
             [(b'{"databaseName": "x"}', _schema_change_record(fresh_database, "ledger", SourcePosition(p.file, 4)))])
    _produce(broker.bootstrap, pipeline.topic("ledger"),
             [(b'{"id": 4}', _debezium_event(fresh_database, "c", None, inserted, SourcePosition(p.file, p.offset + 300),
                                             0))])

    run_stream(pipeline, once=True, spark=spark)

    with mariadb.connect() as conn:
        assert_tables_match(conn, fresh_database, {"ledger": pipeline.delta.table_uri("ledger")})


def test_a_topic_that_retention_emptied_is_not_proven_covered_by_its_ddl(loaded, broker, fresh_database, spark):
    """The CREATE TABLE on the schema-change topic proves coverage only for a topic that never lost records: once
    records were deleted from the table's topic (retention), changes after the load may be among them."""
    pipeline, p = loaded
    _produce(broker.bootstrap, pipeline.kafka.topic_prefix,
             [(b'{"databaseName": "x"}', _schema_change_record(fresh_database, "ledger", SourcePosition(p.file, 4)))])
    row = _debezium_row(1, "1.000000000000000000000000000000", 1, "gone")
    topic = pipeline.topic("ledger")
    _produce(broker.bootstrap, topic,
             [(b'{"id": 1}', _debezium_event(fresh_database, "u", row, row, SourcePosition(p.file, p.offset + 100), 0))])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_records([TopicPartition(topic, 0, -1)])[TopicPartition(topic, 0, -1)].result(30)

    with pytest.raises(GapError, match="gap between the full load and the change log"):
        run_stream(pipeline, once=True, spark=spark)

    assert not (checkpoint_dir(pipeline) / "offsets").exists(), "no Spark batch may have been planned"


def test_debezium_topic_written_without_schemas_is_refused_with_the_setting_to_change(
        loaded, broker, fresh_database, spark):
    """``value.converter.schemas.enable=false``: each value is Debezium's payload alone. The stream stops before
    planning a batch, naming the setting, instead of storing DECIMAL, BIT and dates as raw bytes and numbers."""
    pipeline, p = loaded
    records = [(json.dumps({"id": k}).encode(),
                json.dumps(json.loads(_debezium_event(fresh_database, "r", None, _debezium_row(k, *values), p, 0))
                           ["payload"]).encode())
               for k, values in ROWS.items()]
    _produce(broker.bootstrap, pipeline.topic("ledger"), records)

    with pytest.raises(EventFormatError, match=r"schemas\.enable=false") as refused:
        run_stream(pipeline, once=True, spark=spark)

    assert "value.converter.schemas.enable=true" in str(refused.value.hint)
    assert not (checkpoint_dir(pipeline) / "offsets").exists(), "no Spark batch may have been planned"


def test_debezium_topic_written_with_double_decimals_is_refused_naming_the_setting(
        loaded, broker, fresh_database, spark):
    """``decimal.handling.mode=double``: the DECIMAL(65,30) column arrives as an unnamed double, which would
    round 65 digits to 17 without a word. The batch that meets it stops the stream, naming the setting; Delta
    keeps what the full load wrote."""
    pipeline, p = loaded
    before = read_delta(pipeline.delta.table_uri("ledger"))
    lossy = [{"type": "double", "optional": True, "field": "amount"} if column["field"] == "amount" else column
             for column in _FIELDS]
    row = {**_debezium_row(1, "1.000000000000000000000000000000", 1, "one"), "amount": 1.0}
    event = json.loads(_debezium_event(fresh_database, "u", row, row, SourcePosition(p.file, p.offset + 100), 0))
    for image in ("before", "after"):
        next(f for f in event["schema"]["fields"] if f["field"] == image)["fields"] = lossy
    _produce(broker.bootstrap, pipeline.topic("ledger"),
             [(json.dumps({"id": k}).encode(), _debezium_event(fresh_database, "r", None, _debezium_row(k, *values),
                                                               p, 0)) for k, values in ROWS.items()]
             + [(b'{"id": 1}', json.dumps(event).encode())])

    with pytest.raises(EventFormatError, match=r"decimal\.handling\.mode=double") as refused:
        run_stream(pipeline, once=True, spark=spark)

    assert "column amount is DECIMAL" in refused.value.message
    assert "lakesync snapshot" in str(refused.value.hint)
    assert read_delta(pipeline.delta.table_uri("ledger")) == before, "nothing of the lossy batch is applied"


def _with_note(event: bytes) -> bytes:
    """The event as Debezium writes it once ``note VARCHAR(10) DEFAULT 'x'`` was added: the column in the schema."""
    document = json.loads(event)
    for part in document["schema"]["fields"][:2]:  # before and after: the row's columns
        part["fields"] = [*part["fields"], {"type": "string", "optional": True, "default": "x", "field": "note"}]
    return json.dumps(document).encode()


def test_a_column_added_in_debeziums_events_stops_the_table_until_the_command_reloads_it(
        loaded, mariadb, broker, fresh_database, spark, tmp_path):
    """``stream.reload_on_schema_change: false``: the change before the first event carrying the new column is
    applied, the table stops with the column and the command, and after that command it equals the source."""
    pipeline, p = loaded
    document = yaml.safe_load((tmp_path / "pipelines" / "dbz.yaml").read_text())
    document["stream"] = {"reload_on_schema_change": False}
    (tmp_path / "pipelines" / "dbz.yaml").write_text(yaml.safe_dump(document))
    pipeline = load_pipeline("dbz", tmp_path / "pipelines")
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE ledger SET label = 'before' WHERE id = 1")
        cur.execute("ALTER TABLE ledger ADD COLUMN note VARCHAR(10) DEFAULT 'x'")
        cur.execute("UPDATE ledger SET label = 'after', note = 'y' WHERE id = 2")
    rows = {key: _debezium_row(key, *values) for key, values in ROWS.items()}
    at = lambda offset: SourcePosition(p.file, p.offset + offset)  # noqa: E731 - after P, before the next load
    changed = {**rows[1], "label": "before"}
    key = lambda k: json.dumps({"id": k}).encode()  # noqa: E731
    _produce(broker.bootstrap, pipeline.topic("ledger"), [
        *((key(k), _debezium_event(fresh_database, "r", None, row, p, 0)) for k, row in rows.items()),
        (key(1), _debezium_event(fresh_database, "u", rows[1], changed, at(10), 0)),
        (key(2), _with_note(_debezium_event(fresh_database, "u", {**rows[2], "note": "x"},
                                            {**rows[2], "label": "after", "note": "y"}, at(20), 0)))])

    run_stream(pipeline, once=True, spark=spark)

    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables["ledger"]
    assert progress.stopped_reason and "'note' (string)" in progress.stopped_reason
    assert "`lakesync snapshot --pipeline dbz --tables ledger`" in progress.stopped_reason
    names, delta_rows = read_delta(pipeline.delta.table_uri("ledger"))
    assert "note" not in names
    assert {row["id"]: row["label"] for row in delta_rows} == {1: "before", 2: "two", 3: None}

    (reloaded,) = FullLoad(pipeline=pipeline, tables=["ledger"]).run()  # what the command runs
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE ledger SET label = 'later' WHERE id = 3")
    later = SourcePosition(reloaded.position.file, reloaded.position.offset + 10)
    _produce(broker.bootstrap, pipeline.topic("ledger"), [(key(3), _with_note(_debezium_event(
        fresh_database, "u", {**rows[3], "note": "x"}, {**rows[3], "label": "later", "note": "x"}, later, 0)))])
    run_stream(pipeline, once=True, spark=spark)  # its batch resumes the table from the new load

    assert not StreamProgress.load(pipeline.pipeline_state_dir).tables["ledger"].stopped_reason
    with mariadb.connect() as conn:
        assert_tables_match(conn, fresh_database, {"ledger": pipeline.delta.table_uri("ledger")})
