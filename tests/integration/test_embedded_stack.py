"""The embedded stack is what lakesync needs a production source and broker to be."""

from __future__ import annotations

import time
import uuid

import pymysql
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from lakesync_devkit.dev.mariadb import LAKESYNC_GRANTS
from lakesync_devkit.dev.stack import LAKESYNC_USER, DevStack

from lakesync.core.errors import StackError

pytestmark = pytest.mark.integration


def _variables(mariadb, *names: str) -> dict[str, str]:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + ",".join(["%s"] * len(names)) + ")", names)
        return {name: value for name, value in cur.fetchall()}


def test_mariadb_has_the_binlog_settings_lakesync_requires(mariadb):
    settings = _variables(mariadb, "log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
                          "server_id", "bind_address")
    assert settings == {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
        "server_id": "1",
        "bind_address": "127.0.0.1",
    }


def test_mariadb_writes_gtids(mariadb, fresh_database):
    with mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1)")
        cur.execute("SELECT @@gtid_binlog_pos")
        assert cur.fetchone()[0].startswith("0-1-")


def test_lakesync_user_has_exactly_the_least_privilege_grants(stack):
    with stack.mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SHOW GRANTS FOR '{LAKESYNC_USER}'@'127.0.0.1'")
        grant = cur.fetchone()[0]
    granted = grant.split(" ON ")[0].removeprefix("GRANT ").split(", ")
    # MariaDB reports REPLICATION CLIENT under its newer name BINLOG MONITOR.
    expected = {"BINLOG MONITOR" if g == "REPLICATION CLIENT" else g for g in LAKESYNC_GRANTS}
    assert set(granted) == expected


def test_lakesync_user_cannot_write(stack, fresh_database):
    with stack.mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    conn = pymysql.connect(host="127.0.0.1", port=stack.settings.mariadb_port, user=LAKESYNC_USER,
                           password=stack.settings.lakesync_password, database=fresh_database)
    with conn, conn.cursor() as cur, pytest.raises(pymysql.err.OperationalError, match="denied"):
        cur.execute("INSERT INTO t VALUES (1)")


def test_broker_round_trips_messages_by_assign(broker):
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all"})
    sent = [(f"k{i}".encode(), f"value {i}".encode()) for i in range(50)]
    for key, value in sent:
        producer.produce(topic, key=key, value=value, partition=0, headers=[("lakesync.pos", key)])
    assert producer.flush(60) == 0, "the broker did not acknowledge every message"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    received = []
    deadline = time.monotonic() + 60  # a poll may come back empty while a loaded broker serves the new topic
    while len(received) < len(sent):
        assert time.monotonic() < deadline, f"{len(received)} of {len(sent)} messages came back within 60 s"
        messages = consumer.consume(100, timeout=1)
        received += [(m.key(), m.value()) for m in messages if m.error() is None]
    consumer.close()
    assert received == sent


def test_starting_the_stack_twice_is_harmless(stack):
    before = stack.status()
    DevStack(stack.state_dir).up()
    assert stack.status() == before


def test_a_port_in_use_is_a_clear_error(tmp_path, stack):
    other = DevStack(tmp_path / "other")
    from lakesync_devkit.dev.stack import StackSettings

    settings = StackSettings.fresh()
    settings.mariadb_port = stack.settings.mariadb_port  # taken by the session's server
    other._save(settings)
    with pytest.raises(StackError, match=f"port {stack.settings.mariadb_port} .* already in use"):
        other.mariadb.start()
