"""Maintenance with ``delta.writer: delta_spark`` (lakesync.sink.spark_maintenance): OPTIMIZE, deletion
vectors purged, VACUUM, each committed by delta-spark, on a table the stream's delta-spark MERGEs wrote.

Verdicts come from the oracle's own Delta reader and log replay (tests/oracle.py, tests/oracle_delta_log.py)
and from the files on disk, with the expected rows computed here.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from lakesync.core.positions import SourcePosition
from lakesync.sink import OP, POS, TS
from lakesync.sink.spark_maintenance import maintain_table
from lakesync.sink.spark_writes import SparkDeltaSink
from tests.oracle import read_delta_table
from tests.oracle_delta_log import replay_log

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SNAPSHOT = SourcePosition("binlog.000003", 5000)
ROWS = 5_000


def _loaded(tmp_path: Path) -> tuple[SparkDeltaSink, dict[int, str]]:
    """A table as the full load writes it (delta-rs, a NOT NULL key: delta-spark needs a feature added)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    sink = SparkDeltaSink(str(tmp_path / "lake" / "accounts"), key_columns=["id"])
    sink.write_snapshot([pa.record_batch([pa.array(range(ROWS), pa.int64()), pa.array(["x"] * ROWS)], schema=schema)],
                        schema=schema, position=SNAPSHOT, snapshot_ts_ms=1)
    return sink, dict.fromkeys(range(ROWS), "x")


def _batch(sink: SparkDeltaSink, expected: dict[int, str], batch: int) -> None:
    """One stream batch by delta-spark: updates and a delete (deletion vectors), and an insert; ``expected``
    follows it."""
    ids = [batch * 7 + 1, batch * 7 + 2, ROWS + batch]
    deleted = batch * 7 + 3
    offset = 6000 + batch * 10
    changes = pa.table({"id": pa.array([*ids, deleted], pa.int64()), "name": [f"b{batch}"] * 3 + [None],
                        POS: [SourcePosition("binlog.000003", offset + i, 1).key() for i in range(4)],
                        OP: ["u", "u", "c", "d"], TS: pa.array([offset] * 4, pa.int64())})
    sink.apply_changes(changes, app_id="stream", batch_version=batch)
    expected.update(dict.fromkeys(ids, f"b{batch}"))
    expected.pop(deleted)


def _live_files(uri: str) -> list:
    return replay_log(pafs.LocalFileSystem(), uri).files


def _commit_infos(uri: str) -> list[dict]:
    return [json.loads(line)["commitInfo"] for path in sorted(Path(uri, "_delta_log").glob("*.json"))
            for line in path.read_text().splitlines() if line and "commitInfo" in json.loads(line)]


def test_maintenance_compacts_purges_deletion_vectors_and_vacuums_only_files_past_the_retention(tmp_path, spark):
    sink, expected = _loaded(tmp_path)
    for batch in range(2):
        _batch(sink, expected, batch)
    uri = sink.table_uri
    assert any(live.deletion_vector for live in _live_files(uri))  # the state this test is about
    files_before = len(_live_files(uri))
    data_file = next(Path(uri).glob("*.parquet"))
    old_orphan, young_orphan = Path(uri, "part-orphan-old.parquet"), Path(uri, "part-orphan-young.parquet")
    for orphan in (old_orphan, young_orphan):  # what a failed write leaves: no commit names them
        shutil.copy(data_file, orphan)
    week_and_a_day_ago = time.time() - 8 * 24 * 3600
    os.utime(old_orphan, (week_and_a_day_ago, week_and_a_day_ago))

    report = maintain_table(uri, key_columns=["id"], retention_hours=1)  # raised to a week

    assert {r["id"]: r["name"] for r in read_delta_table(uri).to_pylist()} == expected
    live = _live_files(uri)
    assert not any(file.deletion_vector for file in live), "a current file still carries deleted rows"
    assert len(live) < files_before and report["files_removed_by_optimize"] > 0
    assert all(Path(file.path).exists() for file in live)
    assert report["files_vacuumed"] == 1 and not old_orphan.exists() and young_orphan.exists()
    maintenance = [info for info in _commit_infos(uri) if info["operation"] in ("OPTIMIZE", "REORG", "VACUUM END")]
    assert {info["operation"] for info in maintenance} >= {"OPTIMIZE", "VACUUM END"}
    assert all("Delta-Lake" in info.get("engineInfo", "") for info in maintenance)
    optimize = next(info for info in maintenance if info["operation"] == "OPTIMIZE")
    assert json.loads(optimize["userMetadata"])["lakesync.operation"] == "optimize"


def test_the_purge_rewrites_the_files_optimize_left_with_deletion_vectors(tmp_path, spark, monkeypatch):
    """OPTIMIZE leaves large files with few deleted rows as they are (here: it is made to leave every file);
    the purge rewrites each file that carries a deletion vector, so no current file holds a deleted row."""
    from lakesync.sink import spark_maintenance

    sink, expected = _loaded(tmp_path)
    _batch(sink, expected, 0)
    with_vectors = [live.path for live in _live_files(sink.table_uri) if live.deletion_vector]
    assert with_vectors

    def leaves_every_file(session, path, key_columns):
        return session.createDataFrame([], "path string, metrics struct<numFilesAdded:long,numFilesRemoved:long>")

    monkeypatch.setattr(spark_maintenance, "optimize_table", leaves_every_file)
    report = maintain_table(sink.table_uri, key_columns=["id"], retention_hours=168)

    assert report["files_rewritten_by_purge"] >= len(with_vectors)
    live = _live_files(sink.table_uri)
    assert not any(file.deletion_vector for file in live) and not set(with_vectors) & {f.path for f in live}
    assert {r["id"]: r["name"] for r in read_delta_table(sink.table_uri).to_pylist()} == expected
    assert "REORG" in [info["operation"] for info in _commit_infos(sink.table_uri)]


def test_maintenance_and_the_streams_merges_on_one_table_both_finish(tmp_path, spark, monkeypatch):
    """OPTIMIZE and MERGE rewrite the same files: whichever loses the commit race retries (a conflict is
    injected into OPTIMIZE's first attempt, so the retry runs whatever the timing), and no change is lost."""
    from delta.exceptions import ConcurrentDeleteReadException
    from delta.tables import DeltaTable as SparkDeltaTable

    sink, expected = _loaded(tmp_path)
    _batch(sink, expected, 0)
    optimize = SparkDeltaTable.optimize
    attempts: list[int] = []

    def conflicting_once(self):
        attempts.append(1)
        if len(attempts) == 1:
            raise ConcurrentDeleteReadException(message="a concurrent MERGE removed a file this OPTIMIZE read")
        return optimize(self)

    monkeypatch.setattr(SparkDeltaTable, "optimize", conflicting_once)
    outcome: dict[str, object] = {}

    def maintain() -> None:
        try:
            outcome["report"] = maintain_table(sink.table_uri, key_columns=["id"], retention_hours=168)
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    maintenance = threading.Thread(target=maintain, name="maintenance")
    maintenance.start()
    for batch in range(1, 3):
        _batch(sink, expected, batch)
    maintenance.join(300)

    assert "error" not in outcome and "report" in outcome, outcome
    assert len(attempts) >= 2
    assert {r["id"]: r["name"] for r in read_delta_table(sink.table_uri).to_pylist()} == expected
    assert sink.committed_batch_version("stream") == 2
