"""A broker lost right after the relay created a topic is an outage the relay rides out, not a crash."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from lakesync.core.errors import BrokerUnavailableError
from lakesync.relay.topics import TopicManager


class _AdminLostAfterCreate:
    """Lists no topics, creates the topic, then loses the broker (the first metadata read fails)."""

    def __init__(self) -> None:
        self.lists = 0

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> SimpleNamespace:
        self.lists += 1
        if self.lists > 1:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: broker transport failure"))
        return SimpleNamespace(topics={})

    def create_topics(self, topics: list, request_timeout: float = 0) -> dict[str, Future]:
        done: Future = Future()
        done.set_result(None)
        return {topic.topic: done for topic in topics}


def test_a_broker_lost_while_waiting_for_a_created_topics_metadata_is_an_outage():
    manager = TopicManager({"bootstrap.servers": "127.0.0.1:1"}, timeout=2)
    manager._client = _AdminLostAfterCreate()  # type: ignore[assignment]

    with pytest.raises(BrokerUnavailableError, match="cannot read the metadata of topic t1, just created"):
        manager.ensure("t1", partitions=1)
