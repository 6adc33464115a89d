"""The stream end to end on real parts: MariaDB -> full load -> relay -> broker -> Spark -> Delta MERGE.

What issue 5 asks the stream to prove: Delta equals the source after a concurrent load; the handoff may
start before the full load's position P (nothing changes) but never after it (refused, nothing written);
a batch replayed after a crash between the Delta commit and Spark's checkpoint is not applied twice; a
replayed older insert cannot bring a deleted row back.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from deltalake import DeltaTable
from lakesync_devkit.demo.database import create_demo_database, seed_demo_data
from lakesync_devkit.demo.load import DemoWorkload, LoadReport
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.cli.main import main as cli_main
from lakesync.core.config import Pipeline, load_pipeline
from lakesync.core.errors import GapError
from lakesync.core.positions import SourcePosition, file_stem
from lakesync.full_load.load import FullLoad
from lakesync.full_load.state import LoadState
from lakesync.relay import Relay, covered_range
from lakesync.source.server_checks import current_position
from lakesync.stream import app as stream_app
from lakesync.stream import sql_decode
from lakesync.stream.app import checkpoint_dir, run_stream
from lakesync.stream.progress import StreamProgress
from lakesync.validation.validate import validate_pipeline
from tests.deltakit import delta_rows
from tests.kafkakit import read_records
from tests.oracle import assert_tables_match, compare_table

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def write_pipeline(folder: Path, database: str, **overrides: Any) -> Pipeline:
    """A pipeline YAML in ``folder`` for ``database``, with its own server id, topics, Delta root and state."""
    server_id = random.randrange(5_000, 60_000)
    document = {
        "name": "streamed",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"sa{server_id}{uuid.uuid4().hex[:6]}"},
        "delta": {"root": str(folder / "delta")},
        "state_dir": str(folder / "state"),
        **overrides,
    }
    pipelines = folder / "pipelines"
    pipelines.mkdir(exist_ok=True)
    (pipelines / "streamed.yaml").write_text(yaml.safe_dump(document))
    return load_pipeline("streamed", pipelines)


@pytest.fixture
def env(stack, monkeypatch):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    return stack


def relay_until_idle(pipeline: Pipeline, **kwargs: Any):
    return Relay(pipeline, heartbeat_seconds=0.3).run(stop_when_idle_seconds=1.0, **kwargs)


def assert_equal(mariadb, pipeline: Pipeline, table: str, key: list[str]) -> None:
    """The oracle's verdict (tests/oracle.py): Delta holds exactly the source table, keyed by ``key``."""
    with mariadb.connect() as conn:
        comparison = compare_table(conn, pipeline.source.database, table, pipeline.delta.table_uri(table))
    assert comparison.key == key and comparison.identical, comparison.describe()


def delta_history(pipeline: Pipeline, table: str) -> list[dict[str, Any]]:
    return DeltaTable(pipeline.delta.table_uri(table)).history()


# -- a concurrent load ----------------------------------------------------------------------------------------
class Background(threading.Thread):
    """Runs ``work(stop_event)`` in a thread and re-raises its exception on :meth:`finish`."""

    def __init__(self, name: str, work) -> None:
        super().__init__(name=name, daemon=True)
        self.work, self.stopping, self.error = work, threading.Event(), None

    def run(self) -> None:
        try:
            self.work(self.stopping)
        except BaseException as exc:  # re-raised in the test's thread
            self.error = exc

    def finish(self, timeout: float = 30) -> None:
        self.stopping.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error:
            raise self.error


def wait_for_relay(pipeline: Pipeline, target_key: str, relay: Background, timeout: float = 180) -> None:
    """Until the relay's coverage reaches ``target_key`` (generous: under a concurrent load on a loaded CI
    machine the relay publishes slowly); fails at once if the relay died."""
    deadline = time.monotonic() + timeout
    while (covered := covered_range(pipeline)) is None or covered[1] < target_key:
        assert relay.is_alive(), f"the relay died: {relay.error!r}"
        assert time.monotonic() < deadline, f"the relay did not reach {target_key} (covers {covered})"
        time.sleep(0.3)


#: MySQL's literal for the text ``it's a \ note``: a doubled quote and an escaped backslash
NOTE_DEFAULT = "'it''s a \\\\ note'"


@pytest.mark.parametrize(("decode", "writer"), [("python", "delta_rs"), ("spark_sql", "delta_rs"),
                                               ("spark_sql", "delta_spark")])
def test_delta_equals_source_after_streaming_under_concurrent_inserts_updates_and_deletes(
        decode, writer, env, mariadb, fresh_database, tmp_path, spark, monkeypatch, caplog):
    """Both decodes (``stream.decode``): the Python workers' and Spark SQL's in the JVM (which must have decoded
    the tables' events itself, never handing them to the Python decode); and both writers (``delta.writer``):
    with delta-spark the tables' batches are delta-spark MERGEs and appends, with deletion vectors, and so are
    the ADD COLUMN and the fill of its default (a text with a quote and a backslash) that a DDL mid-load asks."""
    decoded_in_sql: list[str] = []
    table_changes = sql_decode.table_changes
    monkeypatch.setattr(sql_decode, "table_changes", lambda records, schema, **kwargs: (
        decoded_in_sql.append(schema.names[0]), table_changes(records, schema, **kwargs))[1])
    caplog.set_level(logging.INFO, logger=sql_decode.__name__)
    with mariadb.connect() as conn:
        create_demo_database(conn, fresh_database)
        seed_demo_data(conn, fresh_database, customers=50, transactions=500)
    pipeline = write_pipeline(tmp_path, fresh_database, stream={"decode": decode},
                              delta={"root": str(tmp_path / "delta"), "writer": writer},
                              tables={"overrides": {"audit_log": {"semantics": "append_log"}}})
    FullLoad(pipeline=pipeline).run()

    report = LoadReport()

    def load(stopping: threading.Event) -> None:
        with mariadb.connect(autocommit=False) as conn:
            workload = DemoWorkload(conn, fresh_database, seed=11)
            workload.max_customer -= 1  # the last customer keeps its loaded row: the DDL's fill always has one
            while not stopping.is_set():
                workload.step(report)
                time.sleep(0.01)

    relay_instance = Relay(pipeline, heartbeat_seconds=0.3)
    relay = Background("relay", lambda stopping: relay_instance.run())
    loader = Background("load", load)
    relay.start()
    loader.start()
    try:
        wait_for_relay(pipeline, "", relay)  # the stream refuses to start before the relay has published
        applied_during = [run_stream(pipeline, once=True, spark=spark).changes]
        with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:  # a DDL under the load
            cur.execute(f"ALTER TABLE customers ADD COLUMN note VARCHAR(40) NOT NULL DEFAULT {NOTE_DEFAULT}")
        applied_during.append(run_stream(pipeline, once=True, spark=spark).changes)
        loader.finish()
        with mariadb.connect() as conn:
            wait_for_relay(pipeline, current_position(conn).key(), relay)
    finally:
        relay_instance.stop()
        relay.finish()
    applied_after = run_stream(pipeline, once=True, spark=spark).changes

    for operation in ("insert", "update", "delete"):
        assert report.operations[operation] > 0, f"the load should include {operation}s: {report.summary()}"
    assert applied_during[1] > 0 and applied_after > 0, "the stream should apply changes during and after the load"
    keyed = ("customers", "accounts", "transactions", "daily_balances")
    with mariadb.connect() as conn:  # the verdict is the oracle's; lakesync's validate must then agree
        assert_tables_match(conn, fresh_database, {table: pipeline.delta.table_uri(table) for table in keyed})
    validation = validate_pipeline(pipeline, store=False, settle_timeout_s=5)
    for table in validation.tables:
        assert table.matches, table.describe()
    compared = {t.table for t in validation.tables if t.comparable}
    assert compared == {"customers", "accounts", "transactions", "daily_balances"}
    assert bool(decoded_in_sql) == (decode == "spark_sql")
    assert "the Python decode takes them" not in caplog.text
    for table in (*keyed, "audit_log"):
        log_dir = Path(pipeline.delta.table_uri(table), "_delta_log")
        infos = [json.loads(line)["commitInfo"] for path in sorted(log_dir.glob("*.json"))
                 for line in path.read_text().splitlines() if '"commitInfo"' in line]
        by_spark = [i for i in infos if "Delta-Lake" in i.get("engineInfo", "") and i["operation"] in ("MERGE", "WRITE")]
        assert bool(by_spark) == (writer == "delta_spark"), (table, [i["operation"] for i in infos])
        if table == "customers":  # the DDL was followed in place (a re-load would also end equal): one load
            operations = [i["operation"] for i in infos]  # (a WRITE or CREATE), the added column, the fill
            assert len([o for o in operations if o == "WRITE" or o.startswith("CREATE")]) == 1, operations
            assert "UPDATE" in operations and any(o.startswith("ADD COLUMN") for o in operations), operations
        if writer == "delta_spark":  # the load and every batch: no commit of delta-rs's
            assert all("Delta-Lake" in i.get("engineInfo", "") for i in infos), (table, infos)


# -- the handoff ------------------------------------------------------------------------------------------------
ITEMS_SQL = "CREATE TABLE items (id INT UNSIGNED PRIMARY KEY, label VARCHAR(40) NOT NULL, amount DECIMAL(10,2))"


@pytest.fixture
def items(mariadb, fresh_database):
    """A connection to ``fresh_database`` holding ``items`` with rows 1..20."""
    with mariadb.connect(database=fresh_database) as conn:
        with conn.cursor() as cur:
            cur.execute(ITEMS_SQL)
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, f"item {i}", f"{i}.50") for i in range(1, 21)])
        yield conn


def execute(conn, *statements: str) -> None:
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def test_stream_starting_before_the_full_load_position_changes_nothing(env, mariadb, items, fresh_database, tmp_path,
                                                                       spark, monkeypatch):
    """The eight changes before P are read and left out in the decode (changes before a table's handoff:
    docs/stream.md); the sink's snapshot floor would drop them too."""
    before_p = current_position(items)
    execute(items,
            "UPDATE items SET label = 'changed before P' WHERE id = 1",
            "DELETE FROM items WHERE id = 2",
            "INSERT INTO items VALUES (21, 'inserted and deleted before P', 1)",
            "DELETE FROM items WHERE id = 21",
            "UPDATE items SET amount = amount + 1 WHERE id BETWEEN 3 AND 6")
    pipeline = write_pipeline(tmp_path, fresh_database)
    FullLoad(pipeline=pipeline).run()
    snapshot = delta_rows(pipeline.delta.table_uri("items"))
    relay_until_idle(pipeline, from_position=before_p)
    assert covered_range(pipeline)[0] == before_p.key()

    # Start the stream at the first offset of each topic, so it reads every change since before_p, not
    # only those from P on (where the handoff would start it).
    handoff_offsets = stream_app.starting_offsets
    monkeypatch.setattr(stream_app, "starting_offsets", lambda consumer, keys, pipeline_name: {
        topic: {partition: 0 for partition in offsets}
        for topic, offsets in handoff_offsets(consumer, keys, pipeline_name).items()})
    summary = run_stream(pipeline, once=True, spark=spark)

    assert summary.changes == 0
    assert delta_rows(pipeline.delta.table_uri("items")) == snapshot
    assert_equal(mariadb, pipeline, "items", ["id"])

    execute(items, "UPDATE items SET label = 'changed after P' WHERE id = 1", "DELETE FROM items WHERE id = 3")
    relay_until_idle(pipeline)
    run_stream(pipeline, once=True, spark=spark)
    assert_equal(mariadb, pipeline, "items", ["id"])


def test_stream_starting_after_the_full_load_position_is_refused_and_writes_nothing(env, items, fresh_database,
                                                                                  tmp_path, spark):
    pipeline = write_pipeline(tmp_path, fresh_database)
    FullLoad(pipeline=pipeline).run()
    execute(items, "UPDATE items SET label = 'lost if the stream started later' WHERE id = 1")
    after_p = current_position(items)
    execute(items, "UPDATE items SET label = 'published' WHERE id = 2")
    relay_until_idle(pipeline, from_position=after_p)
    history = delta_history(pipeline, "items")
    rows = delta_rows(pipeline.delta.table_uri("items"))

    with pytest.raises(GapError, match="gap between the full load and the change log") as refused:
        run_stream(pipeline, once=True, spark=spark)

    assert "re-run the full load" in str(refused.value.hint)
    assert delta_history(pipeline, "items") == history
    assert delta_rows(pipeline.delta.table_uri("items")) == rows
    assert not (checkpoint_dir(pipeline) / "offsets").exists(), "no Spark batch may have been planned"


def test_batch_replayed_after_a_crash_between_delta_commit_and_checkpoint_is_not_applied_twice(
        env, mariadb, items, fresh_database, tmp_path, spark):
    pipeline = write_pipeline(tmp_path, fresh_database)
    FullLoad(pipeline=pipeline).run()
    execute(items,
            "UPDATE items SET amount = amount + 10 WHERE id <= 5",
            "INSERT INTO items VALUES (30, 'new', 3.00)",
            "DELETE FROM items WHERE id = 20")
    relay_until_idle(pipeline)
    first = run_stream(pipeline, once=True, spark=spark)
    assert first.changes == 7
    # The crash: Spark's foreachBatch committed to Delta but the checkpoint's commit entry was never written.
    commits = checkpoint_dir(pipeline) / "commits"
    last = max(int(path.name) for path in commits.iterdir() if path.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    version = DeltaTable(pipeline.delta.table_uri("items")).version()
    rows = delta_rows(pipeline.delta.table_uri("items"))

    run_stream(pipeline, once=True, spark=spark)

    assert (commits / str(last)).exists(), "Spark should have re-run the batch whose commit was lost"
    assert DeltaTable(pipeline.delta.table_uri("items")).version() == version, "the replay must commit nothing"
    assert delta_rows(pipeline.delta.table_uri("items")) == rows
    assert_equal(mariadb, pipeline, "items", ["id"])
    assert StreamProgress.load(pipeline.pipeline_state_dir).tables["items"].rows_total == 7, \
        "a skipped replay is not counted as applied"


def test_deleted_row_stays_deleted_when_an_older_insert_is_replayed_through_kafka(
        env, mariadb, broker, items, fresh_database, tmp_path, spark):
    pipeline = write_pipeline(tmp_path, fresh_database)
    FullLoad(pipeline=pipeline).run()
    execute(items, "INSERT INTO items VALUES (40, 'short-lived', 4.00)")
    relay_until_idle(pipeline)
    run_stream(pipeline, once=True, spark=spark)
    assert 40 in {row["id"] for row in delta_rows(pipeline.delta.table_uri("items"))}
    execute(items, "DELETE FROM items WHERE id = 40")
    relay_until_idle(pipeline)
    run_stream(pipeline, once=True, spark=spark)

    topic = pipeline.topic("items")
    insert = next(m for m in read_records(broker.bootstrap, topic) if dict(m.headers())["lakesync.op"] == b"c")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, key=insert.key(), value=insert.value(), headers=insert.headers())
    assert producer.flush(10) == 0
    replayed = run_stream(pipeline, once=True, spark=spark)

    assert replayed.changes == 1, "the stream should have read the replayed insert"
    assert 40 not in {row["id"] for row in delta_rows(pipeline.delta.table_uri("items"))}
    assert_equal(mariadb, pipeline, "items", ["id"])


def test_changes_deleted_from_kafka_are_refused_then_replayed_from_the_binlog_by_recover_without_a_reload(
        env, mariadb, broker, items, fresh_database, tmp_path, spark, capsys):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    pipeline = write_pipeline(tmp_path, fresh_database)
    FullLoad(pipeline=pipeline).run()
    execute(items, "INSERT INTO items VALUES (50, 'first', 1.00)")
    relay_until_idle(pipeline)
    run_stream(pipeline, once=True, spark=spark)
    execute(items, "INSERT INTO items VALUES (51, 'never streamed', 2.00)", "UPDATE items SET amount = 3 WHERE id = 50")
    relay_until_idle(pipeline)
    topic = pipeline.topic("items")
    end = len(read_records(broker.bootstrap, topic, isolation="read_uncommitted")) + 10  # past every marker too
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    deleted_to = admin.delete_records([TopicPartition(topic, 0, -1)])[TopicPartition(topic, 0, -1)].result(30)
    assert 0 < deleted_to.low_watermark <= end
    version = DeltaTable(pipeline.delta.table_uri("items")).version()

    with pytest.raises(GapError) as refused:
        run_stream(pipeline, once=True, spark=spark)
    message = str(refused.value)
    assert "were deleted from Kafka" in message and f"items ({topic}/0 offsets " in message, message
    assert f"-{deleted_to.low_watermark - 1})" in message, message
    assert f"lakesync recover --pipeline {pipeline.name}" in message, message
    assert DeltaTable(pipeline.delta.table_uri("items")).version() == version, "nothing may be written"

    # the command it gives (the relay is stopped), the relay, the stream: Delta equals the source (the oracle),
    # through a replay from the table's consumed-through mark, not a new load
    consumed = StreamProgress.load(pipeline.pipeline_state_dir).tables["items"].consumed_through
    assert consumed is not None and consumed > LoadState.for_pipeline_dir(pipeline.pipeline_state_dir) \
        .tables["items"].position_key, "the stream's batch moved the mark past the load"
    assert cli_main(["recover", "--pipeline", pipeline.name, "--pipelines-dir", str(tmp_path / "pipelines")]) == 0
    shown = capsys.readouterr().out
    loaded_at = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables["items"].position or {}
    token = SourcePosition.from_key(consumed, file_stem=file_stem(loaded_at["file"])).token()  # as users type it
    assert f"items: replay: replayed from {token}" in shown and "1 tables replayed, 0 re-loaded" in shown, shown
    assert LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables["items"].position_key == consumed
    assert DeltaTable(pipeline.delta.table_uri("items")).version() == version, "no new load of the table"
    relay_until_idle(pipeline)
    run_stream(pipeline, once=True, spark=spark)
    assert_equal(mariadb, pipeline, "items", ["id"])
