"""Changes the stream still needs that Kafka no longer has: found before a batch reads past them.

Topics keep records for ``kafka.retention_hours`` (or whatever the cluster says); an admin can delete records
(``kafka-delete-records``). A stream stopped longer than that, or behind by more, would find the log starting
after the offset it needs next, and reading on from there silently skips changes. So before the stream
starts (and when a batch fails) lakesync compares, per partition, the offset the stream reads next (from
its checkpoint) with the first offset the log still holds, and stops with the tables, the missing offset
ranges and the command that recovers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer

from lakesync.core.errors import GapError
from lakesync.kafka.offsets import TP, earliest_offsets, list_partitions
from lakesync.stream.lag import committed_offsets


@dataclass(frozen=True)
class MissingRange:
    """Offsets ``[first, end)`` of a table's partition that the stream needs and the log no longer holds."""

    table: str
    topic: str
    partition: int
    first: int
    end: int

    def describe(self) -> str:
        return f"{self.table} ({self.topic}/{self.partition} offsets {self.first}-{self.end - 1})"


def missing_ranges(next_offsets: Mapping[TP, int], log_starts: Mapping[TP, int],
                   topic_tables: Mapping[str, str]) -> list[MissingRange]:
    """The ranges between where the stream reads next and where each log now starts (pure arithmetic)."""
    return [MissingRange(topic_tables.get(topic, topic), topic, partition, offset, log_starts[(topic, partition)])
            for (topic, partition), offset in sorted(next_offsets.items())
            if (topic, partition) in log_starts and offset < log_starts[(topic, partition)]]


def data_loss_error(pipeline: str, missing: list[MissingRange], checkpoint: Path) -> GapError:
    tables = sorted({m.table for m in missing})
    return GapError(
        "changes the stream has not applied yet were deleted from Kafka (retention, or deleted records): "
        + "; ".join(m.describe() for m in missing),
        hint=f"stop the relay and run `lakesync recover --pipeline {pipeline}`: it replays what the binlog still "
             "has and re-loads only the tables it can't cover (or re-load everything: `lakesync snapshot "
             f"--pipeline {pipeline} --restart`, then remove {checkpoint}); raise kafka.retention_hours above the "
             f"longest time the stream can be stopped or behind (affected: {', '.join(tables)})",
    )


def check_nothing_deleted(pipeline: str, checkpoint: Path, consumer: Consumer,
                          topic_tables: Mapping[str, str]) -> None:
    """Raise :class:`GapError` when records the checkpoint's stream would read next are gone from the log."""
    next_offsets = committed_offsets(checkpoint)
    if not next_offsets:
        return
    present = set(list_partitions(consumer, topics=sorted({topic for topic, _ in next_offsets})))
    starts = earliest_offsets(consumer, [tp for tp in next_offsets if tp in present])
    missing = missing_ranges(next_offsets, starts, topic_tables)
    if missing:
        raise data_loss_error(pipeline, missing, checkpoint)
