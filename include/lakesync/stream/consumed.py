"""Per table, a source position before which the stream has applied every change: where recovery replays from.

When Kafka loses records the stream still needs (a lost broker, a deleted topic, retention), the binlog may
still hold them: the relay can replay from the oldest position some table has not consumed
(:mod:`lakesync.relay.rewind`). A table's newest applied row is no such mark: a quiet table's last change
may be days old (its binlog purged, though the stream has seen everything since), and with several
partitions a newer row in one says nothing of the others.

The mark comes from the relay's progress instead. The relay commits its progress in the same Kafka transaction as
every change before it, and it is the topics' only transactional writer. A transaction's commit markers reach its
partitions one by one after it commits, but Kafka lets the relay add partitions to its next transaction only
once the previous one is complete; so the position ``P`` of the progress record *before* the newest
(:func:`lakesync.relay.offsets.settled_position`) is below every partition's last stable offset for everything
before it, and the last stable offsets ``E`` read after ``P`` hold every change before ``P``, and every DDL
before it on the schema topic. When the stream has applied a table's topic and the schema topic up to ``E``,
every change of that table before ``P`` is in Delta: ``consumed_through = P``. After each batch the stream
takes such a candidate ``(P, E)`` (at most every ``every_seconds``) and promotes the candidates its applied
offsets have passed, the one just taken included. The relay's heartbeats move ``P`` while the source is quiet,
so a quiet table's mark moves on with the batches of the others. A fully idle pipeline runs no batch: its marks
stay where the last batch left them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from lakesync.core.config import Pipeline
from lakesync.core.connections import kafka_client_config
from lakesync.core.errors import LakesyncError
from lakesync.events.envelope import SCHEMA_TOPIC_TABLE
from lakesync.kafka.offsets import TP, end_offsets, list_partitions, offset_consumer
from lakesync.stream.progress import StreamProgress, TableProgress

log = logging.getLogger(__name__)

#: candidates kept while the stream's offsets have not passed them (a busy table passes them a batch later)
KEPT_CANDIDATES = 8


@dataclass(frozen=True)
class Candidate:
    """The relay's committed progress (a position key) and the last stable offsets read after it."""

    position: str
    ends: Mapping[TP, int]


def passed(candidate: Candidate, applied: Mapping[TP, int], topic: str, *, required: bool = True) -> bool:
    """Pure: whether offsets ``applied`` (the next offset per partition the stream reads) cover every record
    of ``topic`` below the candidate's ends; an empty partition needs nothing. A ``required`` topic the
    candidate saw no partition of is not passed: a table's mark is only given from what was read (its load
    position serves). The schema topic is not required: the relay creates it with the first DDL."""
    ends = [(tp, end) for tp, end in candidate.ends.items() if tp[0] == topic]
    return (bool(ends) or not required) and all(end == 0 or applied.get(tp, -1) >= end for tp, end in ends)


def promote(candidates: Iterable[Candidate], applied: Mapping[TP, int], table_topics: Mapping[str, str],
            schema_topic: str) -> dict[str, str]:
    """Pure: per table (name -> topic), the newest candidate position that its topic's and the schema topic's
    applied offsets passed (a DDL not applied yet holds every mark back: recovery skips DDL before a mark)."""
    marks: dict[str, str] = {}
    for candidate in candidates:
        if not passed(candidate, applied, schema_topic, required=False):
            continue
        for table, topic in table_topics.items():
            if passed(candidate, applied, topic) and candidate.position > marks.get(table, ""):
                marks[table] = candidate.position
    return marks


def kept(candidates: list[Candidate], limit: int = KEPT_CANDIDATES) -> list[Candidate]:
    """Pure: at most ``limit`` candidates, keeping the oldest (the one a lagging stream passes first) and the
    newest; the ones in between go."""
    return candidates if len(candidates) <= limit else [candidates[0], *candidates[-(limit - 1):]]


class ConsumedMarks:
    """Keeps ``TableProgress.consumed_through`` moving after the stream's batches (see the module doc)."""

    def __init__(self, pipeline: Pipeline, *, every_seconds: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pipeline = pipeline
        self.every_seconds = every_seconds
        self._clock = clock
        self._taken_at: float | None = None
        self._candidates: list[Candidate] = []

    def after_batch(self, applied: Mapping[TP, int], table_topics: Mapping[str, str],
                    progress: StreamProgress) -> None:
        """Move the marks of ``table_topics`` (the tables the batch followed, not stopped) whose applied
        offsets passed a candidate; take a new candidate first when it is time."""
        schema_topic = self.pipeline.topic(SCHEMA_TOPIC_TABLE)
        if self._taken_at is None or self._clock() - self._taken_at >= self.every_seconds:
            self._taken_at = self._clock()
            candidate = self._take([*table_topics.values(), schema_topic])
            if candidate is not None:
                self._candidates = kept([*self._candidates, candidate])
        for table, position in promote(self._candidates, applied, table_topics, schema_topic).items():
            entry = progress.tables.setdefault(table, TableProgress())
            if position > (entry.consumed_through or ""):
                entry.consumed_through = position
        everywhere = [c.position for c in self._candidates
                      if passed(c, applied, schema_topic, required=False)
                      and all(passed(c, applied, topic) for topic in table_topics.values())]
        if everywhere:  # older candidates can give no table anything newer
            self._candidates = [c for c in self._candidates if c.position >= max(everywhere)]

    def _take(self, topics: list[str]) -> Candidate | None:
        """The relay's settled progress, then the last stable offsets of ``topics``: None without two progress
        records (topics another producer writes, such as Debezium's, have none) or when the broker can't be
        read (no mark this time)."""
        from lakesync.relay.offsets import (  # the relay package only when needed
            ProgressStore,
            settled_position,
        )

        try:
            settled = settled_position(ProgressStore.for_pipeline(self.pipeline))
            if settled is None:
                return None
            consumer = offset_consumer(kafka_client_config(self.pipeline))
            try:
                ends = end_offsets(consumer, list_partitions(consumer, topics=topics, timeout=5.0), timeout=5.0)
            finally:
                consumer.close()
        except (LakesyncError, ValueError, KeyError) as exc:
            log.warning("could not read the relay's progress for the consumed-through marks (next time): %s",
                        exc.message if isinstance(exc, LakesyncError) else exc)
            return None
        return Candidate(settled.key(), ends)
