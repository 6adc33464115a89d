"""The full load's state file: round trip, atomic writes, the smallest position wins, damage is explained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakesync.core.errors import ConfigError
from lakesync.core.positions import SourcePosition
from lakesync.full_load.state import ChunkDone, LoadState, position_to_json


def test_state_round_trips_through_the_file(tmp_path: Path) -> None:
    state = LoadState.for_pipeline_dir(tmp_path)
    position = SourcePosition("binlog.000003", 1542, 0, "0-1-17")
    state.record_position(position)
    entry = state.table("transactions")
    entry.chunks_done.append(ChunkDone("1-100", "part-1.parquet", 10, 100, position.key(),
                                       position_to_json(position), '{"numRecords": 100}'))
    entry.status, entry.rows = "done", 100
    state.save()

    again = LoadState.for_pipeline_dir(tmp_path)
    assert again.position == position and again.position.gtid == "0-1-17"
    assert again.is_done("transactions") and again.tables["transactions"].chunk_ids() == {"1-100"}
    document = json.loads((tmp_path / "full_load.json").read_text())
    assert document["position"] == {"file": "binlog.000003", "offset": 1542, "row": 0, "gtid": "0-1-17",
                                    "key": position.key()}
    assert document["tables"]["transactions"]["status"] == "done"


def test_save_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    state = LoadState.for_pipeline_dir(tmp_path / "new")
    state.save()
    state.save()
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["full_load.json"]


def test_recorded_position_is_the_smallest_seen(tmp_path: Path) -> None:
    state = LoadState.for_pipeline_dir(tmp_path)
    state.record_position(SourcePosition("binlog.000002", 500))
    state.record_position(SourcePosition("binlog.000001", 900))
    state.record_position(SourcePosition("binlog.000002", 100))
    assert state.position == SourcePosition("binlog.000001", 900)


def test_missing_file_is_an_empty_state(tmp_path: Path) -> None:
    state = LoadState.for_pipeline_dir(tmp_path)
    assert state.position is None and state.tables == {} and not state.is_done("t")


def test_damaged_file_says_how_to_start_over(tmp_path: Path) -> None:
    (tmp_path / "full_load.json").write_text('{"position": {"file": "x"}}')
    with pytest.raises(ConfigError, match="damaged") as error:
        LoadState.for_pipeline_dir(tmp_path)
    assert "delete it" in (error.value.hint or "")


def test_forgetting_a_table_keeps_the_others_and_their_smallest_position(tmp_path: Path) -> None:
    state = LoadState.for_pipeline_dir(tmp_path)
    for name, offset in (("a", 100), ("b", 200), ("c", 300)):
        position = SourcePosition("binlog.000001", offset)
        entry = state.table(name)
        entry.status, entry.position = "done", position_to_json(position)
        state.record_position(position)
    state.forget(["a"])
    assert set(state.tables) == {"b", "c"} and state.position == SourcePosition("binlog.000001", 200)
    state.forget(["b", "c"])
    assert state.position is None
