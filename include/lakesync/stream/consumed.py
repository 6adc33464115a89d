"""Per table, a source position before which the stream has applied every change: where recovery replays from.

When Kafka loses records the stream still needs (a lost broker, a deleted topic, retention), the binlog may
still hold them: the relay can replay from the oldest position some table has not consumed
(:mod:`lakesync.relay.rewind`). A table's newest applied row is no such mark: a quiet table's last change
may be days old (its binlog purged, though the stream has seen everything since), and with several
partitions a newer row in one says nothing of the others.

The mark comes from the relay's progress instead. The relay commits its progress ``P`` in the same Kafka
transaction as every change before ``P``, and it is the topics' only transactional writer, so once ``P`` is
read (``read_committed``), the last stable offsets ``E`` read after it hold every change before ``P``. When
the stream has applied a table's topic up to ``E``, every change of that table before ``P`` is in Delta:
``consumed_through = P``. After each batch the stream takes such a candidate ``(P, E)`` (at most every
``every_seconds``) and promotes the candidates its applied offsets have passed, including the one just
taken. The relay's heartbeats move ``P`` while the source is quiet, so a quiet table's mark moves on with
the batches of the others. A fully idle pipeline runs no batch: its marks stay where the last batch left them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from lakesync.core.config import Pipeline
from lakesync.core.connections import kafka_client_config
from lakesync.core.errors import LakesyncError
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


def passed(candidate: Candidate, applied: Mapping[TP, int], topic: str) -> bool:
    """Pure: whether offsets ``applied`` (the next offset per partition the stream reads) cover every record
    of ``topic`` below the candidate's ends; an empty partition needs nothing. A topic the candidate saw no
    partition of is not passed: a mark is only given from what was read (the table's load position serves)."""
    ends = [(tp, end) for tp, end in candidate.ends.items() if tp[0] == topic]
    return bool(ends) and all(end == 0 or applied.get(tp, -1) >= end for tp, end in ends)


def promote(candidates: Iterable[Candidate], applied: Mapping[TP, int], table_topics: Mapping[str, str]
            ) -> dict[str, str]:
    """Pure: per table (name -> topic), the newest candidate position its topic's applied offsets passed."""
    marks: dict[str, str] = {}
    for candidate in candidates:
        for table, topic in table_topics.items():
            if passed(candidate, applied, topic) and candidate.position > marks.get(table, ""):
                marks[table] = candidate.position
    return marks


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
        if self._taken_at is None or self._clock() - self._taken_at >= self.every_seconds:
            self._taken_at = self._clock()
            candidate = self._take(table_topics.values())
            if candidate is not None:
                self._candidates = [*self._candidates, candidate][-KEPT_CANDIDATES:]
        for table, position in promote(self._candidates, applied, table_topics).items():
            entry = progress.tables.setdefault(table, TableProgress())
            if position > (entry.consumed_through or ""):
                entry.consumed_through = position
        newest_passed = {candidate.position for candidate in self._candidates
                         if all(passed(candidate, applied, topic) for topic in table_topics.values())}
        self._candidates = [c for c in self._candidates if not newest_passed or c.position > max(newest_passed)]

    def _take(self, topics: Iterable[str]) -> Candidate | None:
        """The relay's progress, then the last stable offsets of ``topics``: None without relay progress (topics
        another producer writes, such as Debezium's) or when the broker can't be read (no mark this time)."""
        from lakesync.relay.offsets import ProgressStore  # the relay package only when marks are taken

        try:
            stored = ProgressStore.for_pipeline(self.pipeline).load(timeout=5.0)
            if stored is None:
                return None
            consumer = offset_consumer(kafka_client_config(self.pipeline))
            try:
                ends = end_offsets(consumer, list_partitions(consumer, topics=list(topics), timeout=5.0), timeout=5.0)
            finally:
                consumer.close()
        except LakesyncError as exc:
            log.warning("could not read the relay's progress for the consumed-through marks (next time): %s",
                        exc.message)
            return None
        return Candidate(stored.position.key(), ends)
