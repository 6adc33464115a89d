"""The maintenance of a table's tombstone side table (lakesync.sink.maintenance), with both writers.

Each stream batch with deletes appends one small file to the side table; maintenance purges the expired
tombstones, then compacts and VACUUMs the side table, and the tombstones it keeps must still stop a stale
change. Verdicts come from the oracle's own Delta reader and log replay (tests/oracle.py,
tests/oracle_delta_log.py), with the expected rows computed here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from lakesync.core.positions import SourcePosition
from lakesync.core.table_layout import DELETED_MS
from lakesync.sink import OP, POS, TS, tombstone_uri
from lakesync.sink.maintenance import TOMBSTONE_TABLE, maintain_with_tombstones
from lakesync.sink.spark_writes import SparkDeltaSink
from tests.oracle import read_delta_table
from tests.oracle_delta_log import replay_log

pytestmark = [pytest.mark.integration]

SNAPSHOT = SourcePosition("binlog.000003", 5000)
ROWS = 200
BATCHES = 4


def _change(key: int, offset: int, op: str, name: str | None) -> dict:
    return {"id": key, "name": name, POS: SourcePosition("binlog.000003", offset, 1).key(), OP: op, TS: offset}


def _apply(sink, changes: list[dict], batch: int) -> None:
    table = pa.Table.from_pylist(changes, schema=pa.schema([("id", pa.int64()), ("name", pa.string()),
                                                           (POS, pa.string()), (OP, pa.string()), (TS, pa.int64())]))
    sink.apply_changes(table, app_id="stream", batch_version=batch)


def _live_files(uri: str) -> list:
    return replay_log(pafs.LocalFileSystem(), uri).files


def _engines(uri: str, operation: str) -> set[str]:
    infos = [json.loads(line)["commitInfo"] for path in sorted(Path(uri, "_delta_log").glob("*.json"))
             for line in path.read_text().splitlines() if line and "commitInfo" in json.loads(line)]
    return {info.get("engineInfo", "") for info in infos if info["operation"] == operation}


def test_maintenance_purges_then_compacts_the_tombstone_table_and_its_tombstones_still_stop_stale_changes(
        tmp_path, writer):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    sink = writer(str(tmp_path / "lake" / "accounts"), key_columns=["id"])
    sink.write_snapshot([pa.record_batch([pa.array(range(ROWS), pa.int64()), pa.array(["x"] * ROWS)], schema=schema)],
                        schema=schema, position=SNAPSHOT, snapshot_ts_ms=1)
    expected = dict.fromkeys(range(ROWS), "x")
    deletes = {}  # key -> the source time (ms) of its delete
    for batch in range(BATCHES):  # each: an update and a delete, so one tombstone file per batch
        offset = 6000 + batch * 10
        _apply(sink, [_change(batch * 2, offset, "u", f"b{batch}"), _change(batch * 2 + 1, offset + 1, "d", None)],
               batch)
        expected[batch * 2] = f"b{batch}"
        expected.pop(batch * 2 + 1)
        deletes[batch * 2 + 1] = offset + 1
    side = tombstone_uri(sink.table_uri)
    assert len(_live_files(side)) == BATCHES  # the state this test is about
    cutoff_ms = 6000 + 2 * 10  # the deletes of batches 0 and 1 are older
    kept = {key: at for key, at in deletes.items() if at >= cutoff_ms}
    name = "delta_spark" if writer is SparkDeltaSink else "delta_rs"

    below_the_threshold = maintain_with_tombstones(name, sink.table_uri, key_columns=["id"], retention_hours=168,
                                                   tombstones_before_ms=0)  # purges nothing; 4 files < 50
    assert below_the_threshold[TOMBSTONE_TABLE + "files"] == BATCHES
    assert len(_live_files(side)) == BATCHES and not _engines(side, "OPTIMIZE")

    report = maintain_with_tombstones(name, sink.table_uri, key_columns=["id"], retention_hours=168,
                                      tombstones_before_ms=cutoff_ms, side_table_min_files=BATCHES // 2)

    assert report["tombstones_purged"] == BATCHES - len(kept)
    tombstones = read_delta_table(side).to_pylist()
    assert {row["id"]: row[DELETED_MS] for row in tombstones} == kept
    assert len(_live_files(side)) == 1, "the side table's files were not compacted"
    assert report[TOMBSTONE_TABLE + "files_removed_by_optimize"] >= 2
    assert {r["id"]: r["name"] for r in read_delta_table(sink.table_uri).to_pylist()} == expected
    engine = "Delta-Lake" if name == "delta_spark" else "delta-rs"
    assert _engines(side, "OPTIMIZE") and all(engine in info for info in _engines(side, "OPTIMIZE"))

    # a stale update of a key whose delete is kept (older position than the delete) must not bring it back
    stale_key = max(kept)
    _apply(sink, [_change(stale_key, kept[stale_key] - 1, "u", "stale")], BATCHES)
    assert {r["id"]: r["name"] for r in read_delta_table(sink.table_uri).to_pylist()} == expected


def test_a_delta_rs_tombstone_delete_that_loses_the_commit_race_is_retried(tmp_path, monkeypatch):
    """Compacting a side table removes every file a concurrent delete (a purge, a full load's clear) planned
    against; delta-rs then raises CommitFailedError, which must be retried on the table read again, not fail."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    from lakesync.sink import DeltaSink
    from lakesync.sink.tombstones import tombstone_store

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    sink = DeltaSink(str(tmp_path / "lake" / "accounts"), key_columns=["id"])
    sink.write_snapshot([pa.record_batch([pa.array(range(10), pa.int64()), pa.array(["x"] * 10)], schema=schema)],
                        schema=schema, position=SNAPSHOT, snapshot_ts_ms=1)
    _apply(sink, [_change(1, 6000, "d", None), _change(2, 6001, "d", None)], 0)
    real_delete, calls = DeltaTable.delete, []

    def delete_losing_the_first_race(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise CommitFailedError("Commit failed: a concurrent transaction deleted the same data")
        return real_delete(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "delete", delete_losing_the_first_race)
    store = tombstone_store(sink.table_uri, key_columns=["id"], storage_options=None, writer="delta_rs")

    assert store.purge(6001) == 1
    assert len(calls) == 2
    assert [row["id"] for row in read_delta_table(tombstone_uri(sink.table_uri)).to_pylist()] == [2]
