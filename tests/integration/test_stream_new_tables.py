"""Tables that appear after the full load join the stream by themselves (``stream.join_new_tables``), through
the real relay, broker and Spark stream, judged by the independent oracle (tests/oracle.py).

* created mid-stream: streamed from its CREATE TABLE with no snapshot (``full_load.json`` says ``binlog``,
  no row read), inserts, updates and deletes included;
* dropped and created again before the stream saw it: only the new table's rows, none of the old ones (the
  stream starts at the latest CREATE TABLE, not at the topic's beginning);
* renamed in from a table the pipeline did not select, or selected by a widened include pattern (their rows
  are older than the change log): each its own automatic load;
* all in one ``run_stream`` call: the stream restarts its query with the new topics itself, with
  ``--once`` and in a continuous stream (a table created while it runs); later changes follow from the
  checkpoint.

With the setting off (the default) the new table is not synced and ``status`` says so, with the command.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.full_load.load import FullLoad
from lakesync.full_load.state import LoadState
from lakesync.monitoring.attention import attention, table_state
from lakesync.monitoring.status import pipeline_status
from lakesync.relay import Relay
from lakesync.stream.app import StreamRunSummary, checkpoint_dir, run_stream
from lakesync.stream.kafka_reader import checkpoint_reader
from lakesync.stream.progress import StreamProgress
from tests.oracle import assert_tables_match

pytestmark = [pytest.mark.integration, pytest.mark.spark]

#: how long the continuous part waits for each step (the join, the restarted query's first batch); only a
#: failure waits this long
JOIN_WAIT_SECONDS = 240

CREATE = "CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, v VARCHAR(20) NOT NULL, amount DECIMAL(10,2) NULL)"


def _pipeline(folder: Path, database: str, *, join: bool) -> Pipeline:
    server_id = random.randrange(5_000, 60_000)
    (folder / "newtables.yaml").write_text(yaml.safe_dump({
        "name": "newtables",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "tables": {"include": ["*"], "exclude": ["staging_*", "legacy_*"]},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"nt{server_id}{uuid.uuid4().hex[:6]}"},
        "delta": {"root": str(folder / "delta")},
        "state_dir": str(folder / "state"),
        "stream": {"join_new_tables": join, "trigger_seconds": 1},
    }))
    return load_pipeline("newtables", folder)


def _widen(folder: Path) -> Pipeline:
    """The pipeline file with ``legacy_*`` no longer excluded: those tables are selected from now on."""
    path = folder / "newtables.yaml"
    document = yaml.safe_load(path.read_text())
    document["tables"]["exclude"] = ["staging_*"]
    path.write_text(yaml.safe_dump(document))
    return load_pipeline("newtables", folder)


def _sql(mariadb: Any, database: str, *statements: str) -> None:
    with mariadb.connect(database=database) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _relay(pipeline: Pipeline) -> None:
    Relay(pipeline, heartbeat_seconds=0.3, blocking=False).run(stop_when_idle_seconds=1.0)


def _start(mariadb: Any, database: str, pipeline: Pipeline, spark: Any) -> None:
    """The base table loaded and streamed: the pipeline is running before any new table appears."""
    _sql(mariadb, database, CREATE.format(t="base"), "INSERT INTO base VALUES (1, 'a', 1.50), (2, 'b', NULL)")
    FullLoad(pipeline).run()
    _sql(mariadb, database, "UPDATE base SET v = 'a2' WHERE id = 1")
    _relay(pipeline)
    run_stream(pipeline, once=True, spark=spark)


def test_tables_created_renamed_in_or_newly_selected_after_the_load_join_the_running_stream(
        stack, mariadb, fresh_database, spark, tmp_path, monkeypatch):
    """Spark's Kafka source starts a topic new to its checkpoint at its first record, so the re-created table's
    old rows are left out by position, not by where the read starts."""
    for key, value in stack.connection_env().items():
        monkeypatch.setenv(key, value)
    database = fresh_database
    _sql(mariadb, database, CREATE.format(t="staging_orders"),
         "INSERT INTO staging_orders VALUES (1, 'old1', 1.00), (2, 'old2', 2.00), (3, 'old3', NULL)",
         CREATE.format(t="legacy_accounts"), "INSERT INTO legacy_accounts VALUES (1, 'l1', 1.00), (2, 'l2', NULL)")
    pipeline = _pipeline(tmp_path, database, join=True)
    _start(mariadb, database, pipeline, spark)
    _sql(mariadb, database, "UPDATE legacy_accounts SET v = 'before widening' WHERE id = 1")
    pipeline = _widen(tmp_path)  # legacy_accounts is selected now: it never was, so the change log lacks it

    _sql(mariadb, database,
         CREATE.format(t="fresh"),
         "INSERT INTO fresh VALUES (1, 'x', 1.25), (2, 'y', NULL), (3, 'z', 3.00)",
         "UPDATE fresh SET v = 'y2', amount = 9.99 WHERE id = 2",
         "DELETE FROM fresh WHERE id = 3",
         CREATE.format(t="again"),
         "INSERT INTO again VALUES (1, 'gone', 1.00), (2, 'gone', 2.00), (3, 'gone', 3.00)",
         "DROP TABLE again",
         CREATE.format(t="again"),
         "INSERT INTO again VALUES (1, 'new', 10.00), (4, 'new', 40.00)",
         "RENAME TABLE staging_orders TO orders",
         "UPDATE orders SET v = 'moved' WHERE id = 2",
         "UPDATE base SET v = 'b2' WHERE id = 2",
         "UPDATE legacy_accounts SET amount = 5.00 WHERE id = 2")
    _relay(pipeline)
    summary = run_stream(pipeline, once=True, spark=spark)  # one call: the new topics are read in it
    assert checkpoint_reader(checkpoint_dir(pipeline)) == "spark"

    loads = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables
    assert loads["fresh"].mode == "binlog" and loads["fresh"].rows == 0  # no snapshot: all from the change log
    assert loads["again"].mode == "binlog"
    assert loads["orders"].mode == "consistent" and loads["orders"].rows == 3  # older than coverage: its load
    assert loads["legacy_accounts"].mode == "consistent" and loads["legacy_accounts"].rows == 2
    assert summary.tables.get("fresh") == 5  # 3 inserts, an update, a delete
    assert summary.tables.get("again") == 2  # read from its latest CREATE TABLE: the old table's 3 rows never
    tables = ["base", "fresh", "again", "orders", "legacy_accounts"]
    uris = {t: pipeline.delta.table_uri(t) for t in tables}
    with mariadb.connect(database=database) as conn:
        assert_tables_match(conn, database, uris)
    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables
    assert "streamed from its CREATE TABLE on" in (progress["fresh"].joined or "")
    assert "renamed in" in (progress["orders"].joined or "")
    assert "never loaded" in (progress["legacy_accounts"].joined or "")

    # continuous: a table created while it runs joins, and the stream restarts its query itself (no batch of
    # the old query writes after the new one started: BatchApplier.close); the joined tables' later changes
    # follow from the checkpoint, as for any other table
    relay = Relay(pipeline, heartbeat_seconds=0.3)
    relay_thread = threading.Thread(target=relay.run, name="relay", daemon=True)
    relay_thread.start()
    outcome: dict[str, Any] = {}
    writer = threading.Thread(target=_write_while_streaming, args=(mariadb, database, pipeline, outcome),
                              daemon=True)
    stream = threading.Thread(target=_stream_continuously, args=(pipeline, spark, outcome), daemon=True)
    try:
        stream.start()
        writer.start()
        writer.join(JOIN_WAIT_SECONDS + 60)
        assert outcome.get("written"), f"the writer did not finish: {outcome.get('writer error')!r}"
        _until("the restarted query to apply the joined table's changes",
               lambda: _ended(outcome) or _applied_rows(pipeline, "later") > 0)
    finally:
        for query in spark.streams.active:  # how a continuous stream ends here: its query stopped from outside
            query.stop()
        stream.join(120)
        writer.join(60)
        relay.stop()
        relay_thread.join(60)
    assert not stream.is_alive(), "the continuous stream did not return after its query was stopped"
    summary = outcome.get("stream")
    assert isinstance(summary, StreamRunSummary), f"the continuous stream failed: {outcome.get('stream error')!r}"
    assert summary.tables.get("later"), summary  # read by the query the stream restarted for it
    assert LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables["later"].mode == "binlog"
    _relay(pipeline)
    run_stream(pipeline, once=True, spark=spark)  # whatever the stopped query had not read yet
    uris["later"] = pipeline.delta.table_uri("later")
    with mariadb.connect(database=database) as conn:
        assert_tables_match(conn, database, uris)
    status = pipeline_status(pipeline, relay=False)
    assert {table_state(entry) for entry in status["tables"]} == {"streaming"}


def _stream_continuously(pipeline: Pipeline, spark: Any, outcome: dict[str, Any]) -> None:
    """The continuous stream, in its own thread until its query is stopped; its summary, or what it raised,
    in ``outcome`` (the time-out is only a backstop: the test stops the query once it has seen the join)."""
    try:
        outcome["stream"] = run_stream(pipeline, once=False, spark=spark, timeout_seconds=2 * JOIN_WAIT_SECONDS)
    except BaseException as exc:  # reported by the test's assertions
        outcome["stream error"] = exc


def _write_while_streaming(mariadb: Any, database: str, pipeline: Pipeline, outcome: dict[str, Any]) -> None:
    """Create a table while the continuous stream runs; once the stream has joined it (its Delta table
    exists), keep writing to it and to the others through the query's restart."""
    try:
        _sql(mariadb, database, CREATE.format(t="later"),
             "INSERT INTO later VALUES (1, 'x', 1.25), (2, 'y', NULL)")
        _until("the stream to join the new table",
               lambda: _ended(outcome) or (Path(pipeline.delta.table_uri("later")) / "_delta_log").is_dir())
        for i in range(3, 23):
            _sql(mariadb, database, f"INSERT INTO later VALUES ({i}, 'v{i}', {i}.00)",
                 f"INSERT INTO fresh VALUES ({i + 100}, 'f{i}', NULL)", f"UPDATE base SET v = 'c{i}' WHERE id = 1")
            time.sleep(0.1)
        _sql(mariadb, database, "DELETE FROM later WHERE id = 2", "DELETE FROM again WHERE id = 1",
             "UPDATE orders SET amount = 7.00 WHERE id = 3", "DELETE FROM legacy_accounts WHERE id = 1")
        outcome["written"] = True
    except BaseException as exc:  # reported by the test's assertions
        outcome["writer error"] = exc


def _ended(outcome: dict[str, Any]) -> bool:
    """Whether the continuous stream has returned or failed (nothing more to wait for)."""
    return "stream" in outcome or "stream error" in outcome


def _applied_rows(pipeline: Pipeline, table: str) -> int:
    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables.get(table)
    return progress.rows_total if progress else 0


def _until(what: str, condition: Callable[[], Any], timeout: float = JOIN_WAIT_SECONDS) -> None:
    """Wait for ``condition`` (a loaded CI machine may take minutes to start and restart a query); fail
    saying what did not happen."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def test_with_joining_off_status_names_the_new_table_and_the_command(stack, mariadb, fresh_database, spark,
                                                                     tmp_path, monkeypatch):
    for key, value in stack.connection_env().items():
        monkeypatch.setenv(key, value)
    database = fresh_database
    pipeline = _pipeline(tmp_path, database, join=False)
    _start(mariadb, database, pipeline, spark)
    _sql(mariadb, database, CREATE.format(t="fresh"), "INSERT INTO fresh VALUES (1, 'x', 1.25)")
    _relay(pipeline)
    run_stream(pipeline, once=True, spark=spark)

    status = pipeline_status(pipeline, relay=False)
    entry = next(e for e in status["tables"] if e["table"] == "fresh")
    assert table_state(entry) == "not synced"
    items = [item for item in attention(status, lag_alert_seconds=3600) if item.table == "fresh"]
    assert len(items) == 1 and items[0].level == "warning"
    assert "created on the source at" in items[0].message and "stream.join_new_tables is off" in items[0].message
    assert "lakesync snapshot" not in items[0].message  # the command is shown once, as the item's command
    assert items[0].command == "lakesync snapshot --pipeline newtables --tables fresh"
    assert not LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables.get("fresh")

    _sql(mariadb, database, "DROP TABLE fresh")  # gone before it was synced: nothing to say any more
    _relay(pipeline)
    run_stream(pipeline, once=True, spark=spark)
    status = pipeline_status(pipeline, relay=False)
    assert [item for item in attention(status, lag_alert_seconds=3600) if item.table == "fresh"] == []


def test_a_table_loaded_by_hand_counts_as_pending_only_the_changes_after_its_load(stack, mariadb, fresh_database,
                                                                                   spark, tmp_path, monkeypatch):
    """The not-synced table's command (its own load), then status before the stream's restart: its topic
    holds changes from before the load, which the stream will never read (it starts the topic at the load's
    position), so they are not pending; the change after the load is.

    The stream then restarts with its last batch in flight (written to Delta, not committed in the checkpoint,
    as when a query is stopped between the two): only that checkpoint can replay the batch, so the table joins
    in the query started after the replay, within the same run."""
    for key, value in stack.connection_env().items():
        monkeypatch.setenv(key, value)
    database = fresh_database
    pipeline = _pipeline(tmp_path, database, join=False)
    _start(mariadb, database, pipeline, spark)
    _sql(mariadb, database, "UPDATE base SET v = 'b2' WHERE id = 2")  # a second batch, committed before the table
    _relay(pipeline)
    run_stream(pipeline, once=True, spark=spark)
    _sql(mariadb, database, CREATE.format(t="fresh"), "INSERT INTO fresh VALUES (1, 'x', 1.25)",
         "INSERT INTO fresh VALUES (2, 'y', NULL)", "UPDATE fresh SET v = 'x2' WHERE id = 1")
    _relay(pipeline)
    FullLoad(pipeline, tables=["fresh"]).run()

    def fresh_stream(status: dict[str, Any]) -> dict[str, Any]:
        return next(e for e in status["tables"] if e["table"] == "fresh")["stream"]

    assert (fresh_stream(pipeline_status(pipeline))["pending"], fresh_stream(pipeline_status(pipeline))["lag_seconds"]
            ) == (0, 0.0), "three changes before the load are in the topic; none of them is pending"
    _sql(mariadb, database, "UPDATE fresh SET amount = 9.99 WHERE id = 2")
    _relay(pipeline)
    pending = fresh_stream(pipeline_status(pipeline))["pending"]
    assert pending in (1, 2), f"the change after the load (and its transaction's commit marker): {pending}"

    commits = sorted((checkpoint_dir(pipeline) / "commits").glob("[0-9]*"), key=lambda path: int(path.name))
    for path in (commits[-1], commits[-1].with_name(f".{commits[-1].name}.crc")):
        path.unlink(missing_ok=True)  # the last batch is in flight: written to Delta, not committed in the checkpoint
    run_stream(pipeline, once=True, spark=spark)  # restarted: the stream reads the table from its load on
    with mariadb.connect() as conn:
        assert_tables_match(conn, database, {name: pipeline.delta.table_uri(name) for name in ("base", "fresh")})
