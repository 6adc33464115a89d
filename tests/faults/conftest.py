"""Fixtures of the fault-injection suite."""

from __future__ import annotations

import pytest
from lakesync_devkit.dev.broker import Broker
from lakesync_devkit.dev.processes import free_port


@pytest.fixture
def own_broker(tmp_path_factory):
    """An Apache Kafka node of the test's own, to kill, wipe or restart (the session's broker must stay up)."""
    broker = Broker(home=tmp_path_factory.mktemp("own-broker"), port=free_port(), controller_port=free_port())
    broker.start()
    yield broker
    broker.stop()
