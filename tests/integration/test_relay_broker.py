"""Broker trouble: unacknowledged data is reported as a clear BrokerError, never passed over silently."""

from __future__ import annotations

import pytest
from lakesync_devkit.dev.processes import free_port

from lakesync.core.errors import BrokerError
from lakesync.relay.publisher import Publisher


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


@pytest.mark.integration
def test_flush_returns_once_the_broker_acknowledged_everything(broker) -> None:
    publisher = Publisher({"bootstrap.servers": broker.bootstrap})
    topic = f"relay-ack-{free_port()}"
    publisher.ensure_topic(topic, partitions=1)
    for i in range(100):
        publisher.send(topic, str(i).encode(), b"{}", [("lakesync.pos", b"x")])
    publisher.flush()
    assert publisher.sent == 100
