"""Timing a producer by the broker's clock: topics with ``LogAppendTime``, and what a stretch of one holds.

Why: the relay and Debezium run in different processes with different clocks and start-ups; the one clock
both write against is the broker's. A topic created with ``message.timestamp.type=LogAppendTime`` stamps each
batch with the time the broker appended it, so "first record to last record" of a topic is a producer's
throughput measured the same way for both, with process start-up outside it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lakesync.core.errors import BrokerError

LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def create_log_append_topic(bootstrap: str, topic: str) -> None:
    """One partition, stamped by the broker; an existing topic is kept (its config is checked when read)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer is in
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1, config=LOG_APPEND_TIME)], request_timeout=30)
    try:
        futures[topic].result(30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise BrokerError(f"cannot create the benchmark topic {topic}: {exc}") from exc


def end_offset(bootstrap: str, topic: str) -> int:
    """The high watermark of the topic's one partition (0 when the topic does not exist yet)."""
    consumer = _consumer(bootstrap, "read_uncommitted")
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    except KafkaException:
        return 0
    finally:
        consumer.close()


def wait_for_offset(bootstrap: str, topic: str, target: int, *, timeout: float,
                    check: Callable[[], None] = lambda: None, what: str = "the producer") -> None:
    """Poll the high watermark until it reaches ``target``; ``check`` runs between polls (it raises when the
    producer has failed, so a dead task ends the wait at once, with its reason)."""
    deadline = time.monotonic() + timeout
    consumer = _consumer(bootstrap, "read_uncommitted")
    try:
        while True:
            try:
                high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
            except KafkaException:
                high = 0
            if high >= target:
                return
            if time.monotonic() > deadline:
                raise BrokerError(f"{what} wrote {topic} only up to offset {high} of {target} within {timeout:.0f} s")
            check()
            time.sleep(0.25)
    finally:
        consumer.close()


@dataclass
class TopicWindow:
    """What a topic holds from one offset to its end, as a ``read_committed`` reader sees it."""

    records: int = 0
    #: records with a value (a Debezium tombstone has none)
    changes: int = 0
    first_ms: int = 0
    last_ms: int = 0
    key_bytes: int = 0
    value_bytes: int = 0
    header_bytes: int = 0

    @property
    def seconds(self) -> float:
        return (self.last_ms - self.first_ms) / 1000

    def changes_per_s(self) -> float:
        return self.changes / self.seconds if self.seconds > 0 else float("inf")

    def bytes_per_change(self) -> float:
        """Key and value bytes written per change (tombstones' keys included: they are written too)."""
        return (self.key_bytes + self.value_bytes) / self.changes if self.changes else 0.0

    def header_bytes_per_change(self) -> float:
        return self.header_bytes / self.changes if self.changes else 0.0


def read_window(bootstrap: str, topic: str, start: int) -> TopicWindow:
    """Every record of ``topic`` from offset ``start`` to the end: counts, sizes, first and last append times."""
    consumer = _consumer(bootstrap, "read_committed")
    window = TopicWindow()
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        while True:
            batch = consumer.consume(1_000, timeout=5)
            if not batch:
                raise BrokerError(f"reading {topic} from offset {start}: no end of partition within 5 s")
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return window
                    raise BrokerError(f"reading {topic}: {error}")
                kind, stamp = message.timestamp()
                if kind != TIMESTAMP_LOG_APPEND_TIME:
                    raise BrokerError(f"{topic} is not stamped by the broker (timestamp type {kind})",
                                      hint="create it with message.timestamp.type=LogAppendTime before it is written")
                key, value = message.key() or b"", message.value()
                window.records += 1
                window.first_ms = window.first_ms or stamp
                window.last_ms = stamp
                window.key_bytes += len(key)
                if value is not None:
                    window.changes += 1
                    window.value_bytes += len(value)
                window.header_bytes += _header_bytes(message.headers() or [])
    finally:
        consumer.close()


def _header_bytes(headers: Any) -> int:
    """Bytes of a record's header names and values (confluent-kafka gives them as a list of pairs)."""
    return sum(len(name) + len(data or b"") for name, data in headers)


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"lakesync-bench-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": "false", "enable.partition.eof": "true", "isolation.level": isolation,
                     "max.partition.fetch.bytes": str(8 << 20), "queued.max.messages.kbytes": str(32 << 10)})
