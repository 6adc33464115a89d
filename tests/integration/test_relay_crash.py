"""kill -9 of a running relay in the middle of a Kafka transaction, then a restart: what the killed relay had
in its open transaction is never shown to read_committed readers, and every change is published exactly once
(counted per source position, independently of lakesync's reader)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.core.connections import mysql_connection
from lakesync.events.envelope import ChangeEvent
from lakesync.relay import covered_range
from lakesync.source.binlog import BinlogSource
from lakesync.source.server_checks import current_position
from tests.kafkakit import read_records

pytestmark = pytest.mark.integration


def _positions_on_topic(bootstrap: str, topic: str, *, isolation: str = "read_committed") -> list[str]:
    return [dict(record.headers())["lakesync.pos"].decode()
            for record in read_records(bootstrap, topic, isolation=isolation)]


def _relay_process(pipelines_dir: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "lakesync.cli.main", "relay", "--pipeline", "crashtest",
         "--pipelines-dir", str(pipelines_dir), *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def _wait_until_publishing(relay: subprocess.Popen[bytes], pipeline: Pipeline, past: str,
                           timeout: float = 120) -> None:
    """Until the relay has committed changes past position key ``past`` (where it starts): from then on, with the
    writer busy, it has a Kafka transaction open nearly all the time (a kill during its start-up hits none)."""
    deadline = time.monotonic() + timeout
    while (covered := covered_range(pipeline)) is None or covered[1] <= past:
        assert relay.poll() is None, relay.communicate()[0].decode()
        assert time.monotonic() < deadline, f"the relay published nothing in {timeout} s"
        time.sleep(0.2)


def test_relay_killed_mid_transaction_restarts_and_publishes_each_change_exactly_once(stack, mariadb, broker, fresh_database, tmp_path):
    server_id = random.randrange(30_000, 60_000)
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    (pipelines_dir / "crashtest.yaml").write_text(yaml.safe_dump({
        "name": "crashtest",
        "source": {"conn_id": MYSQL_CONN_ID, "database": fresh_database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"crash{server_id}"},
        "delta": {"root": str(tmp_path / "delta")},
        "state_dir": str(tmp_path / "state"),
    }))
    env = {**os.environ, **stack.connection_env()}
    os.environ.update(stack.connection_env())  # for load_pipeline/mysql_connection in this process
    pipeline = load_pipeline("crashtest", pipelines_dir)

    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        start = current_position(conn)
    pipeline.pipeline_state_dir.mkdir(parents=True)
    (pipeline.pipeline_state_dir / "full_load.json").write_text(json.dumps(
        {"position": {"file": start.file, "offset": start.offset, "gtid": start.gtid}}))

    stop_writing = threading.Event()

    def write_changes() -> None:
        with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
            conn.autocommit(False)
            i = 0
            while not stop_writing.wait(0.02):  # a steady stream of source transactions until told to stop
                cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i + n, n) for n in range(200)])
                cur.execute("UPDATE t SET v = v + 1 WHERE id BETWEEN %s AND %s", (i, i + 50))
                cur.execute("DELETE FROM t WHERE id BETWEEN %s AND %s", (i + 150, i + 160))
                conn.commit()
                i += 200

    writer = threading.Thread(target=write_changes)
    writer.start()
    topic = pipeline.topic("t")
    open_transaction_seen = False
    try:
        for _ in range(5):  # until a kill lands inside an open Kafka transaction (almost always the first)
            stored = covered_range(pipeline)  # None before the first relay, which starts at the full load's position
            relay = _relay_process(pipelines_dir, env)
            _wait_until_publishing(relay, pipeline, stored[1] if stored else start.key())
            time.sleep(random.uniform(0.5, 2.0))
            assert relay.poll() is None, relay.communicate()[0].decode()
            relay.send_signal(signal.SIGKILL)
            relay.wait(10)
            uncommitted = _positions_on_topic(broker.bootstrap, topic, isolation="read_uncommitted")
            committed = _positions_on_topic(broker.bootstrap, topic)
            if len(uncommitted) > len(committed):
                open_transaction_seen = True
                in_flight = set(uncommitted) - set(committed)
                break
    finally:
        stop_writing.set()
        writer.join()
    assert open_transaction_seen, "no kill landed inside an open transaction"

    second = _relay_process(pipelines_dir, env, "--stop-when-idle", "1.5")
    output, _ = second.communicate(timeout=120)
    assert second.returncode == 0, output.decode()
    assert b"from stored progress" in output, output.decode()

    source = BinlogSource(mysql_connection(pipeline).pymysql_kwargs(), server_id=server_id + 1,
                          database=fresh_database, start=start, selects=lambda table: table == "t", blocking=False)
    expected = {item.position.key() for item in source if type(item) is ChangeEvent}
    published = Counter(_positions_on_topic(broker.bootstrap, topic))
    assert expected, "the writer produced changes"
    assert set(published) == expected, (f"{len(expected - set(published))} changes lost, "
                                        f"{len(set(published) - expected)} unknown positions")
    doubled = {pos: n for pos, n in published.items() if n > 1}
    assert not doubled, f"{len(doubled)} positions published more than once, e.g. {list(doubled.items())[:3]}"
    assert in_flight <= set(published), "what the killed relay had in flight is republished by the next one"
