"""A checkpoint restored from an older copy re-plans batch N over a larger range (issue 10).

The first run committed batch N covering offsets [a, b); the restored checkpoint plans batch N again, now
covering [a, c). The sink must apply what the first batch N lacked and apply nothing twice, for both
semantics and both writers (``delta.writer``), and say (log) that the checkpoint is behind what Delta
recorded. Delta is read back with the
oracle's own reader (``tests.oracle.read_delta``), not with the sink.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa

from lakesync.core.positions import SourcePosition
from lakesync.sink import OP, POS, TS, DeltaSink
from tests.oracle import read_delta

SNAPSHOT = SourcePosition("binlog.000003", 5000)
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def pos(offset: int) -> str:
    return SourcePosition("binlog.000003", offset, 1).key()


def changes(rows: list[tuple[int, str | None, int, str]]) -> pa.Table:
    """rows of (id, name, binlog offset, op)."""
    return pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "name": pa.array([r[1] for r in rows], pa.string()),
        POS: pa.array([pos(r[2]) for r in rows], pa.string()),
        OP: pa.array([r[3] for r in rows], pa.string()),
        TS: pa.array([r[2] for r in rows], pa.int64()),
    })


def loaded_sink(tmp_path: Path, writer: type[DeltaSink], semantics: str = "exactly_once") -> DeltaSink:
    keys = ["id"] if semantics == "exactly_once" else []
    sink = writer(str(tmp_path / "lake" / "orders"), key_columns=keys, semantics=semantics)  # type: ignore[arg-type]
    batch = pa.record_batch([pa.array([1, 2], pa.int64()), pa.array(["a", "b"])], schema=SCHEMA)
    sink.write_snapshot([batch], schema=SCHEMA, position=SNAPSHOT, snapshot_ts_ms=1)
    return sink


# The topic's events in offset order: the first run's batch 4 held the first two, the re-planned one all four.
EVENTS = [(10, "new", 6000, "c"), (1, "a1", 6100, "u"), (2, None, 6200, "d"), (11, "later", 6300, "c")]


def test_replanned_batch_with_a_larger_range_applies_what_the_first_lacked(tmp_path, writer):
    sink = loaded_sink(tmp_path, writer)
    sink.apply_changes(changes(EVENTS[:2]), app_id="stream", batch_version=4)
    replay = sink.apply_changes(changes(EVENTS), app_id="stream", batch_version=4)

    assert not replay.skipped
    _, rows = read_delta(sink.table_uri)
    assert sorted((r["id"], r["name"]) for r in rows) == [(1, "a1"), (10, "new"), (11, "later")]
    assert sink.committed_batch_version("stream") == 4


def test_append_log_replanned_batch_appends_only_the_missing_changes(tmp_path, writer):
    sink = loaded_sink(tmp_path, writer, "append_log")
    sink.apply_changes(changes(EVENTS[:2]), app_id="stream", batch_version=4)
    sink.apply_changes(changes(EVENTS), app_id="stream", batch_version=4)
    # a restored checkpoint further back re-plans batch 3 too, overlapping what batch 4 committed
    sink.apply_changes(changes(EVENTS[1:3]), app_id="stream", batch_version=3)

    _, rows = read_delta(sink.table_uri, lakesync_columns=True)
    logged = sorted((r[POS], r[OP]) for r in rows if r[OP] != "r")
    assert logged == sorted((pos(e[2]), e[3]) for e in EVENTS)


def test_exactly_identical_replay_is_still_skipped(tmp_path, writer):
    sink = loaded_sink(tmp_path, writer)
    sink.apply_changes(changes(EVENTS[:2]), app_id="stream", batch_version=4)
    assert sink.apply_changes(changes(list(reversed(EVENTS[:2]))), app_id="stream", batch_version=4).skipped


def test_a_checkpoint_behind_the_tables_recorded_progress_is_logged(tmp_path, caplog, writer):
    sink = loaded_sink(tmp_path, writer)
    sink.apply_changes(changes(EVENTS[:2]), app_id="stream", batch_version=4)
    sink.apply_changes(changes(EVENTS[2:]), app_id="stream", batch_version=5)
    with caplog.at_level(logging.WARNING, logger="lakesync.sink"):
        sink.apply_changes(changes(EVENTS[1:]), app_id="stream", batch_version=4)

    behind = [r for r in caplog.records if "checkpoint is behind" in r.getMessage()]
    assert behind and "batch 4" in behind[0].getMessage() and "5" in behind[0].getMessage()
    assert sink.committed_batch_version("stream") == 5  # the recorded progress never moves backwards
