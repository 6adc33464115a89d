"""A stream's checkpoint belongs to the Kafka reader that wrote it; changing ``stream.kafka_reader`` moves it
aside and carries its committed offsets over, or refuses while a batch is planned and not committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakesync.core.errors import ConfigError
from lakesync.stream.kafka_reader import READER_FILE, checkpoint_reader, record_reader, switch_reader


def _batch(checkpoint: Path, batch_id: int, offsets: dict[str, dict[str, int]], *, committed: bool) -> None:
    """Spark's checkpoint files for one batch: its planned offsets, and its commit when ``committed``."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offsets)}\n')
    if committed:
        (checkpoint / "commits").mkdir(exist_ok=True)
        (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_a_checkpoint_with_no_planned_batch_has_no_reader_yet_and_an_unmarked_one_is_lakesyncs(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert checkpoint_reader(checkpoint) is None
    _batch(checkpoint, 0, {"t": {"0": 3}}, committed=True)
    assert checkpoint_reader(checkpoint) == "lakesync"  # written before the reader was recorded
    assert switch_reader(checkpoint, "lakesync", pipeline="p") is None
    assert checkpoint.is_dir()


def test_the_recorded_reader_is_kept_once_written(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    record_reader(checkpoint, "spark")
    record_reader(checkpoint, "lakesync")
    assert (checkpoint / READER_FILE).read_text() == "spark"
    assert checkpoint_reader(checkpoint) == "spark"


def test_changing_readers_moves_the_checkpoint_aside_and_carries_its_committed_offsets(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    _batch(checkpoint, 0, {"t": {"0": 3}, "s": {"0": 1}}, committed=True)
    _batch(checkpoint, 1, {"t": {"0": 9, "1": 4}, "s": {"0": 2}}, committed=True)
    carried = switch_reader(checkpoint, "spark", pipeline="p")
    assert carried is not None
    assert carried.offsets == {("t", 0): 9, ("t", 1): 4, ("s", 0): 2}
    assert carried.old_checkpoint.name.startswith("checkpoint.lakesync-reader-")
    assert (carried.old_checkpoint / "commits" / "1").exists()  # kept whole
    assert checkpoint_reader(checkpoint) == "spark" and not (checkpoint / "offsets").exists()

    # stopped before the new checkpoint's first commit: it starts at the same offsets again
    _batch(checkpoint, 0, {"t": {"0": 12, "1": 4}, "s": {"0": 2}}, committed=False)
    again = switch_reader(checkpoint, "spark", pipeline="p")
    assert again == carried
    _batch(checkpoint, 0, {"t": {"0": 12, "1": 4}, "s": {"0": 2}}, committed=True)
    assert switch_reader(checkpoint, "spark", pipeline="p") is None  # from now on its own offsets


def test_a_planned_batch_never_committed_refuses_the_change_and_moves_nothing(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    record_reader(checkpoint, "spark")
    _batch(checkpoint, 0, {"t": {"0": 3}}, committed=True)
    _batch(checkpoint, 1, {"t": {"0": 7}}, committed=False)
    with pytest.raises(ConfigError) as refused:
        switch_reader(checkpoint, "lakesync", pipeline="p")
    assert "batch 1" in refused.value.message and "not committed" in refused.value.message
    assert "set stream.kafka_reader back to 'spark'" in (refused.value.hint or "")
    assert (checkpoint / "offsets" / "1").exists()
