"""Reading topics in tests, independently of lakesync's own offset code: every record up to the log's end.

A plain confluent-kafka consumer assigned to every partition from the beginning, read until each partition
reports its end (``enable.partition.eof``). ``read_committed`` by default, as every lakesync reader reads;
``read_uncommitted`` shows what open or aborted transactions hold too (the fault tests use it to prove a
transaction was open when a process was killed).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


def read_records(bootstrap: str, topic: str, *, isolation: str = "read_committed", timeout: float = 30.0
                 ) -> list[Any]:
    """Every record of ``topic`` (all partitions, in partition then offset order) visible at ``isolation``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lakesync-tests", "enable.auto.commit": "false",
                         "enable.partition.eof": "true", "isolation.level": isolation})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: dict[int, list[Any]] = {p: [] for p in partitions}
        pending, deadline = set(partitions), time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, f"{topic}: partitions {sorted(pending)} never reached their end"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, str(error)
                pending.discard(message.partition())
                continue
            records[message.partition()].append(message)
    finally:
        consumer.close()
    return [record for p in sorted(records) for record in records[p]]
