"""The relay's publisher against the broker: unacknowledged data is a clear BrokerError, never passed over
silently; with transactions, a unit of work and its progress record become visible together or not at all,
and a second relay with the same transactional.id fences the first."""

from __future__ import annotations

import time
import uuid

import pytest
from lakesync_devkit.dev.processes import free_port

from lakesync.core.errors import BrokerError, RelayFencedError
from lakesync.relay.publisher import Publisher
from lakesync.relay.topics import TopicManager
from tests.kafkakit import read_records


def test_flush_raises_broker_error_when_the_broker_is_unreachable() -> None:
    # The record's own delivery timeout (1.5 s) is far inside the flush timeout, so the flush must end on the
    # record's failed delivery report, not by running out its own time ("not acknowledged within 60 s").
    publisher = Publisher({"bootstrap.servers": f"127.0.0.1:{free_port()}", "message.timeout.ms": "1500", "log_level": "0"},
                          flush_timeout_seconds=60)
    publisher.send("nowhere.t", b'{"id":1}', b"{}", [])
    with pytest.raises(BrokerError) as failed:
        publisher.flush()
    assert failed.value.message.startswith("the broker refused 1 change events"), failed.value.message
    assert "timed out" in failed.value.message and "progress was not advanced" in failed.value.message
    assert failed.value.hint


def _topics(broker, count: int = 2) -> list[str]:
    names = [f"relay-broker-{uuid.uuid4().hex[:8]}-{n}" for n in range(count)]
    manager = TopicManager({"bootstrap.servers": broker.bootstrap})
    for name in names:
        manager.ensure(name, partitions=1)
    return names


@pytest.mark.integration
def test_plain_commit_returns_once_the_broker_acknowledged_everything(broker) -> None:
    data, progress = _topics(broker)
    publisher = Publisher({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        publisher.send(data, str(i).encode(), b"{}", [("lakesync.pos", b"x")])
    publisher.commit((progress, b"relay", b"{}"))
    assert publisher.sent == 101
    assert len(read_records(broker.bootstrap, data)) == 100
    assert len(read_records(broker.bootstrap, progress)) == 1


@pytest.mark.integration
def test_a_transaction_shows_its_records_and_progress_together_and_an_aborted_one_nothing(broker) -> None:
    data, progress = _topics(broker)
    publisher = Publisher({"bootstrap.servers": broker.bootstrap}, transactional_id=f"t-{uuid.uuid4().hex}")
    for i in range(50):
        publisher.send(data, str(i).encode(), b"committed", [])
    publisher.commit((progress, b"relay", b"50"))
    for i in range(30):
        publisher.send(data, str(i).encode(), b"aborted", [])
    publisher._producer.flush(10)  # on the broker, in the open transaction
    assert len(read_records(broker.bootstrap, data, isolation="read_uncommitted")) == 80
    publisher.abort()
    publisher.close()

    visible = read_records(broker.bootstrap, data)
    assert [r.value() for r in visible] == [b"committed"] * 50
    assert [r.value() for r in read_records(broker.bootstrap, progress)] == [b"50"]


@pytest.mark.integration
def test_a_second_publisher_with_the_same_transactional_id_fences_the_first(broker) -> None:
    data, progress = _topics(broker)
    same_id = f"t-{uuid.uuid4().hex}"
    older = Publisher({"bootstrap.servers": broker.bootstrap}, transactional_id=same_id)
    older.send(data, b"1", b"from the older relay", [])
    newer = Publisher({"bootstrap.servers": broker.bootstrap}, transactional_id=same_id)
    newer.send(data, b"1", b"from the newer relay", [])
    newer.commit((progress, b"relay", b"newer"))
    with pytest.raises(RelayFencedError) as fenced:
        older.send(data, b"2", b"still the older relay", [])
        older.commit((progress, b"relay", b"older"))
    assert "another relay took over" in fenced.value.message and same_id in fenced.value.message
    assert _committed_values(broker.bootstrap, data, [b"from the newer relay"]) == [b"from the newer relay"]
    assert _committed_values(broker.bootstrap, progress, [b"newer"]) == [b"newer"]


def _committed_values(bootstrap: str, topic: str, expected: list[bytes], *, timeout: float = 60.0) -> list[bytes]:
    """What a read_committed reader sees on ``topic``, read again until it is ``expected`` or ``timeout`` passes.

    ``commit`` returns once the transaction coordinator has decided; the commit markers that make the records
    visible are written to the partitions just after, so a read right away may not see them yet."""
    deadline = time.monotonic() + timeout
    while (values := [r.value() for r in read_records(bootstrap, topic)]) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    return values
