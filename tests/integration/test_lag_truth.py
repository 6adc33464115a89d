"""Lag that tells the truth, on real servers: an idle, caught-up pipeline shows no lag and raises nothing
(and its health DAG passes) for longer than the alert threshold, also with offsets past the stream's
checkpoint that hold no change (an aborted transaction and its marker); a stream that stops consuming while the
source changes alerts within the threshold, with the count of what is pending; a dead relay on an idle
source alerts once its heartbeats have stopped for longer than the threshold.

``status`` and the health check both judge :func:`lakesync.monitoring.status.pipeline_status` with
:func:`lakesync.monitoring.attention.attention`; the tests call those two, and the health DAG once."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lakesync_devkit.dev.airflow_runner import AirflowRunner
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.core.connections import kafka_client_config
from lakesync.full_load.load import FullLoad
from lakesync.kafka.offsets import end_offsets, list_partitions, offset_consumer
from lakesync.monitoring.attention import Attention, attention
from lakesync.monitoring.status import pipeline_status
from lakesync.relay import Relay, covered_range
from lakesync.relay.publisher import Publisher
from lakesync.source.server_checks import current_position
from lakesync.stream.app import checkpoint_dir, run_stream
from lakesync.stream.lag import committed_offsets
from tests.oracle import assert_tables_match

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ALERT_AFTER = 6.0  # stream.lag_alert_seconds: small, so each test waits past it in seconds
CLOCK_SLACK = 0.01  # the status's clock is in whole milliseconds
NAME = "truelag"


@dataclass
class Running:
    pipeline: Pipeline
    pipelines_dir: Path
    database: str
    relay: Relay
    relay_thread: threading.Thread
    mariadb: Any

    def write(self, statements: list[str]) -> tuple[float, str]:
        """Run each statement in its own transaction; returns (when the first committed, the binlog end)."""
        with self.mariadb.connect(database=self.database) as conn, conn.cursor() as cur:
            first = time.time()
            for statement in statements:
                cur.execute(statement)
            return first, current_position(conn).key()

    def relayed(self, target: str) -> None:
        _until("the relay to publish up to " + target, lambda: (covered_range(self.pipeline) or ("", ""))[1] >= target)

    def judged(self) -> tuple[dict[str, Any], list[Attention]]:
        status = pipeline_status(self.pipeline, relay_timeout_s=10)
        return status, attention(status, lag_alert_seconds=ALERT_AFTER)


def _until(what: str, check: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass(frozen=True)
class Poll:
    """One judgement: the status's own clock (``generated_at``: the "now" its lag and silence are measured
    against, taken as the call starts, so a call slowed by load does not shift it), the status and its items."""

    at: float
    status: dict[str, Any]
    items: list[Attention]


def _polls_until(env: Running, what: str, alerting: Callable[[list[Attention]], bool],
                 timeout: float = 120) -> tuple[list[Poll], Poll]:
    """Judge the pipeline until ``alerting`` holds for its items: the polls before (none of them alerting) and
    the one that alerted. The bounds on when the alert came are then checked on each poll's own clock."""
    deadline = time.monotonic() + timeout
    quiet: list[Poll] = []
    while True:
        status, items = env.judged()
        poll = Poll(dt.datetime.fromisoformat(status["generated_at"]).timestamp(), status, items)
        if alerting(items):
            return quiet, poll
        quiet.append(poll)
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}; last status: {status}")
        time.sleep(0.3)


def _table(status: dict[str, Any]) -> dict[str, Any]:
    (entry,) = (t for t in status["tables"] if t["table"] == "items")
    return entry["stream"]


@pytest.fixture
def running(stack, mariadb, fresh_database, tmp_path, spark, monkeypatch) -> Iterator[Running]:
    """A loaded table, a relay running (heartbeats every 0.5 s) and a stream that has applied everything."""
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    server_id = random.randrange(5_000, 60_000)
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / f"{NAME}.yaml").write_text(yaml.safe_dump({
        "name": NAME,
        "source": {"conn_id": MYSQL_CONN_ID, "database": fresh_database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"tl{server_id}{uuid.uuid4().hex[:6]}"},
        "delta": {"root": str(tmp_path / "delta")},
        "state_dir": str(tmp_path / "state"),
        "stream": {"lag_alert_seconds": ALERT_AFTER},
        "relay": {"heartbeat_seconds": 0.5},
    }))
    pipeline = load_pipeline(NAME, folder)
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, label VARCHAR(40) NOT NULL)")
        cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, f"item {i}") for i in range(1, 11)])
    FullLoad(pipeline=pipeline).run()
    relay = Relay(pipeline, heartbeat_seconds=0.3, log_every_seconds=5)
    relay_thread = threading.Thread(target=relay.run, daemon=True)
    relay_thread.start()
    env = Running(pipeline, folder, fresh_database, relay, relay_thread, mariadb)
    try:
        _, target = env.write(["UPDATE items SET label = 'first change' WHERE id = 1"])
        env.relayed(target)
        run_stream(pipeline, once=True, spark=spark)  # the stream's first committed batch
        yield env
    finally:
        relay.stop()
        relay_thread.join(30)


def _matches_source(env: Running) -> None:
    with env.mariadb.connect(database=env.database) as conn:
        assert_tables_match(conn, env.database, {"items": env.pipeline.delta.table_uri("items")})


def _abort_one_record(pipeline: Pipeline) -> int:
    """Write a record to the table's topic in a Kafka transaction and abort it (as a relay that crashed mid-unit
    leaves behind): offsets that hold no change. Returns how many offsets past the stream's checkpoint the
    topic's last stable offset now is."""
    client = kafka_client_config(pipeline)
    publisher = Publisher(client, transactional_id=f"test-abort-{uuid.uuid4().hex}")
    try:
        publisher.send(pipeline.topic("items"), b'{"id": 99}', b'{"never": "visible"}', [])
        publisher.flush()  # on the broker, not only queued here (an abort would drop it unsent)
        publisher.abort()
    finally:
        publisher.close()
    committed = committed_offsets(checkpoint_dir(pipeline)) or {}
    consumer = offset_consumer(client)

    def past_the_marker() -> int:  # the broker writes the marker just after the abort returns
        ends = end_offsets(consumer, list_partitions(consumer, topics=[pipeline.topic("items")]))
        return sum(end - committed[tp] for tp, end in ends.items())

    try:
        return _until("the abort marker", past_the_marker, timeout=30)
    finally:
        consumer.close()


def test_an_idle_caught_up_pipeline_shows_no_lag_past_the_threshold_and_its_health_dag_passes(running, stack,
                                                                                               tmp_path):
    assert _abort_one_record(running.pipeline) == 2, "the aborted record and its abort marker: offsets, no change"
    quiet_since = time.time()
    seen = []
    while True:  # no write for longer than the threshold, and the newest applied change older than it
        status, items = running.judged()
        seen.append((_table(status)["lag_seconds"], _table(status)["pending"], items))
        since_newest_applied = time.time() - _table(status)["applied_source_ts_ms"] / 1000
        if time.time() - quiet_since >= ALERT_AFTER + 3 and since_newest_applied > ALERT_AFTER + 1:
            break  # the old measure (now minus the newest applied change) would alert now
        assert time.time() - quiet_since < 60, f"the newest applied change does not age: {status}"
        time.sleep(1)
    assert all(lag == 0.0 and pending == 0 and items == [] for lag, pending, items in seen), seen
    assert status["relay"]["silent_seconds"] < ALERT_AFTER, "the relay's heartbeats keep it known alive"

    runner = AirflowRunner(tmp_path / "airflow", connections=stack.connection_env(),
                           pipelines_dir=running.pipelines_dir)
    (run,) = runner.dag_test(f"lakesync_{NAME}_health", "2026-11-20T00:00:00+00:00", log_file=tmp_path / "health.log")
    assert run["tasks"] == {"check_health": "success"}, (tmp_path / "health.log").read_text()[-3000:]
    _matches_source(running)


def test_a_stuck_stream_alerts_within_the_threshold_with_the_count_of_pending_changes(running, spark):
    committed_at, target = running.write([f"INSERT INTO items VALUES ({i}, 'new {i}')" for i in range(11, 16)]
                                         + ["UPDATE items SET label = 'again' WHERE id = 2"])
    written_at = time.time()  # the oldest change committed between committed_at and now
    running.relayed(target)  # the relay published; the stream is not run
    status, _ = running.judged()
    assert _table(status)["pending"] >= 6, "six changes (and their transactions' commit markers) not applied"

    quiet, alert = _polls_until(running, "the lag alert", lambda items: any(i.table == "items" for i in items))
    # binlog times are whole seconds: the oldest change's recorded commit time is up to 1 s before its commit
    late = [poll.status for poll in quiet if poll.at > written_at + ALERT_AFTER + CLOCK_SLACK]
    assert not late, f"no alert though the oldest change was older than the threshold: {late}"
    assert alert.at > committed_at + ALERT_AFTER - 1 - CLOCK_SLACK, "no alert before the threshold"
    status, items = alert.status, alert.items
    (item,) = items
    assert item.level == "alert" and "lag" in item.message
    assert f"{_table(status)['pending']} offsets not applied" in item.message
    assert _table(status)["lag_seconds"] > ALERT_AFTER

    run_stream(running.pipeline, once=True, spark=spark)  # unstuck: everything applied, nothing pending
    status, items = running.judged()
    assert (_table(status)["lag_seconds"], _table(status)["pending"], items) == (0.0, 0, [])
    _matches_source(running)


def test_a_dead_relay_on_an_idle_source_alerts_once_its_heartbeats_stop_past_the_threshold(running):
    running.relay.stop()
    running.relay_thread.join(30)
    assert not running.relay_thread.is_alive()
    stopped_at = time.time()
    status, items = running.judged()
    assert items == [], "just stopped: not silent for long yet"

    quiet, alert = _polls_until(running, "the relay silence alert", bool)
    _assert_silence_alert_in_time(quiet, alert, silent_since=stopped_at)
    status, items = alert.status, alert.items
    (item,) = items
    assert item.table is None and "relay silent" in item.message and item.command == f"lakesync relay --pipeline {NAME}"
    assert (_table(status)["lag_seconds"], _table(status)["pending"]) == (0.0, 0), "nothing pending in Kafka"


def test_a_dead_relay_while_the_source_changes_alerts_within_the_threshold_though_kafka_holds_nothing_new(running):
    running.relay.stop()
    running.relay_thread.join(30)
    assert not running.relay_thread.is_alive()
    committed_at, _ = running.write(["INSERT INTO items VALUES (50, 'never relayed')"])

    quiet, alert = _polls_until(running, "the relay silence alert", bool)
    _assert_silence_alert_in_time(quiet, alert, silent_since=committed_at)  # the relay was dead before the change
    status, items = alert.status, alert.items
    (item,) = items
    assert "relay silent" in item.message
    assert _table(status)["pending"] == 0, "the change never reached Kafka: only the relay's silence tells"


def _assert_silence_alert_in_time(quiet: list[Poll], alert: Poll, *, silent_since: float) -> None:
    """The relay silence alert came within the threshold of ``silent_since`` (the relay was dead by then):
    every poll judged later than the threshold after it alerted; and not before the threshold, on the status's
    own figures: the relay's last sign of life is before ``silent_since`` and older than the threshold."""
    late = [poll.status for poll in quiet if poll.at > silent_since + ALERT_AFTER + CLOCK_SLACK]
    assert not late, f"no alert though the relay was silent for longer than the threshold: {late}"
    silent = alert.status["relay"]["silent_seconds"]
    assert silent > ALERT_AFTER, alert.status
    assert alert.at - silent <= silent_since + CLOCK_SLACK, "the silence counts from the relay's last sign of life"
