"""``lakesync enable-deletion-vectors``: a dry run changes nothing; ``--yes`` makes delta-rs tables writable by
delta-spark (the writer features delta-rs left out added, deletion vectors on), refuses a table delta-spark
can't write without stopping the tables after it, and a second run has nothing to do.

Verdicts come from the tables' raw ``_delta_log`` (read here) and the oracle's own Delta reader
(tests/oracle.py), with the expected rows written by this test.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakesync.cli.main import main
from lakesync.core.positions import SourcePosition
from lakesync.sink.delta import DeltaSink
from tests.bad_input.badkit import base_document, write_pipeline
from tests.oracle import read_delta_table

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROWS = 300


def _loaded(uri: str, columns: list[str]) -> None:
    """A table as the full load writes it with delta-rs: a NOT NULL key, a DATETIME column (delta-rs then writes
    writer version 7 without the ``invariants`` feature the NOT NULL key needs: delta-io/delta-rs#2957), and
    ``columns`` as strings."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("at", pa.timestamp("us")),
                        *[(name, pa.string()) for name in columns]])
    batch = pa.record_batch([pa.array(range(ROWS), pa.int64()), pa.array([dt.datetime(2026, 1, 1)] * ROWS),
                             *[pa.array([f"v{i}" for i in range(ROWS)]) for _ in columns]], schema=schema)
    DeltaSink(uri, key_columns=["id"]).write_snapshot([batch], schema=schema,
                                                      position=SourcePosition("binlog.000001", 4), snapshot_ts_ms=1)


def _log(uri: str) -> list[dict[str, Any]]:
    """Every action of the table's JSON commits, in order."""
    return [json.loads(line) for path in sorted(Path(uri, "_delta_log").glob("*.json"))
            for line in path.read_text().splitlines() if line]


def _latest(uri: str, kind: str) -> dict[str, Any]:
    return [action[kind] for action in _log(uri) if kind in action][-1]


def _upgrade(folder: Path, *extra: str) -> int:
    # the refused table first: the tables after it are still upgraded
    return main(["enable-deletion-vectors", "--pipeline", "up", "--pipelines-dir", str(folder / "pipelines"),
                 "--tables", "odd,accounts,absent", *extra])


def test_it_shows_then_switches_deletion_vectors_on_and_refuses_only_the_table_it_cant_write(
        tmp_path, spark, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # the report's cells on one line each
    write_pipeline(tmp_path / "pipelines", base_document("up", "shop", tmp_path))
    accounts, odd = str(tmp_path / "delta" / "accounts"), str(tmp_path / "delta" / "odd")
    _loaded(accounts, ["name"])
    _loaded(odd, ["first name"])  # a space: delta-spark takes it only under column mapping
    accounts_log, odd_log = _log(accounts), _log(odd)
    before = _latest(accounts, "protocol")  # the state this test is about
    assert "deletionVectors" not in before.get("readerFeatures", []) and \
        "invariants" not in before.get("writerFeatures", [])

    assert _upgrade(tmp_path) == 2  # the dry run: `odd` can't be upgraded
    shown = capsys.readouterr()
    assert "add the writer features invariants" in shown.out and "switch deletion vectors on" in shown.out
    assert "run again with --yes" in shown.out
    assert "first name" in shown.err and "no Delta table yet" in shown.out
    assert _log(accounts) == accounts_log and _log(odd) == odd_log  # nothing changed

    assert _upgrade(tmp_path, "--yes") == 2
    protocol = _latest(accounts, "protocol")
    assert protocol["minReaderVersion"] == 3 and protocol["minWriterVersion"] == 7
    assert "deletionVectors" in protocol["readerFeatures"] and "deletionVectors" in protocol["writerFeatures"]
    assert "invariants" in protocol["writerFeatures"]  # what delta-rs left out for the NOT NULL key
    assert _latest(accounts, "metaData")["configuration"]["delta.enableDeletionVectors"] == "true"
    assert _latest(accounts, "commitInfo")["engineInfo"].startswith("Apache-Spark")
    rows = read_delta_table(accounts)
    assert sorted(zip(rows["id"].to_pylist(), rows["name"].to_pylist(), strict=True)) == \
        [(i, f"v{i}") for i in range(ROWS)]
    assert _log(odd) == odd_log  # refused and left as it was
    assert "upgraded" in capsys.readouterr().out

    upgraded_log = _log(accounts)
    assert _upgrade(tmp_path, "--yes", "--tables", "accounts") == 0
    assert _log(accounts) == upgraded_log  # nothing left to do: no commit
    report = json.loads(_run_json(tmp_path, capsys))
    assert report["deletion_vectors"] is True and report["to_do"] == [] and report["reader_version"] == 3


def _run_json(folder: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["enable-deletion-vectors", "--pipeline", "up", "--pipelines-dir", str(folder / "pipelines"), "--tables",
                 "accounts", "--json"]) == 0
    return capsys.readouterr().out
