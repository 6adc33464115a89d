"""Debezium snapshotting again after a table's load (it started without offsets): its snapshot reads are found
after the load's position, reach the driver instead of being merged as ordinary upserts, and the table is
re-loaded (or stopped with the command) at the first of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pyarrow as pa
import pytest

from lakesync.core.positions import SourcePosition
from lakesync.core.table_layout import OP
from lakesync.events.envelope import decode
from lakesync.stream.columnar_decode import decode_table
from lakesync.stream.decode import SnapshotReadsError, TableChanges
from lakesync.stream.schema_changes import new_snapshot_in_events
from tests.unit.test_columnar_decode import kafka_records
from tests.unit.test_debezium_added_columns import TOPIC, _schema_before_the_ddl

RECORDED = json.loads((Path(__file__).parents[1] / "fixtures" / "debezium_mariadb_added_columns.json").read_text())


def _read(pos: int) -> bytes:
    """The real connector's record turned into a snapshot read at binlog offset ``pos`` (as a new snapshot
    writes them: op r, before null, source.snapshot true)."""
    record = copy.deepcopy(RECORDED["before_ddl"])
    payload = record["payload"]
    payload.update(op="r", before=None)
    payload["source"].update(pos=pos, row=0, snapshot="true")
    return json.dumps(record).encode()


def test_snapshot_reads_after_the_load_are_found_at_the_first_of_them():
    changes = TableChanges([decode(_read(9_000)), decode(_read(7_000))])
    load = SourcePosition(decode(_read(0)).position.file, 5_000).key()
    assert changes.first_snapshot_read(after=load) == decode(_read(7_000)).position.key()


def test_snapshot_reads_at_or_before_the_load_are_the_initial_snapshot_and_change_nothing():
    changes = TableChanges([decode(_read(4_000))])
    load = SourcePosition(decode(_read(0)).position.file, 5_000).key()
    assert changes.first_snapshot_read(after=load) is None


def test_executors_send_snapshot_reads_after_the_load_to_the_driver_instead_of_merging_them():
    records = kafka_records([(_read(4_000), []), (_read(9_000), [])], topic=TOPIC)
    load = SourcePosition(decode(_read(0)).position.file, 5_000).key()
    with pytest.raises(SnapshotReadsError):
        decode_table(records, TOPIC, "t", _schema_before_the_ddl(), after=load)


def test_executors_decode_the_initial_snapshots_reads_themselves():
    """Reads at or before the load (Debezium's first snapshot, usually the whole table) are decoded where the
    data is, not shipped raw to the driver's record decoder."""
    records = kafka_records([(_read(3_000), []), (_read(4_000), [])], topic=TOPIC)
    load = SourcePosition(decode(_read(0)).position.file, 5_000).key()
    some_columns = pa.schema([("id", pa.int32()), ("v", pa.string())])  # the rest were added before the load
    decoded = decode_table(records, TOPIC, "t", some_columns, after=load)
    assert decoded.select(["id", "v", OP]).to_pylist() == [{"id": 3, "v": "three", OP: "r"}] * 2


def test_a_new_snapshot_reloads_the_table_and_says_why_deletes_are_missing():
    action = new_snapshot_in_events("orders", "00000001.000000009000.000000", pipeline="demo")
    assert action.reload
    assert "new snapshot" in (action.stop_reason or "")
    assert "lakesync snapshot --pipeline demo --tables orders" in (action.stop_reason or "")
