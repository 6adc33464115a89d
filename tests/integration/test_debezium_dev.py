"""Debezium in the dev kit: the MariaDB connector in Kafka Connect standalone, started through
:class:`DebeziumConnect` against the session's embedded MariaDB and broker, captures a snapshot and then the
inserts, updates and deletes written after it, onto ``<prefix>.<db>.<table>``; its REST listener is bound to
loopback only; stopping it ends the JVM."""

from __future__ import annotations

import base64
import json
import random
import socket
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from lakesync_devkit.dev.debezium import DebeziumConnect
from lakesync_devkit.dev.stack import ConnectorSettings, DevStack

from tests.kafkakit import read_records

pytestmark = pytest.mark.integration


def _decimal(encoded: str, scale: int) -> str:
    """Debezium's precise DECIMAL: base64 of the big-endian two's-complement unscaled value."""
    unscaled = int.from_bytes(base64.b64decode(encoded), "big", signed=True)
    return f"{unscaled / 10**scale:.{scale}f}"


def _changes(bootstrap: str, topic: str, expected: int, timeout: float = 120.0) -> list[Any]:
    """The topic's records once it holds ``expected`` of them (Debezium writes asynchronously, and slowly on a
    loaded machine); fails saying how many came if they never all do."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_records(bootstrap, topic, isolation="read_uncommitted") if _has_topic(bootstrap, topic) else []
        if len(records) >= expected:
            return records
        assert time.monotonic() < deadline, f"{topic}: {len(records)} of {expected} records after {timeout:.0f} s"
        time.sleep(0.5)


def _has_topic(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def _non_loopback_address() -> str | None:
    """An IPv4 address of this machine other than loopback, if it has one."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return None


@pytest.fixture
def debezium(stack: DevStack, fresh_database: str, tmp_path: Path):
    """A Debezium worker of its own (folder, REST port, topic prefix, server id), stopped afterwards."""
    connector = ConnectorSettings(databases=(fresh_database,), tables=(f"{fresh_database}.accounts",),
                                  topic_prefix=f"dbz{uuid.uuid4().hex[:8]}", snapshot_mode="initial",
                                  server_id=random.randrange(60_000, 64_000), name="test-debezium")
    holder: dict[str, DebeziumConnect] = {}
    yield connector, holder
    if "connect" in holder:
        holder["connect"].stop()


def test_debezium_captures_snapshot_then_inserts_updates_and_deletes(stack: DevStack, fresh_database: str,
                                                                     debezium, tmp_path: Path) -> None:
    connector, holder = debezium
    with stack.mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE accounts (id BIGINT UNSIGNED PRIMARY KEY, owner VARCHAR(40), "
                    "balance DECIMAL(12,2), opened DATETIME(6))")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, addr INET6)")  # not captured, and Debezium can't parse it
        cur.execute("INSERT INTO accounts VALUES (1, 'ada', 10.50, '2026-01-02 03:04:05.123456'), "
                    "(18446744073709551615, 'max', -0.01, NULL)")

    connect = holder["connect"] = stack.start_debezium(connector, home=tmp_path / "debezium", timeout=90)
    connect.wait_streaming(timeout=60)
    with stack.mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO accounts VALUES (2, 'bob', 99.99, NULL)")
        cur.execute("UPDATE accounts SET balance = 11.00, owner = 'ada l.' WHERE id = 1")
        cur.execute("DELETE FROM accounts WHERE id = 2")
        cur.execute("CREATE TABLE more_inet (id INT PRIMARY KEY, addr INET6)")  # would fail the task unfiltered

    topic = f"{connector.topic_prefix}.{fresh_database}.accounts"
    records = _changes(stack.broker.bootstrap, topic, expected=6)
    events = [(json.loads(r.key())["payload"], json.loads(r.value())["payload"] if r.value() else None)
              for r in records]
    assert [value["op"] if value else "tombstone" for _, value in events] == ["r", "r", "c", "u", "d", "tombstone"]
    (_, first), (_, biggest), (_, insert), (_, update), (_, delete), (tombstone_key, _) = events
    assert first["after"]["owner"] == "ada" and _decimal(first["after"]["balance"], 2) == "10.50"
    opened = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert first["after"]["opened"] == int(opened.timestamp()) * 1_000_000 + 123456  # DATETIME(6): epoch µs
    # bigint.unsigned.handling.mode=precise: the largest BIGINT UNSIGNED survives (as a scale-0 decimal)
    assert int.from_bytes(base64.b64decode(biggest["after"]["id"]), "big", signed=True) == 2**64 - 1
    assert insert["after"]["owner"] == "bob" and insert["source"]["snapshot"] == "false"
    assert update["before"]["owner"] == "ada" and update["after"]["owner"] == "ada l."
    assert _decimal(update["after"]["balance"], 2) == "11.00"
    assert delete["before"]["owner"] == "bob" and delete["after"] is None
    assert _decimal(tombstone_key["id"], 0) == "2"  # the tombstone after the delete carries its key
    for change in (insert, update, delete):
        assert change["source"]["file"] and change["source"]["pos"] > 0 and change["source"]["gtid"]
    # the connector is healthy after the DDL with INET6 it cannot parse (the DDL filter skips it)
    status = connect.connector_status()
    assert status is not None and [t["state"] for t in status["tasks"]] == ["RUNNING"]
    # include.schema.changes: the captured table's DDL is on the topic named like the prefix
    ddl = [json.loads(r.value())["payload"]["ddl"] for r in read_records(stack.broker.bootstrap,
                                                                          connector.topic_prefix)]
    assert any("CREATE TABLE" in statement and "accounts" in statement for statement in ddl)

    connect.stop()
    assert not connect.is_running()


def test_debezium_rest_listener_is_bound_to_loopback_only(stack: DevStack, fresh_database: str, debezium,
                                                          tmp_path: Path) -> None:
    connector, holder = debezium
    connector.snapshot_mode = "no_data"
    connect = holder["connect"] = stack.start_debezium(connector, home=tmp_path / "debezium", timeout=90)
    pid = connect.pid()
    assert pid is not None
    listening = [c.laddr for c in psutil.Process(pid).net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == connect.port]
    assert listening, f"nothing of pid {pid} listens on port {connect.port}"
    assert {address.ip for address in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}
    outside = _non_loopback_address()
    if outside is not None:
        with socket.socket() as probe:
            probe.settimeout(2)
            assert probe.connect_ex((outside, connect.port)) != 0
    assert connect.connector_status() is not None  # while loopback answers
