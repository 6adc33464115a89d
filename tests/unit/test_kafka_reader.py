"""A stream's checkpoint records the Kafka reader that wrote it. A new checkpoint carries an old one's committed
offsets when the old one is lakesync's former Python reader's, or when Spark's reader meets topics its
checkpoint never read; it is refused only while the old one holds a batch a Delta table recorded and the
checkpoint never committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakesync.core.errors import ConfigError
from lakesync.stream.kafka_reader import (
    CARRIED_FILE,
    READER_FILE,
    checkpoint_reader,
    prepare_checkpoint,
    record_reader,
)


def _batch(checkpoint: Path, batch_id: int, offsets: dict[str, dict[str, int]], *, committed: bool) -> None:
    """Spark's checkpoint files for one batch: its planned offsets, and its commit when ``committed``."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offsets)}\n')
    if committed:
        (checkpoint / "commits").mkdir(exist_ok=True)
        (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def _prepare(checkpoint: Path, *, new_topics: bool = False, written: bool = False):
    return prepare_checkpoint(checkpoint, pipeline="p", reads_new_topics=new_topics,
                              batch_written=lambda path, batch: written)


def test_a_checkpoint_with_no_planned_batch_has_no_reader_yet_and_an_unmarked_one_is_the_former_readers(
        tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert checkpoint_reader(checkpoint) is None
    assert _prepare(checkpoint) is None and not checkpoint.exists()  # nothing to carry, nothing moved
    _batch(checkpoint, 0, {"t": {"0": 3}}, committed=True)
    assert checkpoint_reader(checkpoint) == "lakesync"  # written before the reader was recorded


def test_the_recorded_reader_is_kept_once_written(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    record_reader(checkpoint)
    assert (checkpoint / READER_FILE).read_text() == "spark"
    (checkpoint / READER_FILE).write_text("lakesync")
    record_reader(checkpoint)  # never overwrites: only prepare_checkpoint's move starts a checkpoint anew
    assert checkpoint_reader(checkpoint) == "lakesync"


def test_a_former_readers_checkpoint_is_moved_aside_and_its_committed_offsets_carried(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    _batch(checkpoint, 0, {"t": {"0": 3}, "s": {"0": 1}}, committed=True)
    _batch(checkpoint, 1, {"t": {"0": 9, "1": 4}, "s": {"0": 2}}, committed=True)
    carried = _prepare(checkpoint)
    assert carried is not None
    assert carried.offsets == {("t", 0): 9, ("t", 1): 4, ("s", 0): 2}
    assert carried.old_checkpoint.name.startswith("checkpoint.lakesync-reader-")
    assert (carried.old_checkpoint / "commits" / "1").exists()  # kept whole
    assert checkpoint_reader(checkpoint) == "spark" and not (checkpoint / "offsets").exists()

    # stopped before the new checkpoint's first commit: it starts at the same offsets again
    _batch(checkpoint, 0, {"t": {"0": 12, "1": 4}, "s": {"0": 2}}, committed=False)
    assert _prepare(checkpoint) == carried
    _batch(checkpoint, 0, {"t": {"0": 12, "1": 4}, "s": {"0": 2}}, committed=True)
    assert _prepare(checkpoint) is None  # from now on its own offsets


def test_moving_again_before_the_new_checkpoints_first_commit_keeps_the_original_offsets(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    _batch(checkpoint, 0, {"t": {"0": 9}}, committed=True)
    first = _prepare(checkpoint)
    assert first is not None
    _batch(checkpoint, 0, {"t": {"0": 15}}, committed=False)  # Spark's first batch planned, then it failed
    again = _prepare(checkpoint, new_topics=True)  # a table joined before Spark's reader committed anything
    assert again is not None and again.offsets == {("t", 0): 9}
    assert again.old_checkpoint == first.old_checkpoint  # the origin handed on, not the empty Spark checkpoint


def test_a_batch_in_flight_that_delta_recorded_refuses_the_move_and_changes_nothing(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    record_reader(checkpoint)
    _batch(checkpoint, 0, {"t": {"0": 3}}, committed=True)
    _batch(checkpoint, 1, {"t": {"0": 7}}, committed=False)
    with pytest.raises(ConfigError) as refused:
        _prepare(checkpoint, new_topics=True, written=True)
    assert "batch 1" in refused.value.message and "never committed" in refused.value.message
    assert "--tables" in (refused.value.hint or "")
    assert (checkpoint / "offsets" / "1").exists()
    # the same batch that no Delta table recorded (it failed before writing) is carried over from batch 0's end
    carried = _prepare(checkpoint, new_topics=True, written=False)
    assert carried is not None and carried.offsets == {("t", 0): 3}


def test_a_former_readers_batch_in_flight_that_delta_recorded_names_the_release_to_finish_it(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    _batch(checkpoint, 0, {"t": {"0": 3}}, committed=True)
    _batch(checkpoint, 1, {"t": {"0": 7}}, committed=False)
    with pytest.raises(ConfigError) as refused:
        _prepare(checkpoint, written=True)
    assert "'lakesync' reader's" in refused.value.message
    assert "release you upgraded from" in (refused.value.hint or "")
    assert checkpoint_reader(checkpoint) == "lakesync" and (checkpoint / "offsets" / "1").exists()


def test_spark_reader_meeting_topics_its_checkpoint_never_read_starts_a_carrying_checkpoint(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    record_reader(checkpoint)
    _batch(checkpoint, 0, {"t": {"0": 3}}, committed=True)
    assert _prepare(checkpoint) is None  # same topics: resumes in place
    carried = _prepare(checkpoint, new_topics=True)
    assert carried is not None and carried.offsets == {("t", 0): 3}
    assert carried.old_checkpoint.name.startswith("checkpoint.spark-reader-")


def test_a_move_interrupted_between_its_renames_is_finished_at_the_next_start(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    _batch(checkpoint, 0, {"t": {"0": 4}}, committed=True)
    moved = tmp_path / "checkpoint.lakesync-reader-x"
    prepared = tmp_path / "checkpoint.next"
    prepared.mkdir()
    (prepared / CARRIED_FILE).write_text(str(moved))
    (prepared / READER_FILE).write_text("spark")
    checkpoint.rename(moved)  # the crash came before the second rename
    carried = _prepare(checkpoint)
    assert carried is not None and carried.offsets == {("t", 0): 4} and not prepared.exists()
