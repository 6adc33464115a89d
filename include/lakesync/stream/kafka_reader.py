"""Which Kafka reader a stream's checkpoint belongs to, and moving a stream from one reader to the other.

``stream.kafka_reader`` picks how the stream reads its topics: ``spark`` (the default: Spark's own Kafka
source, ``spark-sql-kafka-0-10``, reading in the JVM) or ``lakesync`` (the former default, kept as a fallback:
lakesync's Python data source, :mod:`lakesync.kafka.spark_source`, whose tasks read their offset ranges
with confluent-kafka). Both hand the same
records to the same decode and reduce (:mod:`lakesync.stream.reduce`), but a Spark checkpoint belongs to
the source that wrote it: its offsets log is in the source's own format, and Spark refuses a query whose
source changed. So the reader is recorded in the checkpoint (:data:`READER_FILE`; a checkpoint without the
file was written before the choice existed, by ``lakesync``), and when the setting names the other reader
the checkpoint is moved aside and a new one starts at exactly the offsets the old one had committed
(:func:`switch_reader`): a pipeline upgraded from a lakesync without the setting moves to Spark's reader
this way at its first stream run, and again at every start until the new one commits its first batch (its own
offsets rule from then on). Nothing is read twice or skipped: the offsets of a committed batch are the next
records to read. A planned batch that was never committed (a crash in it) is refused: its Delta commits
may be done, and only its own checkpoint can tell its replay is the same work (the sink's app transaction
carries the stream id, which a new checkpoint changes).

Spark's source also differs in where a topic starts that is new to a checkpoint (a table that joined while
the stream ran): at its first record, since its ``startingOffsets`` apply to a new checkpoint only. The
changes before the table's handoff are then left out by position in the decode (``DecodePlan.read_from``),
which is what starting the topic at the handoff offsets does for lakesync's source.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from lakesync.core.errors import ConfigError
from lakesync.core.state_files import write_text_atomically
from lakesync.kafka.offsets import TP
from lakesync.stream.lag import committed_offsets

log = logging.getLogger(__name__)

READERS = ("lakesync", "spark")
READER_FILE = "lakesync_kafka_reader"
#: in a checkpoint that replaced another reader's: where that one was moved (its offsets are the start)
CARRIED_FILE = "lakesync_carried_from"
#: the reader of a checkpoint written before the reader was recorded
FORMER_READER = "lakesync"


@dataclass(frozen=True)
class CarriedOffsets:
    """Where a stream that changed readers goes on: the old checkpoint's committed offsets, and where it is now."""

    offsets: dict[TP, int]
    old_checkpoint: Path


def checkpoint_reader(checkpoint: Path) -> str | None:
    """The reader that wrote ``checkpoint``, or None for a checkpoint with no planned batch (no reader yet)."""
    recorded = checkpoint / READER_FILE
    if recorded.exists():
        return recorded.read_text().strip()
    return FORMER_READER if (checkpoint / "offsets").is_dir() and any((checkpoint / "offsets").iterdir()) else None


def record_reader(checkpoint: Path, reader: str) -> None:
    """Mark ``checkpoint`` as ``reader``'s, before the query writes anything into it."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    if not (checkpoint / READER_FILE).exists():
        write_text_atomically(checkpoint / READER_FILE, reader)


def _batches(checkpoint: Path, kind: str) -> list[int]:
    folder = checkpoint / kind
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def switch_reader(checkpoint: Path, reader: str, *, pipeline: str) -> CarriedOffsets | None:
    """When ``checkpoint`` was written by the other reader, move it aside; while the new one has committed
    no batch, return where it starts: the old one's committed offsets (None: nothing to carry over).

    The old checkpoint's place is kept in the new one (:data:`CARRIED_FILE`), so a stream stopped before its
    first commit starts at the same offsets again, not at the tables' handoffs."""
    written_by = checkpoint_reader(checkpoint)
    if written_by is not None and written_by != reader:
        _move_aside(checkpoint, written_by, reader, pipeline=pipeline)
    carried_from = checkpoint / CARRIED_FILE
    if not carried_from.exists() or _batches(checkpoint, "commits"):
        return None
    old_checkpoint = Path(carried_from.read_text().strip())
    offsets = committed_offsets(old_checkpoint)
    return CarriedOffsets(offsets, old_checkpoint) if offsets else None


def _move_aside(checkpoint: Path, written_by: str, reader: str, *, pipeline: str) -> None:
    planned, committed = _batches(checkpoint, "offsets"), _batches(checkpoint, "commits")
    if planned and (not committed or committed[-1] < planned[-1]):
        raise ConfigError(
            f"the stream of pipeline {pipeline!r} can't move to stream.kafka_reader {reader!r} now: its "
            f"checkpoint {checkpoint} holds batch {planned[-1]}, planned by the {written_by!r} reader and not "
            "committed (the stream stopped in it)",
            hint=f"set stream.kafka_reader back to {written_by!r} and run the stream once (it finishes the "
                 f"batch), then set it to {reader!r} again")
    moved = checkpoint.with_name(f"{checkpoint.name}.{written_by}-reader-{time.strftime('%Y%m%dT%H%M%S')}")
    checkpoint.rename(moved)
    checkpoint.mkdir()
    write_text_atomically(checkpoint / CARRIED_FILE, str(moved))
    record_reader(checkpoint, reader)
    log.warning("stream.kafka_reader is now %r: the %r reader's checkpoint is kept at %s; the new checkpoint "
                "starts at its committed offsets", reader, written_by, moved)
