"""Starting a new checkpoint where an old one left off, for what Spark's Kafka source can't do in place.

The stream reads its topics with Spark's own Kafka source (``spark-sql-kafka-0-10``). A Spark checkpoint
belongs to the source that wrote it (its offsets log is in the source's own format, and Spark refuses a query
whose source changed), and Spark's Kafka source has two more limits: it applies ``startingOffsets`` only to a
new checkpoint, and it refuses a partition new to a running checkpoint whose log no longer starts at offset 0
(``failOnDataLoss``: "Added partition ... starts from N instead of 0"), which a table that joins with a
trimmed topic meets. So a query that would meet either case (a checkpoint of lakesync's former Python Kafka
reader, removed; or topics the checkpoint never read) starts a **new checkpoint that carries the old one's
offsets** (:func:`prepare_checkpoint`): the old folder is moved aside whole, and the new one starts at exactly
the old one's committed offsets (the next records to read: nothing read twice or skipped), each topic the old
one never read at its table's handoff. The new checkpoint names the one it carries (:data:`CARRIED_FILE`), so
every start uses those offsets until it commits its first batch, and a new checkpoint that never committed
hands its origin on when it is moved itself. The reader is recorded in the checkpoint (:data:`READER_FILE`; a
checkpoint without it was written before the record existed, by lakesync's former reader).

A planned batch the old checkpoint never committed (the stream stopped in it) can only be carried over when
no Delta table recorded it: the new checkpoint is a new stream id, so the sink's same-work rule could not
recognise its replay. The move is built as ``<checkpoint>.next`` first and put in place by renames, so a crash
in the middle is finished at the next start.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lakesync.core.errors import ConfigError
from lakesync.core.state_files import write_text_atomically
from lakesync.kafka.offsets import TP
from lakesync.stream.lag import committed_offsets

log = logging.getLogger(__name__)

READER_FILE = "lakesync_kafka_reader"
#: in a checkpoint that carries another one's offsets: where that one was moved
CARRIED_FILE = "lakesync_carried_from"
#: the reader of a checkpoint written before the reader was recorded: lakesync's former Python Kafka source
FORMER_READER = "lakesync"
#: the reader every checkpoint the stream writes now belongs to: Spark's Kafka source
SPARK_READER = "spark"
#: whether a batch of the checkpoint at a path was committed to any Delta table (by its stream's app id)
BatchWritten = Callable[[Path, int], bool]


@dataclass(frozen=True)
class CarriedOffsets:
    """Where a new checkpoint starts: the committed offsets of the one it carries, and where that one is."""

    offsets: dict[TP, int]
    old_checkpoint: Path


def checkpoint_reader(checkpoint: Path) -> str | None:
    """The reader recorded in ``checkpoint``; for one without the record, ``lakesync`` when it holds a planned
    batch (written before the record existed) and None otherwise (nothing read yet)."""
    recorded = checkpoint / READER_FILE
    if recorded.exists():
        return recorded.read_text().strip()
    return FORMER_READER if _batches(checkpoint, "offsets") else None


def record_reader(checkpoint: Path) -> None:
    """Mark ``checkpoint`` as Spark's reader's, before the query writes anything into it."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    if not (checkpoint / READER_FILE).exists():
        write_text_atomically(checkpoint / READER_FILE, SPARK_READER)


def _batches(checkpoint: Path, kind: str) -> list[int]:
    folder = checkpoint / kind
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def prepare_checkpoint(checkpoint: Path, *, pipeline: str, reads_new_topics: bool,
                       batch_written: BatchWritten) -> CarriedOffsets | None:
    """Before a query starts: finish a move a crash interrupted; start a new checkpoint carrying this one's
    offsets when it was written by lakesync's former reader, or when Spark's reader would meet topics it never
    read (``reads_new_topics``; the caller leaves those out while :func:`batch_in_flight_written`); then, while
    the checkpoint has committed no batch, the offsets it carries."""
    _finish_interrupted_move(checkpoint)
    written_by = checkpoint_reader(checkpoint)
    if written_by is not None and written_by != SPARK_READER:
        _move_aside(checkpoint, pipeline=pipeline, batch_written=batch_written,
                    why=f"the checkpoint is the {written_by!r} reader's (lakesync's former Python Kafka reader, "
                        "removed), the stream reads with Spark's Kafka source",
                    finish_hint="run the stream once with the lakesync release you upgraded from (with "
                                "stream.kafka_reader: lakesync back in the pipeline file if that release had the "
                                "setting): it finishes the batch; then upgrade again")
    elif written_by == SPARK_READER and reads_new_topics:
        _move_aside(checkpoint, pipeline=pipeline, batch_written=batch_written,
                    why="the stream reads topics its checkpoint never read (Spark's Kafka source would start "
                        "them at their first offset, or refuse a trimmed one)",
                    finish_hint="run the stream once with the same tables (--tables): it finishes the batch; "
                                "then start it as you meant to")
    return carried_offsets(checkpoint)


def carried_offsets(checkpoint: Path) -> CarriedOffsets | None:
    """The offsets ``checkpoint`` starts at while it has committed no batch (None: it carries none)."""
    carried_from = checkpoint / CARRIED_FILE
    if not carried_from.exists() or _batches(checkpoint, "commits"):
        return None
    old_checkpoint = Path(carried_from.read_text().strip())
    offsets = committed_offsets(old_checkpoint)
    return CarriedOffsets(offsets, old_checkpoint) if offsets else None


def _next(checkpoint: Path) -> Path:
    return checkpoint.with_name(f"{checkpoint.name}.next")


def _finish_interrupted_move(checkpoint: Path) -> None:
    """``<checkpoint>.next`` left by a crash: put in place when the old folder was already moved, else dropped
    (the move is done again from the start)."""
    prepared = _next(checkpoint)
    if not prepared.exists():
        return
    if checkpoint.exists():
        shutil.rmtree(prepared)
    else:
        prepared.rename(checkpoint)
        log.warning("finished moving the stream's checkpoint aside (a crash interrupted it): %s", checkpoint)


def batch_in_flight_written(checkpoint: Path, batch_written: BatchWritten) -> bool:
    """Whether ``checkpoint`` holds a planned batch it never committed that a Delta table recorded (only this
    checkpoint can replay it as the same work)."""
    planned, committed = _batches(checkpoint, "offsets"), _batches(checkpoint, "commits")
    return bool(planned) and (not committed or committed[-1] < planned[-1]) and batch_written(checkpoint, planned[-1])


def _move_aside(checkpoint: Path, *, pipeline: str, batch_written: BatchWritten, why: str,
                finish_hint: str) -> None:
    planned, committed = _batches(checkpoint, "offsets"), _batches(checkpoint, "commits")
    if batch_in_flight_written(checkpoint, batch_written):
        raise ConfigError(
            f"the stream of pipeline {pipeline!r} can't start a new checkpoint now ({why}): batch {planned[-1]} "
            f"of {checkpoint} was written to Delta and never committed in the checkpoint (the stream stopped in "
            "it), and only that checkpoint can replay it as the same work", hint=finish_hint)
    # a checkpoint that never committed carries the offsets of the one it was started from
    origin = checkpoint / CARRIED_FILE if not committed and (checkpoint / CARRIED_FILE).exists() else None
    moved = checkpoint.with_name(f"{checkpoint.name}.{checkpoint_reader(checkpoint)}-reader-"
                                 f"{time.strftime('%Y%m%dT%H%M%S')}")
    carried_from = origin.read_text().strip() if origin is not None else str(moved)
    prepared = _next(checkpoint)
    shutil.rmtree(prepared, ignore_errors=True)
    prepared.mkdir(parents=True)
    write_text_atomically(prepared / CARRIED_FILE, carried_from)
    write_text_atomically(prepared / READER_FILE, SPARK_READER)
    checkpoint.rename(moved)
    prepared.rename(checkpoint)
    log.warning("%s: the checkpoint is kept at %s; the new checkpoint starts at the committed offsets of %s",
                why, moved, carried_from)
