"""Producing change events to Kafka: idempotent, ``acks=all``, keyed, and never silently lossy.

The publisher owns the confluent-kafka producer. Delivery failures are collected from the delivery
reports; :meth:`Publisher.flush` waits until every record sent so far is acknowledged and raises
:class:`BrokerError` if any was not, which is what lets the relay store its progress only behind data
the broker has. librdkafka retries with backoff on its own for up to ``message.timeout.ms``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lakesync.core.errors import BrokerError

log = logging.getLogger(__name__)

#: Settings the relay's guarantees depend on; a pipeline's ``kafka.settings`` cannot weaken them.
PRODUCER_REQUIRED: dict[str, object] = {
    "enable.idempotence": "true",
    "acks": "all",
    # Java clients' default partitioner: the same key lands on the same partition as with Kafka Connect.
    "partitioner": "murmur2_random",
    # Failures still reach _on_delivery; successes need no Python callback (a large share of the CPU).
    "delivery.report.only.error": True,
}
PRODUCER_DEFAULTS = {
    "linger.ms": "20",
    "batch.num.messages": "10000",
    "compression.type": "lz4",
    "message.timeout.ms": "120000",
    "retry.backoff.ms": "200",
    "retry.backoff.max.ms": "5000",
    "queue.buffering.max.kbytes": "262144",
}


class Publisher:
    """Sends records and tells, on :meth:`flush`, whether all of them reached the broker."""

    def __init__(self, client_config: Mapping[str, str], *, flush_timeout_seconds: float = 130.0) -> None:
        self._client_config = dict(client_config)
        config = {**PRODUCER_DEFAULTS, **self._client_config, **PRODUCER_REQUIRED}
        self._producer = Producer(config)
        self._flush_timeout = flush_timeout_seconds
        self._errors: list[str] = []
        self._known_topics: set[str] = set()
        self.sent = 0

    # -- topics ---------------------------------------------------------------------------------------
    def ensure_topic(self, topic: str, *, partitions: int, config: Mapping[str, str] | None = None,
                     timeout: float = 30.0) -> None:
        """Create ``topic`` if the broker does not have it (an existing topic is left as it is)."""
        if topic in self._known_topics:
            return
        admin = AdminClient({k: v for k, v in self._client_config.items() if not k.startswith("linger")})
        try:
            existing = admin.list_topics(timeout=timeout).topics
        except KafkaException as exc:
            raise BrokerError(f"cannot list topics on the broker: {exc}",
                              hint="check that the broker in the pipeline's kafka connection is up") from exc
        if topic not in existing:
            futures = admin.create_topics(
                [NewTopic(topic, num_partitions=partitions, replication_factor=-1, config=dict(config or {}))],
                request_timeout=timeout,
            )
            try:
                futures[topic].result(timeout)
                log.info("created topic %s (%d partitions)", topic, partitions)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BrokerError(f"cannot create topic {topic}: {exc}") from exc
            self._wait_for_metadata(admin, topic, timeout)
        self._known_topics.add(topic)

    @staticmethod
    def _wait_for_metadata(admin: AdminClient, topic: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            metadata = admin.list_topics(topic, timeout=timeout).topics.get(topic)
            if metadata is not None and metadata.error is None and metadata.partitions:
                return
            time.sleep(0.1)
        raise BrokerError(f"topic {topic} was created but does not show up in the broker's metadata")

    # -- records --------------------------------------------------------------------------------------
    def _on_delivery(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self._errors.append(str(error))

    def send(self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        """Queue one record; blocks (serving delivery reports) while the local queue is full."""
        while True:
            try:
                self._producer.produce(topic, value, key, headers=list(headers), on_delivery=self._on_delivery)
                break
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise self._refused(topic, len(key) + len(value), exc) from exc
        self.sent += 1
        if self.sent & 0x3FF == 0:
            self._producer.poll(0)

    def _refused(self, topic: str, size: int, exc: KafkaException) -> BrokerError:
        error = exc.args[0]
        if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            limit = self._client_config.get("message.max.bytes", "1000000 (librdkafka's default)")
            return BrokerError(
                f"a change event for topic {topic} is {size / 1e6:.1f} MB, more than the producer's "
                f"message.max.bytes {limit}; progress was not advanced past it",
                hint="raise kafka.settings message.max.bytes in the pipeline, and the broker's message.max.bytes "
                "/ the topic's max.message.bytes (and the consumers' fetch.max.bytes) to match; docs/configuration.md",
            )
        return BrokerError(f"the producer refused a change event for topic {topic}: {error.str()}",
                           hint="fix the broker or topic problem named above and restart the relay")

    def flush(self) -> None:
        """Wait for every queued record to be acknowledged; :class:`BrokerError` when one was not."""
        remaining = self._producer.flush(self._flush_timeout)
        if remaining:
            raise BrokerError(
                f"{remaining} change events were not acknowledged by the broker within "
                f"{self._flush_timeout:.0f} s; the relay's progress was not advanced past them",
                hint="check that the broker is up and reachable; restart the relay, it resumes from its last "
                "acknowledged transaction (re-sent events are harmless)",
            )
        if self._errors:
            first, count = self._errors[0], len(self._errors)
            self._errors.clear()
            raise BrokerError(
                f"the broker refused {count} change events (first error: {first}); progress was not advanced",
                hint="fix the broker or topic problem named above and restart the relay",
            )

    def close(self) -> None:
        self._producer.flush(5)
