"""How many Kafka records the stream has still to apply, read from its checkpoint: what the relay throttles on.

Spark writes ``offsets/<batch>`` before a micro-batch and ``commits/<batch>`` after the batch's Delta
commits; the offsets of the newest committed batch are the next record the stream will read per
partition. Everything from there to the log end is the stream's lag in records. Reading files and two
watermarks per partition is cheap enough to do every few seconds, and needs nothing from Spark.

:func:`read_backlogs` is the lag ``lakesync status`` and the health check judge: per table, how many offsets
the stream has still to apply and how old the oldest of those changes is. It counts against the last stable
offset (what a ``read_committed`` reader can see), and since a transaction's commit or abort marker takes
an offset too, a partition whose only unread offsets are markers (or records of an aborted transaction, which
a crashed relay leaves behind) has nothing pending. Nothing pending is a lag of
zero however long the source has been quiet: that the relay is alive and caught up is judged from its
heartbeats (``lakesync.monitoring.attention``), not from the age of the newest change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Message

from lakesync.core.config import Pipeline
from lakesync.events.envelope import message_position_key, record_source_ts_ms
from lakesync.full_load.state import LoadState
from lakesync.kafka.offsets import (
    TP,
    earliest_offsets,
    end_offsets,
    first_messages,
    first_offsets_at_or_after,
    list_partitions,
    offset_consumer,
)


def committed_offsets(checkpoint: Path) -> dict[TP, int] | None:
    """The next offset per partition after the newest committed batch, or None before the first commit."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return None
    batches = sorted((int(entry.name) for entry in commits.iterdir() if entry.name.isdigit()), reverse=True)
    for batch in batches:
        offsets = planned_offsets(checkpoint, batch)
        if offsets is not None:
            return offsets
        # a cleaned-up batch; an older commit still tells where the stream is
    return None


def planned_offsets(checkpoint: Path, batch_id: int) -> dict[TP, int] | None:
    """The next offset per partition once batch ``batch_id`` is applied (its planned ends; Spark writes them
    before the batch runs), or None when its offset file is not there.

    The offset file is ``v1``, a metadata line, then one JSON line per source (lakesync's streams have
    one); a source that has no offset yet is written as ``-``.
    """
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    except OSError:
        return None
    offsets: dict[TP, int] = {}
    for line in lines[2:]:
        if line.strip() and line.strip() != "-":
            for topic, parts in json.loads(line).items():
                offsets.update({(topic, int(partition)): int(offset) for partition, offset in parts.items()})
    return offsets


def batch_topics(checkpoint: Path, batch_id: int) -> frozenset[str] | None:
    """The topics with records in batch ``batch_id``: those whose planned end moved past where the batch started
    (the previous batch's planned end; for batch 0, the offsets Spark's Kafka source started the checkpoint at,
    ``sources/0/0``). A partition not named where the batch started counts when its end is above 0. None when
    a file is not there (Spark purged it; a checkpoint of another source)."""
    ends = planned_offsets(checkpoint, batch_id)
    starts = planned_offsets(checkpoint, batch_id - 1) if batch_id > 0 else initial_offsets(checkpoint)
    if ends is None or starts is None:
        return None
    return frozenset(topic for (topic, partition), end in ends.items() if end > starts.get((topic, partition), 0))


def initial_offsets(checkpoint: Path) -> dict[TP, int] | None:
    """The offsets Spark's Kafka source started ``checkpoint`` at (``sources/0/0``: a zero byte, ``v1``, then
    the offsets as JSON), or None when the file is not there or is not that."""
    try:
        lines = (checkpoint / "sources" / "0" / "0").read_text().lstrip("\x00").splitlines()
        parts = json.loads(lines[1])
        return {(topic, int(partition)): int(offset) for topic, offsets in parts.items()
                for partition, offset in offsets.items()}
    except (OSError, IndexError, ValueError, AttributeError):
        return None


def records_behind(committed: Mapping[TP, int], ends: Mapping[TP, int]) -> int:
    """Records between the stream's committed offsets and the log ends of the same partitions."""
    return sum(max(0, ends.get(tp, offset) - offset) for tp, offset in committed.items())


@dataclass(frozen=True)
class Backlog:
    """What the stream has still to apply of one topic: ``offsets`` between its next read and the last
    stable offset (records and the transaction markers between them; 0 when only markers are left), and
    the source commit time of the oldest of those records (None: nothing pending)."""

    offsets: int = 0
    oldest_ts_ms: int | None = None

    def lag_seconds(self, now_ms: int) -> float:
        """How far the oldest change not applied yet is behind now; 0 when nothing is pending."""
        return 0.0 if self.oldest_ts_ms is None else max(0.0, (now_ms - self.oldest_ts_ms) / 1000)


def next_offsets(committed: Mapping[TP, int], earliest: Mapping[TP, int]) -> dict[TP, int]:
    """Where the stream reads each partition of ``earliest`` next: its committed offset (for a partition it
    has not read yet, the caller's handoff offset), else the log's first offset, also where retention already
    removed unread records (those are lost, not pending: the stream refuses to go on)."""
    return {tp: max(committed.get(tp, first), first) for tp, first in earliest.items()}


def topic_backlogs(starts: Mapping[TP, int], ends: Mapping[TP, int], oldest: Mapping[TP, int | None]
                   ) -> dict[str, Backlog]:
    """Per topic of ``ends``, its :class:`Backlog`. ``oldest`` holds, for each partition with offsets left
    (``ends`` past ``starts``), the commit time of its first record there; None (or no entry) when a read
    from there found nothing before the last stable offset: only transaction markers, no change pending."""
    offsets: dict[str, int] = {}
    times: dict[str, list[int]] = {}
    for tp, end in ends.items():
        offsets.setdefault(tp[0], 0)
        left = max(0, end - starts.get(tp, end))
        first = oldest.get(tp)
        if left and first is not None:
            offsets[tp[0]] += left
            times.setdefault(tp[0], []).append(first)
    return {topic: Backlog(count, min(times[topic]) if count else None) for topic, count in offsets.items()}


def _commit_time(msg: Message) -> int:
    """The record's source commit time; the time Kafka took it when the value does not say (and now, for a
    record that has neither: pending, but of an age nobody knows)."""
    ts_ms = record_source_ts_ms(msg.value())
    if ts_ms is None:
        _, ts_ms = msg.timestamp()
    return ts_ms if ts_ms and ts_ms > 0 else int(time.time() * 1000)


def backlog_consumer(client: Mapping[str, str]) -> Consumer:
    """A consumer for :func:`read_backlogs`: it reads one record per partition, so each fetch is kept small
    (a stream far behind must not cost a full-size fetch per partition on every look)."""
    return offset_consumer({**client, "max.partition.fetch.bytes": "65536"})


def read_backlogs(consumer: Consumer, topics: Mapping[str, str], committed: Mapping[TP, int], *,
                  timeout: float = 10.0) -> dict[str, Backlog]:
    """Per topic of ``topics`` (topic -> its table's handoff position key; those that exist), what the stream
    with ``committed`` offsets has still to apply: offset requests, then one read of the first pending record
    of each partition that has any (``consumer`` from :func:`backlog_consumer`). A partition the stream has not
    read yet (a table that joined since its last batch) starts at the first record at or after the handoff,
    as the stream starts it: the records before it are not pending, they are never applied."""
    tps = list_partitions(consumer, topics=list(topics), timeout=timeout)
    unread = [tp for tp in tps if tp not in committed]
    handoff: dict[TP, int] = {}
    for topic in sorted({topic for topic, _ in unread}):
        handoff.update(first_offsets_at_or_after(consumer, [tp for tp in unread if tp[0] == topic], topics[topic],
                                                 timeout=timeout, position_of=message_position_key))
    starts = next_offsets({**handoff, **committed}, earliest_offsets(consumer, tps, timeout=timeout))
    ends = end_offsets(consumer, tps, timeout=timeout)
    behind = {tp: offset for tp, offset in starts.items() if ends[tp] > offset}
    first = first_messages(consumer, behind, timeout=timeout)
    oldest = {tp: None if msg is None else _commit_time(msg) for tp, msg in first.items()}
    return topic_backlogs(starts, ends, oldest)


def table_backlogs(pipeline: Pipeline, consumer: Consumer, tables: Iterable[str], committed: Mapping[TP, int], *,
                   timeout: float) -> dict[str, Backlog]:
    """Per table of ``tables`` the full load has finished (the stream reads no other), :func:`read_backlogs`
    of its topic; a table whose topic does not exist yet has nothing pending."""
    load = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    handoffs = {pipeline.topic(name): (name, load.tables[name].position_key or "")
                for name in tables if load.is_done(name)}
    if not handoffs:
        return {}
    found = read_backlogs(consumer, {topic: key for topic, (_, key) in handoffs.items()}, committed,
                          timeout=timeout)
    return {name: found.get(topic, Backlog()) for topic, (name, _) in handoffs.items()}
