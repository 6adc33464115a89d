"""The relay's durable progress, kept the Kafka Connect way: a compacted offsets topic.

Topic ``<prefix>._lakesync_offsets`` (one partition, ``cleanup.policy=compact``); record key = the relay id
(``<pipeline>/<server id>``), value = JSON::

    {"version": 1, "position": {"file", "offset", "row", "gtid"},
     "covered_from": {...}, "updated_ms": 1700000000000, "stopped": false}

``position`` is a transaction end: every change before it is published. The relay writes this record in the
same Kafka transaction as the changes up to it (:meth:`lakesync.relay.publisher.Publisher.commit`), and it
is read back with ``read_committed``, so the progress a restarted relay resumes from is never ahead of the
data (resuming from an aborted progress record would skip changes, which no position rule could repair).
``covered_from`` is the first position this relay ever published from; the stream's gap check needs the
relay's coverage to reach back to the full load's position (:func:`covered_range`). ``updated_ms`` moves on
every commit and on heartbeats while the source is quiet; ``stopped`` marks the record of a clean stop. The
last record for a key wins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Message

from lakesync.core.config import Pipeline
from lakesync.core.connections import kafka_client_config
from lakesync.core.errors import BrokerError
from lakesync.core.positions import SourcePosition
from lakesync.kafka.offsets import list_partitions, offset_consumer, read_tail, read_to_end
from lakesync.relay.publisher import Publisher
from lakesync.relay.topics import COMPACTED, TopicManager

OFFSETS_TOPIC_TABLE = "_lakesync_offsets"
FORMAT_VERSION = 1


def offsets_topic(pipeline: Pipeline) -> str:
    return f"{pipeline.kafka.topic_prefix}.{OFFSETS_TOPIC_TABLE}"


def relay_id(pipeline: Pipeline) -> str:
    return f"{pipeline.name}/{pipeline.source.server_id}"


@dataclass(frozen=True)
class RelayProgress:
    """Where the relay has published everything up to (``position``), and since when (``covered_from``)."""

    position: SourcePosition
    covered_from: SourcePosition
    updated_ms: int = 0
    #: the relay's last record before a clean stop (no heartbeat follows until it starts again)
    stopped: bool = False

    def to_json(self) -> bytes:
        return json.dumps({
            "version": FORMAT_VERSION,
            "position": SourcePosition.to_json(self.position),
            "covered_from": SourcePosition.to_json(self.covered_from),
            "updated_ms": self.updated_ms,
            "stopped": self.stopped,
        }).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> RelayProgress:
        document = json.loads(raw)
        return cls(SourcePosition.from_json(document["position"]), SourcePosition.from_json(document["covered_from"]),
                   int(document.get("updated_ms") or 0), bool(document.get("stopped")))


class ProgressStore:
    """Reads and writes one relay's progress in the offsets topic."""

    def __init__(self, client_config: Mapping[str, str], *, topic: str, relay: str) -> None:
        self.client_config = dict(client_config)
        self.topic = topic
        self.relay = relay

    @classmethod
    def for_pipeline(cls, pipeline: Pipeline) -> ProgressStore:
        return cls(kafka_client_config(pipeline), topic=offsets_topic(pipeline), relay=relay_id(pipeline))

    def ensure_topic(self, topics: TopicManager) -> None:
        topics.ensure(self.topic, partitions=1, config=COMPACTED)

    def record(self, progress: RelayProgress) -> tuple[str, bytes, bytes]:
        """The progress record (topic, key, value) to commit with the changes up to ``progress.position``."""
        return self.topic, self.relay.encode(), progress.to_json()

    def save(self, progress: RelayProgress, publisher: Publisher) -> None:
        """Commit ``progress`` with whatever ``publisher`` sent since its last commit."""
        publisher.commit(self.record(progress))

    def load(self, *, timeout: float = 10.0) -> RelayProgress | None:
        """The last progress stored for this relay, or None when it never stored any.

        Reads the whole (compacted) topic with ``read_committed`` from the start to the last stable offset
        (the partition-EOF event marks it); the last committed record for the key wins.
        """
        consumer = offset_consumer(self.client_config)
        latest: list[RelayProgress] = []
        key = self.relay.encode()

        def keep(message: Message) -> None:
            value = message.value()
            if message.key() == key and value:
                latest.append(RelayProgress.from_json(value))

        try:
            read_to_end(consumer, list_partitions(consumer, topics=[self.topic], timeout=timeout), keep,
                        timeout=timeout)
        except BrokerError as exc:
            raise type(exc)(f"cannot read the relay offsets topic {self.topic}: {exc.message}",
                            hint="check that the broker is up") from exc
        finally:
            consumer.close()
        return latest[-1] if latest else None


def settled_position(store: ProgressStore, *, timeout: float = 5.0, window: int = 500) -> SourcePosition | None:
    """A position before which every change the relay published is below each partition's last stable offset
    for a ``read_committed`` reader: the position of the progress record *before* the newest one (read from the
    offsets topic's last ``window`` offsets). The newest transaction's commit markers are written to its
    partitions one by one after it commits, so a reader may see its progress record before its changes;
    Kafka lets a producer add partitions to a transaction only once its previous one is complete, so the
    one before it is complete everywhere. None when fewer than two records are in the window."""
    consumer = offset_consumer(store.client_config)
    records: list[RelayProgress] = []
    key = store.relay.encode()

    def keep(message: Message) -> None:
        value = message.value()
        if message.key() == key and value:
            records.append(RelayProgress.from_json(value))

    try:
        read_tail(consumer, list_partitions(consumer, topics=[store.topic], timeout=timeout), window, keep,
                  timeout=timeout)
    finally:
        consumer.close()
    return records[-2].position if len(records) >= 2 else None


def covered_range(pipeline: Pipeline) -> tuple[str, str] | None:
    """``(from_key, to_key)``: the positions (:meth:`SourcePosition.key`) the relay has published.

    ``from_key`` is where the relay first started, ``to_key`` its last acknowledged transaction end; None
    when the relay has never stored progress. The stream's gap check compares the full load's position
    with ``from_key``: a load position before it means changes in between were never published.
    """
    progress = ProgressStore.for_pipeline(pipeline).load()
    if progress is None:
        return None
    return progress.covered_from.key(), progress.position.key()
