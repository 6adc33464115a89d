"""The relay's topics: created on first use, with the pipeline's retention, and checked on every start.

A table topic is created with ``kafka.partitions`` partitions and ``retention.ms`` from the pipeline's
``kafka.retention_hours`` (None: the broker's default, which is what a cluster admin may prefer); an existing
topic whose retention differs from the pipeline's is altered to match, once per relay run, so a changed
setting takes effect without touching the broker by hand. The offsets topic is compacted and kept forever.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from lakesync.core.errors import BrokerError, BrokerUnavailableError

log = logging.getLogger(__name__)

#: Error codes of a broker that is not there or not answering (the relay waits those out).
_UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                          KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_CONTROLLER, KafkaError._WAIT_COORD})
#: What to check when the broker does not answer an admin call.
_BROKER_DOWN_HINT = "check that the broker in the pipeline's kafka connection is up"
#: The settings of a topic only lakesync writes: compacted, never deleted by time.
#: the relay's offsets topic: compacted, with hourly segments so compaction (which skips the active segment)
#: keeps what a reader of the whole topic reads small although the relay commits every half second
COMPACTED = {"cleanup.policy": "compact", "retention.ms": "-1", "segment.ms": "3600000"}


def retention_config(retention_hours: float | None) -> dict[str, str]:
    """The topic settings of the pipeline's ``kafka.retention_hours`` (none when it is left to the broker)."""
    return {} if retention_hours is None else {"retention.ms": str(int(retention_hours * 3_600_000))}


class TopicManager:
    """Creates and checks topics with one admin client; remembers which topics it has seen this run."""

    def __init__(self, client_config: Mapping[str, str], *, timeout: float = 30.0) -> None:
        self._config: dict[str, str | int | float | bool] = {
            k: v for k, v in client_config.items() if not k.startswith(("linger", "transaction", "enable.idempotence"))}
        self._client: AdminClient | None = None
        self._timeout = timeout
        self._ready: set[str] = set()

    @property
    def _admin(self) -> AdminClient:
        """The admin client, made on first use (a relay that never gets to publishing never needs one)."""
        if self._client is None:
            try:
                self._client = AdminClient(self._config)
            except KafkaException as exc:
                raise BrokerError(f"cannot create a Kafka admin client: {exc.args[0].str()}",
                                  hint="check the pipeline's kafka settings") from exc
        return self._client

    def ensure(self, topic: str, *, partitions: int, config: Mapping[str, str] | None = None) -> None:
        """Create ``topic`` when the broker lacks it, else bring the given settings to the given values."""
        if topic in self._ready:
            return
        wanted = dict(config or {})
        try:
            existing = self._admin.list_topics(timeout=self._timeout).topics
        except KafkaException as exc:
            raise BrokerUnavailableError(f"cannot list topics on the broker: {exc}",
                                         hint=_BROKER_DOWN_HINT) from exc
        if topic not in existing:
            self._create(topic, partitions, wanted)
        elif wanted:
            self._align(topic, wanted)
        self._ready.add(topic)

    def _create(self, topic: str, partitions: int, config: dict[str, str]) -> None:
        futures = self._admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=-1, config=config)],
            request_timeout=self._timeout)
        try:
            futures[topic].result(self._timeout)
            log.info("created topic %s (%d partitions, %s)", topic, partitions, config or "broker defaults")
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                error = BrokerUnavailableError if exc.args[0].code() in _UNREACHABLE else BrokerError
                raise error(f"cannot create topic {topic}: {exc}") from exc
        self._wait_for_metadata(topic)

    def _align(self, topic: str, wanted: dict[str, str]) -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            current = self._admin.describe_configs([resource])[resource].result(self._timeout)
        except KafkaException as exc:
            error = BrokerUnavailableError if exc.args[0].code() in _UNREACHABLE else BrokerError
            raise error(f"cannot read the settings of topic {topic}: {exc}") from exc
        changes = {name: value for name, value in wanted.items()
                   if name not in current or current[name].value != value}
        if not changes:
            return
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in changes.items()])
        try:
            self._admin.incremental_alter_configs([resource])[resource].result(self._timeout)
        except KafkaException as exc:
            raise BrokerError(f"cannot change the settings {changes} of topic {topic}: {exc}",
                              hint="let the relay's user alter topic configs, or set kafka.retention_hours to "
                                   "null to leave retention to the broker") from exc
        log.info("topic %s: settings changed to %s (the pipeline's)", topic, changes)

    def truncate(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """Delete every record of ``topics`` (those that exist): per partition, the log's new start offset."""
        try:
            existing = self._admin.list_topics(timeout=self._timeout).topics
        except KafkaException as exc:
            raise BrokerUnavailableError(f"cannot list topics on the broker: {exc}") from exc
        partitions = [TopicPartition(topic, partition, OFFSET_END) for topic in topics if topic in existing
                      for partition in existing[topic].partitions]
        if not partitions:
            return {}
        starts: dict[tuple[str, int], int] = {}
        for tp, future in self._admin.delete_records(partitions, request_timeout=self._timeout).items():
            try:
                starts[(tp.topic, tp.partition)] = future.result(self._timeout).low_watermark
            except KafkaException as exc:
                raise BrokerError(f"cannot delete the records of {tp.topic}/{tp.partition}: {exc}",
                                  hint="let lakesync's Kafka user delete records (DeleteRecords on the topics)"
                                  ) from exc
        return starts

    def _wait_for_metadata(self, topic: str) -> None:
        """Until a created topic shows in the metadata. A broker lost meanwhile is an outage the relay rides out
        (it creates the topic again, or finds it, once the broker is back), not a crash."""
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            try:
                metadata = self._admin.list_topics(topic, timeout=self._timeout).topics.get(topic)
            except KafkaException as exc:
                raise BrokerUnavailableError(f"cannot read the metadata of topic {topic}, just created: {exc}",
                                             hint=_BROKER_DOWN_HINT
                                             ) from exc
            if metadata is not None and metadata.error is None and metadata.partitions:
                return
            time.sleep(0.1)
        raise BrokerUnavailableError(f"topic {topic} was created but does not show up in the broker's metadata")
