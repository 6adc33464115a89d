"""A checkpoint Spark's Kafka source can't go on with (lakesync's former Python reader's, or one that never read a
trimmed or new topic) is moved aside and the stream goes on at its committed offsets, with nothing read twice
and nothing skipped, through the real relay, broker and Spark stream; judged by the independent oracle
(tests/oracle.py) and by the count of changes each run applied."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.full_load.load import FullLoad
from lakesync.relay import Relay
from lakesync.stream.app import checkpoint_dir, run_stream
from lakesync.stream.kafka_reader import READER_FILE, checkpoint_reader
from tests.oracle import assert_tables_match

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _pipeline(folder: Path, database: str, prefix: str) -> Pipeline:
    (folder / "readers.yaml").write_text(yaml.safe_dump({
        "name": "readers",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": int(prefix[2:7])},
        "tables": {"include": ["*"]},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": prefix},
        "delta": {"root": str(folder / "delta")},
        "state_dir": str(folder / "state"),
        "stream": {"max_offsets_per_trigger": 7},
    }))
    return load_pipeline("readers", folder)


def _changes(mariadb: Any, database: str, first_id: int) -> int:
    """Inserts, updates and deletes, one row per statement; returns how many row changes were made."""
    statements = [f"INSERT INTO accounts VALUES ({first_id + i}, 'n{i}', {i}.25)" for i in range(6)]
    statements += [f"UPDATE accounts SET v = 'u{first_id}', amount = amount + 1 WHERE id = {i}" for i in range(1, 8)]
    statements += [f"DELETE FROM accounts WHERE id = {first_id + 5}", f"DELETE FROM accounts WHERE id = {first_id // 100 + 150}"]
    with mariadb.connect(database=database) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
    return len(statements)


def _relay(pipeline: Pipeline) -> None:
    Relay(pipeline, heartbeat_seconds=0.3, blocking=False).run(stop_when_idle_seconds=1.0)


def _loaded(stack: Any, mariadb: Any, database: str, folder: Path, monkeypatch: Any, *, tables: tuple[str, ...],
            prefix: str) -> Pipeline:
    """``tables`` created with 199 rows each and fully loaded, by a pipeline with topics named ``prefix`` plus
    a random suffix."""
    for key, value in stack.connection_env().items():
        monkeypatch.setenv(key, value)
    with mariadb.connect(database=database) as conn, conn.cursor() as cur:
        for table in tables:
            cur.execute(f"CREATE TABLE {table} (id INT NOT NULL PRIMARY KEY, v VARCHAR(20) NOT NULL, "
                        "amount DECIMAL(12,2) NULL)")
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s)", [(i, f"a{i}", i) for i in range(1, 200)])
    pipeline = _pipeline(folder, database, f"{prefix}{random.randrange(10_000, 60_000)}{uuid.uuid4().hex[:6]}")
    FullLoad(pipeline).run()
    return pipeline


def test_a_checkpoint_of_the_former_python_reader_is_carried_over_reading_nothing_twice(
        stack, mariadb, fresh_database, spark, tmp_path, monkeypatch):
    database = fresh_database
    pipeline = _loaded(stack, mariadb, database, tmp_path, monkeypatch, tables=("accounts",), prefix="kr")
    uri = {"accounts": pipeline.delta.table_uri("accounts")}
    checkpoint = checkpoint_dir(pipeline)

    applied = []
    for run in range(2):
        made = _changes(mariadb, database, 1000 * (run + 1))
        _relay(pipeline)
        if run == 1:  # what an upgrade finds: a checkpoint written before the reader was recorded (the former one)
            (checkpoint / READER_FILE).unlink()
            assert checkpoint_reader(checkpoint) == "lakesync"
        applied.append((run_stream(pipeline, once=True, spark=spark).changes, made))
        assert checkpoint_reader(checkpoint) == "spark"
        with mariadb.connect(database=database) as conn:
            assert_tables_match(conn, database, uri)

    assert [changes for changes, _ in applied] == [made for _, made in applied]  # each run: its own changes only
    kept = [p.name.split("-reader-")[0] for p in checkpoint.parent.glob("*-reader-*")]
    assert kept == [f"{checkpoint.name}.lakesync"], kept  # the old checkpoint kept whole


def test_a_trimmed_topic_new_to_the_checkpoint_starts_at_its_tables_handoff_with_sparks_reader(
        stack, broker, mariadb, fresh_database, spark, tmp_path, monkeypatch):
    """Spark's Kafka source refuses a partition new to a running checkpoint whose log no longer starts at 0;
    the stream starts a checkpoint that carries the old one's offsets instead, the new topic at its handoff."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    database = fresh_database
    pipeline = _loaded(stack, mariadb, database, tmp_path, monkeypatch, tables=("accounts", "other"),
                       prefix="kt")
    _changes(mariadb, database, 1000)
    with mariadb.connect(database=database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE other SET v = 'before its reload' WHERE id < 20")
    _relay(pipeline)
    run_stream(pipeline, once=True, spark=spark, tables=["accounts"])  # the checkpoint never reads `other`

    FullLoad(pipeline, tables=["other"], restart=True).run()  # its handoff is now after every record of its topic
    topic = pipeline.topic("other")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # the oldest records go (retention would do the same); records before the new handoff remain
    trimmed = admin.delete_records([TopicPartition(topic, 0, 5)])[TopicPartition(topic, 0, 5)].result(30)
    assert trimmed.low_watermark == 5
    made = _changes(mariadb, database, 2000)
    with mariadb.connect(database=database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE other SET v = 'after its reload' WHERE id BETWEEN 50 AND 59")
        cur.execute("DELETE FROM other WHERE id = 60")
    _relay(pipeline)
    summary = run_stream(pipeline, once=True, spark=spark)

    assert summary.tables == {"accounts": made, "other": 11}  # nothing read twice, nothing before the handoff
    kept = list(checkpoint_dir(pipeline).parent.glob("*.spark-reader-*"))
    assert len(kept) == 1, kept  # the checkpoint that never read `other`, kept whole
    with mariadb.connect(database=database) as conn:
        assert_tables_match(conn, database, {t: pipeline.delta.table_uri(t) for t in ("accounts", "other")})


def test_a_topic_the_relay_creates_while_sparks_query_starts_is_read_and_the_query_starts_again(
        stack, mariadb, fresh_database, spark, tmp_path, monkeypatch):
    """Spark's Kafka source refuses starting offsets that leave out a partition of a topic its pattern matched;
    a table's first change creates its topic, so one created between computing the offsets and the query asking
    for them is met by starting the query again (it failed CI once), and that change is not lost."""
    import lakesync.stream.app as stream_app

    database = fresh_database
    pipeline = _loaded(stack, mariadb, database, tmp_path, monkeypatch, tables=("accounts", "quiet"),
                       prefix="kc")
    made = _changes(mariadb, database, 1000)  # `quiet` has no change yet: the relay has not created its topic
    _relay(pipeline)
    computed = stream_app._handoff_offsets
    calls = []

    def quiet_changes_once_offsets_are_computed(*args, **kwargs):
        offsets = computed(*args, **kwargs)
        calls.append(offsets)
        if len(calls) == 1:
            assert offsets[pipeline.topic("quiet")] == {}  # no partition to name yet
            with mariadb.connect(database=database) as conn, conn.cursor() as cur:
                cur.execute("UPDATE quiet SET v = 'first change' WHERE id = 7")
            _relay(pipeline)  # creates the topic, before the query asks for its offsets
        return offsets

    monkeypatch.setattr(stream_app, "_handoff_offsets", quiet_changes_once_offsets_are_computed)
    summary = run_stream(pipeline, once=True, spark=spark)

    assert len(calls) == 2 and calls[1][pipeline.topic("quiet")] == {"0": 0}  # started again, naming it
    assert summary.tables == {"accounts": made, "quiet": 1}
    with mariadb.connect(database=database) as conn:
        assert_tables_match(conn, database, {t: pipeline.delta.table_uri(t) for t in ("accounts", "quiet")})
