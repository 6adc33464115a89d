"""Offset tools against the real broker (Apache Kafka): log ends under transactions, seeks by position."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lakesync.core.positions import SourcePosition
from lakesync.kafka.offsets import (
    end_offsets,
    first_offset_at_or_after,
    first_offsets_at_or_after,
    list_partitions,
    offset_consumer,
)

pytestmark = pytest.mark.integration


def create_topic(bootstrap: str, partitions: int, *, prefix: str = "offsets") -> str:
    name = f"{prefix}.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=10)
    return name


def position_key(i: int) -> str:
    return SourcePosition("binlog.000001", 1000 + 10 * i).key()


def produce(bootstrap: str, topic: str, positions: list[int], *, partition: int = 0, flush_every: int = 100) -> None:
    """Messages carrying ``lakesync.pos`` headers, flushed in several record batches like the relay's."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n, pos in enumerate(positions, start=1):
        producer.produce(topic, value=b"x", partition=partition, headers=[("lakesync.pos", position_key(pos))])
        if n % flush_every == 0:
            producer.flush()
    producer.flush()


class FetchCounting:
    """A real consumer that counts how often it is pointed at new offsets (one fetch each)."""

    def __init__(self, inner) -> None:
        self.inner, self.assigns = inner, 0

    def assign(self, partitions):
        self.assigns += 1
        return self.inner.assign(partitions)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def consumer(broker):
    made = offset_consumer({"bootstrap.servers": broker.bootstrap})
    yield made
    made.close()


def test_end_offset_is_the_log_end_after_batched_produces(broker, consumer):
    topic = create_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, list(range(300)), partition=0)
    produce(broker.bootstrap, topic, list(range(37)), partition=1, flush_every=10)

    assert end_offsets(consumer, [(topic, 0), (topic, 1)]) == {(topic, 0): 300, (topic, 1): 37}


def test_end_offset_of_an_empty_partition_is_zero(broker, consumer):
    topic = create_topic(broker.bootstrap, 1)
    assert end_offsets(consumer, [(topic, 0)]) == {(topic, 0): 0}


def test_end_offset_stops_before_an_open_transaction_and_counts_its_commit_marker(broker, consumer):
    topic = create_topic(broker.bootstrap, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for _ in range(10):
        producer.produce(topic, value=b"x")
    producer.flush(10)
    assert end_offsets(consumer, [(topic, 0)]) == {(topic, 0): 0}, "an open transaction is not readable yet"
    producer.commit_transaction(30)
    # The coordinator writes the commit marker just after it answers the commit: the end moves then. Ten
    # records and the marker: markers are offsets too (what a stream's lag counts against).
    deadline = time.monotonic() + 10
    while end_offsets(consumer, [(topic, 0)]) != {(topic, 0): 11}:
        assert time.monotonic() < deadline, f"the end stayed at {end_offsets(consumer, [(topic, 0)])}"
        time.sleep(0.05)


def test_partitions_are_listed_by_topic_names_or_by_pattern(broker, consumer):
    prefix = f"lp{uuid.uuid4().hex[:6]}"
    a = create_topic(broker.bootstrap, 2, prefix=prefix)
    b = create_topic(broker.bootstrap, 1, prefix=prefix)

    assert list_partitions(consumer, topics=[a, f"{prefix}.missing"]) == [(a, 0), (a, 1)]
    assert list_partitions(consumer, pattern=rf"{prefix}\..*") == sorted([(a, 0), (a, 1), (b, 0)])
    assert list_partitions(consumer, pattern=prefix) == []  # a pattern must match the whole name


@pytest.fixture(scope="module")
def positioned_topic(broker):
    """Partition 0: 1000 messages at positions 0, 2, 4, ...; partition 1: runs of equal positions; 2: empty."""
    topic = create_topic(broker.bootstrap, 3)
    produce(broker.bootstrap, topic, [2 * i for i in range(1000)], partition=0, flush_every=128)
    produce(broker.bootstrap, topic, [i // 3 for i in range(30)], partition=1, flush_every=7)
    return topic


@pytest.mark.parametrize(("target", "expected"), [
    (2 * 437, 437),   # an exact position
    (2 * 437 + 1, 438),  # between two messages: the next one
    (0, 0),           # the very first
    (-1, 0),          # before everything
    (2 * 999, 999),   # the very last
    (2 * 999 + 1, 1000),  # after everything: the log end
])
def test_first_offset_at_or_after_finds_the_first_message_at_the_position(
        broker, consumer, positioned_topic, target, expected):
    key = position_key(target) if target >= 0 else "0"
    assert first_offset_at_or_after(consumer, positioned_topic, 0, key) == expected


def test_first_offset_at_or_after_lands_on_the_first_of_equal_positions(consumer, positioned_topic):
    assert first_offset_at_or_after(consumer, positioned_topic, 1, position_key(4)) == 12
    assert first_offset_at_or_after(consumer, positioned_topic, 1, position_key(10)) == 30


def test_first_offset_at_or_after_on_an_empty_partition_is_zero(consumer, positioned_topic):
    assert first_offset_at_or_after(consumer, positioned_topic, 2, position_key(5)) == 0


def test_first_offsets_at_or_after_searches_all_partitions_together(consumer, positioned_topic):
    counting = FetchCounting(consumer)
    found = first_offsets_at_or_after(counting, [(positioned_topic, p) for p in range(3)], position_key(8))
    assert found == {(positioned_topic, 0): 4, (positioned_topic, 1): 24, (positioned_topic, 2): 0}
    assert counting.assigns == 1, "the partitions are read together, in one assignment"


@pytest.mark.parametrize(("positions", "target", "expected"), [
    # a relay rewound to an earlier position: 0..99, then 50..149 again
    ([*range(100), *range(50, 150)], 60, 60),
    ([*range(100), *range(50, 150)], 120, 170),
    # a Debezium restart re-sends the tail: 0..599, then 590..999 (a bisection would probe past 600 and miss
    # the first run's 500s for a target of 500)
    ([*range(600), *range(590, 1000)], 500, 500),
    ([*range(600), *range(590, 1000)], 800, 810),
    # older positions after newer ones: the first run holds the target; past every position, the log end
    ([*range(10, 20), *range(0, 5)], 15, 5),
    ([*range(10, 20), *range(0, 5)], 25, 15),
])
def test_first_offset_at_or_after_is_exact_when_positions_go_back_in_a_partition(
        broker, consumer, positions, target, expected):
    topic = create_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, topic, positions, flush_every=64)
    assert first_offset_at_or_after(consumer, topic, 0, position_key(target)) == expected
    # the independent check: every message at or after the target sits at or after the offset found
    assert all(offset >= expected for offset, pos in enumerate(positions) if pos >= target)
