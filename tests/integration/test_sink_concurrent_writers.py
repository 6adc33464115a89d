"""Concurrent writers on one local Delta table (issue 12): the stream's MERGEs, a settlement-style repair and
OPTIMIZE at the same time. A commit that loses the race is re-planned and retried (the Delta log shows the
attempt); nothing is lost or applied twice. The table is read back with the oracle's reader."""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError

from lakesync.core.errors import SinkError
from lakesync.core.positions import SourcePosition
from lakesync.settlement.sync import _commit as settlement_commit
from lakesync.sink import OP, POS, TS, DeltaSink
from lakesync.sink.writer import ATTEMPT_KEY, commit_with_retry, optimize
from tests.oracle import read_delta

SNAPSHOT = SourcePosition("binlog.000003", 5000)
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
KEYS = range(1, 21)


def changes(rows: list[tuple[int, str | None, int, str]]) -> pa.Table:
    """rows of (id, name, binlog offset, op)."""
    return pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "name": pa.array([r[1] for r in rows], pa.string()),
        POS: pa.array([SourcePosition("binlog.000003", r[2], 1).key() for r in rows], pa.string()),
        OP: pa.array([r[3] for r in rows], pa.string()),
        TS: pa.array([r[2] for r in rows], pa.int64()),
    })


def loaded_sink(tmp_path: Path) -> DeltaSink:
    sink = DeltaSink(str(tmp_path / "lake" / "orders"), key_columns=["id"])
    batch = pa.record_batch([pa.array(list(KEYS), pa.int64()), pa.array(["init"] * len(KEYS))], schema=SCHEMA)
    sink.write_snapshot([batch], schema=SCHEMA, position=SNAPSHOT, snapshot_ts_ms=1)
    return sink


class Clock:
    """Source positions handed out in commit order, as the binlog would."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = SNAPSHOT.offset + 10

    def tick(self) -> int:
        with self._lock:
            self._next += 10
            return self._next


def test_stream_settlement_and_optimize_at_once_lose_nothing_and_double_nothing(tmp_path):
    sink = loaded_sink(tmp_path)
    clock = Clock()
    written: list[tuple[int, str, int]] = []  # every change either writer committed: (key, name, offset)
    record = threading.Lock()
    errors: list[BaseException] = []
    done = threading.Event()

    def stream() -> None:
        rng = random.Random(1)
        for batch in range(25):
            rows = [(key, f"s{batch}-{key}", clock.tick(), "u") for key in rng.sample(list(KEYS), 4)]
            sink.apply_changes(changes(rows), app_id="stream", batch_version=batch)
            with record:
                written.extend(r[:3] for r in rows)

    def settlement() -> None:
        rng = random.Random(2)
        pipeline = SimpleNamespace(delta=SimpleNamespace(storage_options={}, writer="delta_rs"))
        for run in range(1, 13):
            offset = clock.tick()  # the position read before the settlement's SELECT
            rows = [(key, f"r{run}-{key}", offset, "r") for key in rng.sample(list(KEYS), 3)]
            props = CommitProperties(app_transactions=[Transaction("settlement:orders:day", run)])
            settlement_commit(sink.table_uri, pipeline, DeltaTable(sink.table_uri), changes(rows), ["id"],
                              SourcePosition("binlog.000003", offset, 1).key(), props)
            with record:
                written.extend(r[:3] for r in rows)

    def maintenance() -> None:
        # OPTIMIZE again and again while both write, with a pause as a maintenance job has between its tables
        # (back to back, every 0.05 s, it mostly took CPU from the two writers on a busy machine)
        while not done.is_set():
            optimize(sink.table_uri)
            done.wait(0.5)

    def guarded(target):
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
        return threading.Thread(target=run)

    writers = [guarded(stream), guarded(settlement)]
    optimizer = guarded(maintenance)
    for thread in (*writers, optimizer):
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    optimizer.join()
    assert not errors, errors

    expected = {key: "init" for key in KEYS}
    newest = {}
    for key, name, offset in written:
        if offset > newest.get(key, (0, ""))[0]:
            newest[key] = (offset, name)
    expected.update({key: name for key, (_, name) in newest.items()})
    _, rows = read_delta(sink.table_uri)
    assert len(rows) == len(KEYS)
    assert {row["id"]: row["name"] for row in rows} == expected
    assert sink.committed_batch_version("stream") == 24


def test_a_merge_that_loses_the_race_to_optimize_is_retried_and_the_log_shows_it(tmp_path, caplog):
    sink = loaded_sink(tmp_path)
    for batch in range(3):  # inserts: one small file each, for OPTIMIZE to compact
        sink.apply_changes(changes([(100 + batch, "x", 6000 + batch * 10, "c")]), app_id="stream",
                           batch_version=batch)
    real_open = sink._open
    stale = [real_open()]  # the MERGE planned on this version ...
    optimize(sink.table_uri)  # ... and OPTIMIZE committed first
    sink._open = lambda: stale.pop() if stale else real_open()  # type: ignore[method-assign]

    with caplog.at_level(logging.WARNING, logger="lakesync.sink"):
        result = sink.apply_changes(changes([(1, "won", 7000, "u")]), app_id="stream", batch_version=3)

    assert result.rows_updated == 1
    assert any("commit conflict" in r.getMessage() for r in caplog.records)
    assert DeltaTable(sink.table_uri).history(1)[0][ATTEMPT_KEY] == "2"
    _, rows = read_delta(sink.table_uri)
    assert {row["id"]: row["name"] for row in rows}[1] == "won" and len(rows) == len(KEYS) + 3


def test_a_step_that_keeps_losing_fails_loudly_and_says_rerunning_is_safe():
    def always_conflicts(attempt: int) -> None:
        raise CommitFailedError("a concurrent transaction deleted the same data")

    with pytest.raises(SinkError) as raised:
        commit_with_retry(always_conflicts, what="the test step", table_uri="/lake/t", attempts=3,
                          base_delay_s=0)
    assert "3 times" in str(raised.value) and "re-running is safe" in (raised.value.hint or "")
