"""Producing change events to Kafka: exactly once with transactions, or idempotent ``acks=all`` without.

The publisher owns the confluent-kafka producer. The relay sends records with :meth:`Publisher.send` and
closes a unit of work with :meth:`Publisher.commit`, which carries the relay's progress record:

* **transactional** (the default, ``kafka.transactions: true``): the data records and the progress record go
  into one Kafka transaction, committed together, as Kafka Connect's exactly-once source support does
  (KIP-618). A ``read_committed`` reader sees all of a unit or none of it, and the progress a restarted relay
  reads back always matches what was published. ``transactional.id`` is ``<prefix>.lakesync-relay.<pipeline>.
  <server id>``: a new relay for the same pipeline fences the older one, which stops with
  :class:`RelayFencedError`; every other failure is a :class:`BrokerUnavailableError` after which the relay
  starts over from its committed progress (the open transaction is aborted, by us or by the broker);
* **plain** (``kafka.transactions: false``, for clusters that refuse transactions): every record sent so far is
  flushed and acknowledged before the progress record is written (at-least-once; the sink's position rule
  makes the result exact all the same).

Commit durations are kept (:attr:`Publisher.commit_seconds`) for the benchmark's p50/p99.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from lakesync.core.errors import BrokerError, BrokerUnavailableError, RelayFencedError

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
    # the broker aborts a transaction open longer than this; the relay splits source transactions that
    # would get near it (see lakesync.relay.worker)
    "transaction.timeout.ms": "60000",
}
#: Error codes that mean another producer with our transactional.id took over.
_FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
#: Delivery failures of a record too big for the producer, the topic or the log segment.
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
#: Delivery failures no retry can fix: the record or the relay's rights are the problem, not the broker's health.
_REFUSED = frozenset({KafkaError.INVALID_RECORD, KafkaError.INVALID_MSG, KafkaError.INVALID_MSG_SIZE, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                      KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                      KafkaError.TOPIC_EXCEPTION, KafkaError.POLICY_VIOLATION, KafkaError.INVALID_REQUIRED_ACKS})
#: How long transactional calls (init, commit, abort) may take before they count as a failure.
TRANSACTION_CALL_TIMEOUT_S = 60.0


def transactional_id(topic_prefix: str, pipeline: str, server_id: int) -> str:
    """The relay's ``transactional.id``: unique per cluster as long as prefixes, pipelines and server ids are."""
    return f"{topic_prefix}.lakesync-relay.{pipeline}.{server_id}"


class Publisher:
    """Sends records; :meth:`commit` makes everything sent since the last commit durable, with a progress record."""

    def __init__(self, client_config: Mapping[str, str], *, transactional_id: str | None = None,
                 flush_timeout_seconds: float = 130.0) -> None:
        self._client_config = dict(client_config)
        config = {**PRODUCER_DEFAULTS, **self._client_config, **PRODUCER_REQUIRED}
        if transactional_id:
            config["transactional.id"] = transactional_id
            # a record may not outlive the transaction it belongs to (librdkafka refuses the config otherwise)
            config["message.timeout.ms"] = str(min(int(str(config["message.timeout.ms"])),
                                                   int(str(config["transaction.timeout.ms"]))))
        self.transactional_id = transactional_id
        self.transaction_timeout_s = int(str(config["transaction.timeout.ms"])) / 1000.0
        try:
            self._producer = Producer(config)
        except KafkaException as exc:
            raise BrokerError(f"cannot create the relay's Kafka producer: {exc.args[0].str()}",
                              hint="check the pipeline's kafka.settings") from exc
        self._flush_timeout = flush_timeout_seconds
        #: delivery failures since the last commit, with their records
        self._errors: list[tuple[KafkaError, Message]] = []
        self._in_transaction = False
        self.sent = 0
        #: how long each commit took (transactional: commit_transaction; plain: the flushes), seconds
        self.commit_seconds: list[float] = []
        if transactional_id:
            self._call("start the relay's Kafka transactions (init_transactions)", self._producer.init_transactions,
                       TRANSACTION_CALL_TIMEOUT_S)

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    # -- errors ---------------------------------------------------------------------------------------
    def _fenced(self, error: KafkaError) -> bool:
        """Whether ``error`` means a newer producer took our transactional.id. librdkafka says so outright only
        on the call that met the fencing; a later ``produce`` fails with a bare "Local: Fatal error", and the
        fencing shows in the error of the next transactional call, so the open transaction is aborted to ask it
        (the transaction is lost either way). A relay that took a fencing for an outage would start over and
        fence the newer relay in turn, and the two would take turns forever."""
        if error.code() in _FENCED:
            return True
        if error.code() != KafkaError._FATAL or not self.transactional:
            return False
        self._in_transaction = False
        try:
            self._producer.abort_transaction(TRANSACTION_CALL_TIMEOUT_S)
        except KafkaException as exc:
            return bool(exc.args[0].code() in _FENCED)
        return False

    def _fenced_error(self, what: str, error: KafkaError) -> RelayFencedError:
        return RelayFencedError(
            f"another relay took over: the broker fenced this one's transactional.id {self.transactional_id!r} "
            f"while trying to {what} ({error.str()})",
            hint="run one relay per pipeline; this one stops, the newer one goes on from the committed progress")

    def _failure(self, what: str, exc: KafkaException) -> BrokerError:
        error: KafkaError = exc.args[0]
        if self._fenced(error):
            return self._fenced_error(what, error)
        return BrokerUnavailableError(f"the broker failed while the relay tried to {what}: {error.str()}",
                                      hint="check the broker; the relay resumes from its last committed progress")

    def _call(self, what: str, call, *args) -> None:
        """A transactional call, retried while the client says the error is retriable."""
        deadline = time.monotonic() + TRANSACTION_CALL_TIMEOUT_S
        while True:
            try:
                call(*args)
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.retriable() and time.monotonic() < deadline:
                    log.info("relay: %s: %s; retrying", what, error.str())
                    time.sleep(0.2)
                    continue
                if error.txn_requires_abort() and self._in_transaction:
                    self.abort()
                refusal = self._refusal()
                if refusal is not None:
                    raise refusal from exc
                raise self._failure(what, exc) from exc

    # -- records --------------------------------------------------------------------------------------
    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        # Only kept here: the client may call this with an exception of its own pending (a fenced producer),
        # when asking the message anything fails; _refusal and flush look at it later.
        if error is not None:
            self._errors.append((error, message))

    def _refusal(self) -> BrokerError | None:
        """The broker's refusal of a record, if a delivery failed for a reason that re-trying cannot change (a
        record too large, a topic the relay may not write): not an outage the relay waits out."""
        for error, message in self._errors:
            topic = message.topic() or ""
            if error.code() in _TOO_LARGE:
                return self._size_error(topic, len(message.value() or b""))
            if error.code() in _REFUSED:
                return BrokerError(f"the broker refused a change event for topic {topic}: {error.str()}; progress "
                                   "was not advanced past it",
                                   hint="fix the broker, topic or permission problem named above and restart the relay")
        return None

    def send(self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        """Queue one record (in the open transaction, which starts here when none is); blocks while the local
        queue is full, serving delivery reports."""
        if self.transactional and not self._in_transaction:
            self._call("begin a Kafka transaction", self._producer.begin_transaction)
            self._in_transaction = True
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
        if error.code() in _TOO_LARGE:
            return self._size_error(topic, size)
        return self._failure(f"send a change event to {topic}", exc)

    def _size_error(self, topic: str, size: int) -> BrokerError:
        limit = self._client_config.get("message.max.bytes", "1000000 (librdkafka's default)")
        return BrokerError(
            f"a change event for topic {topic} is {size / 1e6:.1f} MB, more than the producer's "
            f"message.max.bytes {limit} or the broker's limit; progress was not advanced past it",
            hint="raise kafka.settings message.max.bytes in the pipeline, and the broker's message.max.bytes "
            "/ the topic's max.message.bytes (and the consumers' fetch.max.bytes) to match; docs/configuration.md",
        )

    def commit(self, progress: tuple[str, bytes, bytes] | None = None) -> None:
        """Make every record sent since the last commit durable, together with ``progress`` (topic, key, value).

        Transactional: the progress record joins the open transaction, which is committed. Plain: the records
        are flushed and acknowledged first, then the progress record is written and acknowledged."""
        started = time.monotonic()
        if self.transactional:
            if progress is not None:
                self.send(progress[0], progress[1], progress[2], [])
            if self._in_transaction:
                self._call("commit a Kafka transaction", self._producer.commit_transaction, TRANSACTION_CALL_TIMEOUT_S)
                self._in_transaction = False
                self._errors.clear()  # a committed transaction delivered everything in it
        else:
            self.flush()
            if progress is not None:
                self.send(progress[0], progress[1], progress[2], [])
                self.flush()
        self.commit_seconds.append(time.monotonic() - started)

    def pending(self) -> bool:
        """Whether records were sent since the last commit."""
        return self._in_transaction if self.transactional else len(self._producer) > 0

    def abort(self) -> None:
        """Abort the open transaction (what it held is never shown to ``read_committed`` readers)."""
        if not (self.transactional and self._in_transaction):
            return
        self._in_transaction = False
        try:
            self._producer.abort_transaction(TRANSACTION_CALL_TIMEOUT_S)
        except KafkaException as exc:  # the broker aborts it by itself at transaction.timeout.ms
            log.warning("relay: aborting the open Kafka transaction failed (%s); the broker aborts it when it "
                        "times out, or the next relay's start fences it", exc.args[0].str())

    def flush(self) -> None:
        """Wait for every queued record to be acknowledged; :class:`BrokerError` when one was not."""
        remaining = self._producer.flush(self._flush_timeout)
        if remaining:
            raise BrokerUnavailableError(
                f"{remaining} change events were not acknowledged by the broker within "
                f"{self._flush_timeout:.0f} s; the relay's progress was not advanced past them",
                hint="check that the broker is up and reachable; the relay resumes from its last committed "
                "progress (re-sent events are harmless)",
            )
        if self._errors:
            fenced = next((error for error, _ in self._errors if error.code() in _FENCED), None)
            if fenced is not None:
                raise self._fenced_error("deliver change events", fenced)
            refusal = self._refusal()
            if refusal is not None:
                raise refusal
            first, count = str(self._errors[0][0]), len(self._errors)
            self._errors.clear()
            raise BrokerUnavailableError(
                f"the broker refused {count} change events (first error: {first}); progress was not advanced",
                hint="fix the broker or topic problem named above; the relay resumes from its last committed progress",
            )

    def close(self) -> None:
        """Abort what is open (it was never committed) and let the producer go. Never raises: it runs while the
        relay unwinds from another error, which must stay the one reported."""
        self.abort()
        try:
            self._producer.flush(5)
        except (KafkaException, SystemError) as exc:  # a fenced or broken producer: nothing left to deliver
            log.debug("relay: closing the producer: %s", exc)
