"""The relay against the real embedded MariaDB and broker: order, positions, schema changes, resume, guards."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, parse_pipeline
from lakesync.core.errors import BinlogPurgedError, SourceError
from lakesync.core.positions import SourcePosition
from lakesync.events.envelope import ChangeEvent, decode, decode_schema_change
from lakesync.relay import Relay, covered_range
from lakesync.source.server_checks import current_position
from tests.kafkakit import read_records

pytestmark = pytest.mark.integration

MakePipeline = Callable[..., Pipeline]


@pytest.fixture
def make_pipeline(stack, monkeypatch, tmp_path) -> MakePipeline:
    """A pipeline on the embedded stack for ``database``, with its own server id and topic prefix."""
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)

    def make(database: str, **tables: Any) -> Pipeline:
        server_id = random.randrange(30_000, 60_000)
        return parse_pipeline({
            "name": "relaytest",
            "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
            "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"rt{server_id}"},
            "delta": {"root": str(tmp_path / "delta")},
            "state_dir": str(tmp_path / "state"),
            "tables": tables,
        }, source_name="test")

    return make


def changes(bootstrap: str, topic: str) -> list[ChangeEvent]:
    return [decode(m.value(), m.headers(), key=m.key()) for m in read_records(bootstrap, topic)]


@pytest.fixture
def db(mariadb, fresh_database) -> Iterator[Any]:
    with mariadb.connect(database=fresh_database) as conn:
        yield conn


def _run(conn: Any, pipeline: Pipeline, start: SourcePosition | None, **kwargs: Any):
    return Relay(pipeline, heartbeat_seconds=0.3).run(from_position=start, stop_when_idle_seconds=1.0, **kwargs)


def test_inserts_updates_deletes_arrive_in_order_per_key_with_positions(db, broker, fresh_database, make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE accounts (id INT UNSIGNED PRIMARY KEY, owner VARCHAR(20), balance DECIMAL(12,2))")
        start = current_position(db)
        cur.execute("INSERT INTO accounts VALUES (1, 'ann', 10.00), (2, 'bob', 20.00)")
        cur.execute("UPDATE accounts SET balance = 11.50 WHERE id = 1")
        cur.execute("DELETE FROM accounts WHERE id = 2")
        cur.execute("UPDATE accounts SET id = 3 WHERE id = 1")  # a primary-key change
    pipeline = make_pipeline(fresh_database)
    stats = _run(db, pipeline, start)
    events = changes(broker.bootstrap, pipeline.topic("accounts"))

    assert [(e.op, (e.after or e.before)["id"]) for e in events] == [
        ("c", 1), ("c", 2), ("u", 1), ("d", 2), ("d", 1), ("c", 3)]
    assert stats.events == 6 and stats.start == start
    positions = [e.position for e in events]
    assert all(p > start for p in positions)
    assert positions[:4] == sorted(positions[:4]) and len(set(positions[:4])) == 4
    assert positions[4] == positions[5], "a key change is one row: its delete and create share the position"
    assert events[2].before == {"id": 1, "owner": "ann", "balance": "10.00"}
    assert events[2].after == {"id": 1, "owner": "ann", "balance": "11.50"}
    assert events[4].key == {"id": 1} and events[5].key == {"id": 3}
    assert all(e.position.gtid for e in events)


def test_add_column_mid_stream_keeps_decoding_with_the_columns_of_each_row(db, broker, fresh_database, make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))")
        start = current_position(db)
        cur.execute("INSERT INTO t VALUES (1, 'before')")
        cur.execute("ALTER TABLE t ADD COLUMN b INT NOT NULL DEFAULT 7 AFTER id")
        cur.execute("INSERT INTO t VALUES (2, 8, 'after')")
    pipeline = make_pipeline(fresh_database)
    _run(db, pipeline, start)
    events = changes(broker.bootstrap, pipeline.topic("t"))
    assert [e.after for e in events] == [{"id": 1, "a": "before"}, {"id": 2, "b": 8, "a": "after"}]

    schema_records = read_records(broker.bootstrap, pipeline.topic("_schema"))
    alters = [decode_schema_change(m.value(), m.headers()) for m in schema_records]
    assert [(s.kind, s.table, s.changes) for s in alters] == [
        ("alter_table", "t", [{"change": "add", "column": "b", "type": "INT", "not_null": True,
                               "default": {"value": "7"}}])]
    assert events[0].position < alters[0].position < events[1].position


def test_ddl_the_relay_cannot_understand_is_published_as_unknown_and_the_relay_goes_on(
        db, broker, fresh_database, make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        start = current_position(db)
        cur.execute("INSERT INTO t VALUES (1)")
        cur.execute("ALTER TABLE t ADD COLUMN (a INT, b INT)")
        cur.execute("INSERT INTO t VALUES (2, 3, 4)")
    pipeline = make_pipeline(fresh_database)
    _run(db, pipeline, start)
    assert [e.after["id"] for e in changes(broker.bootstrap, pipeline.topic("t"))] == [1, 2]
    (unknown,) = [decode_schema_change(m.value(), m.headers())
                  for m in read_records(broker.bootstrap, pipeline.topic("_schema"))]
    assert (unknown.kind, unknown.table) == ("unknown", "t")
    assert unknown.changes[0]["change"] == "unknown" and unknown.changes[0]["reason"]


def test_unselected_tables_are_not_published(db, broker, fresh_database, make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE kept (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE skipped (id INT PRIMARY KEY)")
        start = current_position(db)
        cur.execute("INSERT INTO skipped VALUES (1)")
        cur.execute("ALTER TABLE skipped ADD COLUMN (a INT, b INT)")  # unreadable, but not ours
        cur.execute("INSERT INTO kept VALUES (1)")
    pipeline = make_pipeline(fresh_database, include=["kept"])
    stats = _run(db, pipeline, start)
    assert stats.tables == {"kept": 1}


def test_table_without_a_key_uses_the_row_as_key(db, broker, fresh_database, make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE log (msg VARCHAR(20), n INT)")
        start = current_position(db)
        cur.execute("INSERT INTO log VALUES ('hello', 1)")
    pipeline = make_pipeline(fresh_database)
    _run(db, pipeline, start)
    (record,) = read_records(broker.bootstrap, pipeline.topic("log"))
    assert json.loads(record.key()) == {"msg": "hello", "n": 1}
    assert dict(record.headers())["lakesync.key"] == b"row"


def test_restart_resumes_from_stored_progress_and_covered_range_spans_both_runs(db, broker, fresh_database,
                                                                                make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        start = current_position(db)
        for i in range(1, 6):
            cur.execute(f"INSERT INTO t VALUES ({i})")
    pipeline = make_pipeline(fresh_database)
    first = _run(db, pipeline, start, max_events=2)
    assert first.events == 2
    with db.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (6)")
    second = _run(db, pipeline, None)
    assert second.start_origin.startswith("stored progress")
    assert second.start == first.position
    ids = [e.after["id"] for e in changes(broker.bootstrap, pipeline.topic("t"))]
    assert sorted(set(ids)) == [1, 2, 3, 4, 5, 6]
    covered = covered_range(pipeline)
    assert covered is not None
    assert covered[0] == start.key() and covered[1] == second.position.key()


def test_first_start_uses_the_full_load_position(db, broker, fresh_database, make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1)")
        loaded_at = current_position(db)
        cur.execute("INSERT INTO t VALUES (2)")
    pipeline = make_pipeline(fresh_database)
    pipeline.pipeline_state_dir.mkdir(parents=True)
    (pipeline.pipeline_state_dir / "full_load.json").write_text(json.dumps(
        {"position": {"file": loaded_at.file, "offset": loaded_at.offset, "gtid": loaded_at.gtid}, "tables": {}}))
    stats = _run(db, pipeline, None)
    assert stats.start == loaded_at and stats.start_origin.startswith("the full load")
    assert [e.after["id"] for e in changes(broker.bootstrap, pipeline.topic("t"))] == [2]


def test_a_purged_binlog_position_is_refused_with_what_to_do(db, fresh_database, make_pipeline):
    pipeline = make_pipeline(fresh_database)
    gone = SourcePosition("binlog.000000", 4)  # older than any file the server still has
    with pytest.raises(BinlogPurgedError, match="re-run the full load"):
        _run(db, pipeline, gone)


def test_lag_reports_seconds_and_bytes_behind_the_source(db, fresh_database, make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        start = current_position(db)
        cur.execute("INSERT INTO t VALUES (1)")
    relay = Relay(make_pipeline(fresh_database), heartbeat_seconds=0.3)
    relay.run(from_position=start, stop_when_idle_seconds=1.0)
    with db.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2)")
    lag = relay.lag()
    assert lag.bytes > 0, "the insert after the relay stopped is not read yet"
    assert lag.seconds >= 0


def test_a_partial_row_image_written_by_one_session_is_refused(db, fresh_database, make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)")
        start = current_position(db)
        cur.execute("INSERT INTO t VALUES (1, 1, 1)")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE t SET a = 2 WHERE id = 1")
        cur.execute("SET SESSION binlog_row_image = 'FULL'")
    with pytest.raises(SourceError, match="partial row image"):
        _run(db, make_pipeline(fresh_database), start)


def test_relay_throttles_while_the_stream_lags_past_the_bound_and_loses_nothing_when_released(
        db, broker, fresh_database, make_pipeline, tmp_path):
    from lakesync.core.connections import kafka_client_config
    from lakesync.kafka.offsets import end_offsets, offset_consumer
    from lakesync.relay.backpressure import load_state
    from lakesync.stream.app import checkpoint_dir
    from tests.unit.test_backpressure import write_batch

    bound = 5
    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        start = current_position(db)
        for i in range(1, 31):
            cur.execute(f"INSERT INTO t VALUES ({i})")  # 30 transactions
    base = make_pipeline(fresh_database)
    pipeline = base.model_copy(update={"stream": base.stream.model_copy(
        update={"backpressure_max_lag": bound, "backpressure_check_seconds": 1e-6})})
    topic, checkpoint = pipeline.topic("t"), checkpoint_dir(pipeline)
    write_batch(checkpoint, 0, {topic: {"0": 0}})  # a stream that has applied nothing yet
    relay = Relay(pipeline, heartbeat_seconds=0.3)
    result: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: result.update(stats=relay.run(from_position=start,
                                                                           stop_when_idle_seconds=2.0)))
    runner.start()
    consumer = offset_consumer(kafka_client_config(pipeline))

    def log_end() -> int:
        return end_offsets(consumer, [(topic, 0)])[(topic, 0)]

    def throttling() -> bool:
        return bool((load_state(pipeline.pipeline_state_dir) or {}).get("throttling"))

    try:
        deadline = time.monotonic() + 60
        while not throttling():
            assert runner.is_alive() and time.monotonic() < deadline, "the relay never throttled"
            time.sleep(0.1)
        # throttled: the backlog stops growing just past the bound, with most of the 30 source transactions
        # still unread. The end is read every second until it holds still: the commit marker of the transaction
        # the relay committed before pausing may land just after we first look.
        throttled_end, settled = -1, log_end()
        while settled != throttled_end:
            assert time.monotonic() < deadline, f"the log end kept growing while throttled: {settled}"
            throttled_end = settled
            time.sleep(1.0)
            settled = log_end()
        assert throttling(), "the relay let go while the stream had applied nothing"
        # Offsets count each Kafka transaction's commit marker too: one record and one marker per source
        # transaction here. The relay measures the lag on the last stable offset right after committing, when
        # the marker of that last transaction may not be written yet, so it can see 2 offsets fewer than there
        # are: it stops at the first lag over the bound, which here (bound 5) is at offset 6 or 8.
        assert bound < throttled_end <= bound + 3, throttled_end
        assert len(changes(broker.bootstrap, topic)) <= bound
        # The stream catches up a step of `bound` offsets at a time, and only while the relay is held back: so
        # the relay, released, publishes past the bound again and pauses again, however slow either side is.
        applied, batch, catch_up = 0, 1, time.monotonic() + 180
        while runner.is_alive():
            assert time.monotonic() < catch_up, f"the relay did not finish in 180 s (stream at offset {applied})"
            if throttling():
                applied = min(applied + bound, log_end())
                write_batch(checkpoint, batch, {topic: {"0": applied}})
                batch += 1
            time.sleep(0.2)
    finally:
        relay.stop()
        runner.join(30)
        consumer.close()
    assert relay.backpressure.pauses >= 2
    assert load_state(pipeline.pipeline_state_dir)["throttling"] is False
    ids = [e.after["id"] for e in changes(broker.bootstrap, topic)]
    assert ids == list(range(1, 31))  # all of them, in order, none twice


def test_a_source_transaction_longer_than_the_kafka_transaction_timeout_is_committed_in_parts(
        db, broker, fresh_database, make_pipeline, caplog):
    """The broker aborts a Kafka transaction open longer than transaction.timeout.ms (the embedded broker looks
    every second); a relay that only committed at source transaction ends would abort and retry forever."""
    rows = 150_000
    with db.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v INT)")
        start = current_position(db)
        cur.execute(f"INSERT INTO big SELECT seq, seq FROM seq_1_to_{rows}")  # one source transaction
    base = make_pipeline(fresh_database)
    pipeline = base.model_copy(update={"kafka": base.kafka.model_copy(
        update={"settings": {"transaction.timeout.ms": "2000"}})})
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="lakesync.relay.worker"):
        stats = _run(db, pipeline, start)
    assert stats.events == rows
    assert time.monotonic() - started > 2.0, "the transaction must outlast transaction.timeout.ms for this test"
    assert any("committing it in parts" in r.getMessage() for r in caplog.records)
    positions = [dict(r.headers())["lakesync.pos"] for r in read_records(broker.bootstrap, pipeline.topic("big"))]
    assert len(positions) == rows and len(set(positions)) == rows, "every change once, none twice"


def test_a_second_relay_for_the_same_pipeline_takes_over_and_the_first_stops_saying_so(
        db, broker, fresh_database, make_pipeline):
    from lakesync.core.errors import RelayFencedError

    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        start = current_position(db)
    pipeline = make_pipeline(fresh_database)
    outcomes: dict[str, Any] = {}

    def run(name: str, relay: Relay, **kwargs: Any) -> None:
        try:
            outcomes[name] = relay.run(**kwargs)
        except Exception as exc:  # the first relay's fate is the point of the test
            outcomes[name] = exc

    first, second = Relay(pipeline, heartbeat_seconds=0.3), Relay(pipeline, heartbeat_seconds=0.3)
    writer_stop = threading.Event()

    def write() -> None:
        i = 0
        with db.cursor() as cur:
            while not writer_stop.wait(0.01):
                i += 1
                cur.execute("INSERT INTO t VALUES (%s, %s)", (i, i))

    threads = [threading.Thread(target=write)]
    threads.append(threading.Thread(target=run, args=("first", first), kwargs={"from_position": start}))
    for thread in threads:
        thread.start()
    try:
        # the second relay must start while the first is publishing: after the first has committed changes (so
        # the second resumes from its progress, not from the server's current position), then a short overlap
        deadline = time.monotonic() + 120
        while (covered := covered_range(pipeline)) is None or covered[1] <= start.key():
            assert threads[1].is_alive() and time.monotonic() < deadline, \
                f"the first relay stored no progress past its start in 120 s: {outcomes}"
            time.sleep(0.2)
        time.sleep(1.0)
        threads.append(threading.Thread(target=run, args=("second", second),
                                        kwargs={"stop_when_idle_seconds": 3.0}))
        threads[-1].start()
        threads[1].join(120)
    finally:
        writer_stop.set()
        first.stop()  # a no-op once it is fenced; ends it if the test failed before
        for thread in threads:
            thread.join(120)
    assert isinstance(outcomes["first"], RelayFencedError), outcomes
    assert "another relay took over" in outcomes["first"].message
    assert not isinstance(outcomes.get("second"), Exception), outcomes
    with db.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM t")
        rows = cur.fetchone()[0]
    positions = [dict(r.headers())["lakesync.pos"] for r in read_records(broker.bootstrap, pipeline.topic("t"))]
    assert len(positions) == rows == len(set(positions)), "every insert once, none twice, none lost"


def test_with_transactions_off_the_relay_publishes_every_change_and_its_progress(db, broker, fresh_database,
                                                                                make_pipeline):
    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        start = current_position(db)
        cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(1, 101)])
        end = current_position(db)
    base = make_pipeline(fresh_database)
    pipeline = base.model_copy(update={"kafka": base.kafka.model_copy(update={"transactions": False})})
    relay = Relay(pipeline, heartbeat_seconds=0.3)
    assert relay.transactional_id is None
    stats = relay.run(from_position=start, stop_when_idle_seconds=1.0)
    assert stats.events == 100
    assert sorted(e.after["id"] for e in changes(broker.bootstrap, pipeline.topic("t"))) == list(range(1, 101))
    assert covered_range(pipeline) == (start.key(), end.key())


def test_table_topics_get_the_pipelines_retention_and_follow_a_changed_setting(db, broker, fresh_database,
                                                                              make_pipeline):
    from confluent_kafka.admin import AdminClient, ConfigResource

    def retention_ms(topic: str) -> str:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        return admin.describe_configs([resource])[resource].result(10)["retention.ms"].value

    with db.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        start = current_position(db)
        cur.execute("INSERT INTO t VALUES (1)")
    pipeline = make_pipeline(fresh_database)
    _run(db, pipeline, start)
    assert retention_ms(pipeline.topic("t")) == str(7 * 24 * 3_600_000)  # the documented default
    shorter = pipeline.model_copy(update={"kafka": pipeline.kafka.model_copy(update={"retention_hours": 2})})
    with db.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2)")
    _run(db, shorter, None)
    assert retention_ms(pipeline.topic("t")) == str(2 * 3_600_000)
