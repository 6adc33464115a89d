"""Offset tools over a confluent-kafka consumer: partitions, log ends, seeks by source position.

Used by the stream app (finding the offsets that cover a snapshot position), by the relay (its progress, the
stream's lag) and by status. Each function that reads messages re-assigns the consumer it is given: pass a
consumer made by :func:`offset_consumer` and used for nothing else. Every reader is ``read_committed``: what
an open or aborted relay transaction holds is not there yet, and a log's end is its last stable offset.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from lakesync.core.errors import BrokerError, BrokerUnavailableError, ConfigError

#: A partition, as ``(topic, partition)``.
TP = tuple[str, int]

POSITION_HEADER = "lakesync.pos"


def offset_consumer(client: Mapping[str, str]) -> Consumer:
    """A consumer suited to the functions of this module.

    Partition-EOF events tell "nothing more" apart from "not yet" without waiting for a timeout, and a
    short fetch wait makes each probe cost one round trip instead of the broker's long-poll time.
    """
    config = {"group.id": "lakesync-offsets", **client, "enable.partition.eof": "true",
              "fetch.wait.max.ms": "10", "enable.auto.commit": "false", "isolation.level": "read_committed"}
    try:
        return Consumer(config)
    except KafkaException as exc:
        raise BrokerError(f"cannot create a Kafka consumer: {exc}",
                          hint="check the kafka.* options (bootstrap.servers, security settings)") from exc


def _broker_error(what: str, exc: BaseException) -> BrokerError:
    return BrokerUnavailableError(f"the broker did not answer {what}: {exc}",
                                  hint="check that the broker is up and reachable at kafka.bootstrap.servers")


def list_partitions(consumer: Consumer, *, topics: Sequence[str] | None = None, pattern: str | None = None,
                    timeout: float = 10.0) -> list[TP]:
    """The partitions of the named topics, or of every topic whose whole name matches ``pattern``.

    Topics that don't exist (yet) are left out rather than refused: the relay creates a table's topic on
    its first change, and each new micro-batch asks again, so new topics and partitions are picked up.
    Internal topics (``__consumer_offsets`` and the like) never match a pattern.
    """
    if (topics is None) == (pattern is None):
        raise ConfigError("list_partitions needs exactly one of topics and pattern")
    try:
        metadata = consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise _broker_error("a metadata request", exc) from exc
    if topics is not None:
        wanted = set(topics)
        names = [name for name in metadata.topics if name in wanted]
    else:
        regex = re.compile(pattern or "")
        names = [name for name in metadata.topics if not name.startswith("__") and regex.fullmatch(name)]
    return sorted((name, partition) for name in names
                  for partition, info in metadata.topics[name].partitions.items() if info.error is None)


#: Answers about a partition the client's metadata does not have yet (a topic just created).
_NOT_KNOWN_YET = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                            KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION})
#: ListOffsets' special timestamps: the first offset in the log, and its end (for a ``read_committed``
#: consumer the last stable offset: records of open transactions are not there yet).
_EARLIEST_TS, _LATEST_TS = -2, -1
#: Spark's ``startingOffsets`` JSON value for a partition's first record
EARLIEST = -2


def _list_offsets(consumer: Consumer, partitions: Iterable[TP], which: int, *, timeout: float) -> dict[TP, int]:
    """One ListOffsets round trip per broker for many partitions (``get_watermark_offsets`` costs one each)."""
    tps = list(partitions)
    if not tps:
        return {}
    deadline = time.monotonic() + timeout
    while True:
        try:
            answers = consumer.offsets_for_times([TopicPartition(t, p, which) for t, p in tps], timeout=timeout)
            break
        except KafkaException as exc:
            # a topic created a moment ago may not be in this client's metadata yet: ask again shortly
            if exc.args[0].code() in _NOT_KNOWN_YET and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise _broker_error("an offsets request", exc) from exc
    failed = [answer for answer in answers if answer.error is not None]
    if failed:
        raise BrokerError("the broker refused an offsets request: "
                          + ", ".join(f"{a.topic}/{a.partition}: {a.error}" for a in failed),
                          hint="check that the topics exist and the credentials may describe them")
    return {(answer.topic, answer.partition): answer.offset for answer in answers}


def earliest_offsets(consumer: Consumer, partitions: Iterable[TP], *, timeout: float = 10.0) -> dict[TP, int]:
    """The first offset still in the log of each partition."""
    return _list_offsets(consumer, partitions, _EARLIEST_TS, timeout=timeout)


def _read_until(consumer: Consumer, starts: Mapping[TP, int], on_message: Callable[[Message], bool], *,
                timeout: float) -> set[TP]:
    """Assign ``starts`` and feed messages to ``on_message`` until each partition is done.

    A partition is done when it reaches its end (partition EOF) or when ``on_message`` returns True for one
    of its messages. ``timeout`` bounds the wait for the next message, not the whole read (a long scan that
    keeps receiving goes on). Returns the partitions that ended by EOF.
    """
    consumer.assign([TopicPartition(topic, partition, offset) for (topic, partition), offset in starts.items()])
    pending, at_eof = set(starts), set()
    deadline = time.monotonic() + timeout
    try:
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerUnavailableError(
                    f"no answer from the broker within {timeout:.0f}s while reading "
                    + ", ".join(f"{t}/{p}" for t, p in sorted(pending)),
                    hint="check the broker; the consumer needs enable.partition.eof=true (see offset_consumer)")
            msg = consumer.poll(min(remaining, 1.0))
            if msg is None:
                continue
            deadline = time.monotonic() + timeout
            tp, _ = _where(msg)
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise BrokerError(f"reading {tp[0]}/{tp[1]} failed: {error}",
                                      hint="check the broker and the kafka.* options")
                if tp in pending:
                    pending.discard(tp)
                    at_eof.add(tp)
                    on_message(msg)
                continue
            if tp in pending and on_message(msg):
                pending.discard(tp)
    finally:
        consumer.unassign()
    return at_eof


def read_to_end(consumer: Consumer, partitions: Iterable[TP], on_message: Callable[[Message], None], *,
                timeout: float = 10.0) -> None:
    """Feed every message of ``partitions``, from the first one still in the log to the log end, to
    ``on_message``. The partition-EOF event marks the end, whatever the broker's high watermark says, so a
    reader knows it has seen the last message without waiting for silence (``consumer`` from
    :func:`offset_consumer`)."""
    tps = list(partitions)
    if not tps:
        return

    def each(msg: Message) -> bool:
        if msg.error() is None:
            on_message(msg)
        return False  # never done early: only the end of the log ends a partition

    _read_until(consumer, earliest_offsets(consumer, tps, timeout=timeout), each, timeout=timeout)


def read_tail(consumer: Consumer, partitions: Iterable[TP], count: int, on_message: Callable[[Message], None], *,
              timeout: float = 10.0) -> None:
    """:func:`read_to_end` of the last ``count`` offsets of each partition only (fewer records where some of
    those offsets are transaction markers)."""
    tps = list(partitions)
    if not tps:
        return
    firsts, ends = earliest_offsets(consumer, tps, timeout=timeout), end_offsets(consumer, tps, timeout=timeout)

    def each(msg: Message) -> bool:
        if msg.error() is None:
            on_message(msg)
        return False

    _read_until(consumer, {tp: max(firsts[tp], ends[tp] - count) for tp in tps}, each, timeout=timeout)


def end_offsets(consumer: Consumer, partitions: Iterable[TP], *, timeout: float = 10.0) -> dict[TP, int]:
    """The end of each partition's log as a ``read_committed`` reader sees it (the last stable offset): the
    offset after the last record of a committed transaction, or of a non-transactional record."""
    return _list_offsets(consumer, partitions, _LATEST_TS, timeout=timeout)


def first_messages(consumer: Consumer, starts: Mapping[TP, int], *, timeout: float = 10.0
                   ) -> dict[TP, Message | None]:
    """Per partition, the first record at or after its start offset; None where the log ends first (for this
    ``read_committed`` reader, at the last stable offset): from there on the partition holds nothing but
    transaction markers, or nothing at all (``consumer`` from :func:`offset_consumer`)."""
    found: dict[TP, Message | None] = {}

    def take(msg: Message) -> bool:
        tp, _ = _where(msg)
        found[tp] = None if msg.error() else msg
        return True

    if starts:
        _read_until(consumer, starts, take, timeout=timeout)
    return found


def message_offset(msg: Message) -> int:
    """The offset of a message or partition-EOF event a consumer returned (always set there; the client's
    types leave it optional because a message being produced has none yet)."""
    offset = msg.offset()
    assert offset is not None
    return offset


def _where(msg: Message) -> tuple[TP, int]:
    """A polled message's partition and offset (see :func:`message_offset`)."""
    topic, partition = msg.topic(), msg.partition()
    assert topic is not None and partition is not None
    return (topic, partition), message_offset(msg)


def _header(msg: Message, name: str) -> str | None:
    headers = msg.headers() or []
    for key, value in headers.items() if isinstance(headers, dict) else headers:
        if key == name:
            return value.decode() if isinstance(value, bytes) else value
    return None


#: A record's position key, or None when the record has none (a tombstone).
PositionOf = Callable[[Message], str | None]


def _first_messages(consumer: Consumer, starts: Mapping[TP, int], header: str, *, timeout: float,
                    position_of: PositionOf | None = None, wanted: Callable[[str], bool] = lambda _key: True,
                    ) -> dict[TP, tuple[int, str | None]]:
    """Per partition, the first message at or after its start whose position key is ``wanted``, as (its
    offset, its key); where none is, (the log end, None). Records without a position (tombstones) are
    stepped over."""
    found: dict[TP, tuple[int, str | None]] = {}

    def take(msg: Message) -> bool:
        tp, offset = _where(msg)
        if msg.error():  # the partition's end: nothing wanted in it
            found[tp] = (offset, None)
            return True
        key = position_of(msg) if position_of is not None else _header(msg, header)
        if key is None and position_of is not None:
            return False
        if key is None:
            raise ConfigError(f"message {msg.topic()}/{msg.partition()}@{msg.offset()} has no {header!r} header",
                              hint="seeking by source position needs topics written by the lakesync relay")
        if not wanted(key):
            return False
        found[tp] = (offset, key)
        return True

    _read_until(consumer, starts, take, timeout=timeout)
    return found


def first_offsets_at_or_after(consumer: Consumer, partitions: Iterable[TP], position_key: str,
                              header: str = POSITION_HEADER, *, timeout: float = 10.0,
                              position_of: PositionOf | None = None) -> dict[TP, int]:
    """For each partition, the first offset whose message carries a position key ``>= position_key``: the
    offset to start reading from to see every change at or after the position. The log end where there is
    none (and for an empty partition).

    The key is the ``header`` of each message, or what ``position_of`` says (topics Debezium wrote carry
    their position in the value: :func:`lakesync.events.envelope.record_position_key`).

    Positions need not grow along a partition: a relay rewound to an earlier position, or a Debezium
    connector restarted after a crash, appends older positions again, and a search that assumed order
    (a bisection) could land past a change the stream needs. So the partition is read forward from its
    first record until the first one at or after the position; in the usual case (the relay began at the
    full load's position) that is the first record, one fetch round for all partitions.
    """
    tps = list(partitions)
    starts = earliest_offsets(consumer, tps, timeout=timeout)
    found = _first_messages(consumer, starts, header, timeout=timeout, position_of=position_of,
                            wanted=lambda key: key >= position_key)
    return {tp: found[tp][0] for tp in tps}


def first_offset_at_or_after(consumer: Consumer, topic: str, partition: int, position_key: str,
                             header: str = POSITION_HEADER, *, timeout: float = 10.0) -> int:
    """One partition's :func:`first_offsets_at_or_after`."""
    tp = (topic, partition)
    return first_offsets_at_or_after(consumer, [tp], position_key, header, timeout=timeout)[tp]


def first_position_keys(consumer: Consumer, partitions: Iterable[TP], position_of: PositionOf, *,
                        timeout: float = 10.0) -> dict[TP, str]:
    """The position key of the first positioned message still in each partition (absent when it has none)."""
    tps = list(partitions)
    found = _first_messages(consumer, earliest_offsets(consumer, tps, timeout=timeout), POSITION_HEADER,
                            timeout=timeout, position_of=position_of)
    return {tp: key for tp, (_, key) in found.items() if key is not None}
