"""kill -9 of a running relay, then a restart: every change's position is on Kafka at least once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import load_pipeline
from lakesync.core.connections import mysql_connection
from lakesync.events.envelope import ChangeEvent
from lakesync.source.binlog import BinlogSource
from lakesync.source.server_checks import current_position

pytestmark = pytest.mark.integration


def _positions_on_topic(bootstrap: str, topic: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "relay-crash", "enable.auto.commit": "false"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    keys: list[str] = []
    try:
        while (message := consumer.poll(1.5)) is not None:
            if not message.error():
                keys.append(dict(message.headers())["lakesync.pos"].decode())
    finally:
        consumer.close()
    return keys


def _relay_process(pipelines_dir: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "lakesync.cli.main", "relay", "--pipeline", "crashtest",
         "--pipelines-dir", str(pipelines_dir), *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def test_kill_9_mid_stream_then_restart_loses_no_change(stack, mariadb, broker, fresh_database, tmp_path):
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
            while not stop_writing.is_set() and i < 60_000:
                cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i + n, n) for n in range(200)])
                cur.execute("UPDATE t SET v = v + 1 WHERE id BETWEEN %s AND %s", (i, i + 50))
                cur.execute("DELETE FROM t WHERE id BETWEEN %s AND %s", (i + 150, i + 160))
                conn.commit()
                i += 200

    writer = threading.Thread(target=write_changes)
    writer.start()
    first = _relay_process(pipelines_dir, env)
    try:
        time.sleep(random.uniform(2.0, 4.0))
        assert first.poll() is None, first.communicate()[0].decode()
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        stop_writing.set()
        writer.join()
        if first.poll() is None:
            first.kill()

    second = _relay_process(pipelines_dir, env, "--stop-when-idle", "1.5")
    output, _ = second.communicate(timeout=120)
    assert second.returncode == 0, output.decode()
    assert b"from stored progress" in output, output.decode()

    source = BinlogSource(mysql_connection(pipeline).pymysql_kwargs(), server_id=server_id + 1,
                          database=fresh_database, start=start, selects=lambda table: table == "t", blocking=False)
    expected = {item.position.key() for item in source if type(item) is ChangeEvent}
    published = _positions_on_topic(broker.bootstrap, pipeline.topic("t"))
    assert expected, "the writer produced changes"
    assert expected <= set(published), f"{len(expected - set(published))} changes lost"
