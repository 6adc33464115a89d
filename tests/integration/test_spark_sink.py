"""What only the delta-spark writer (``delta.writer: delta_spark``) does: deletion vectors, the app transaction
settings of its session, and tables delta-rs created that delta-spark would refuse.

The behaviour both writers share (exactly once, tombstones, replays) is proven for both in test_delta_sink.py
and test_sink_restored_checkpoint.py. Verdicts come from the oracle's own Delta reader and from the raw
``_delta_log`` JSON, not from the sink.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from lakesync.core.errors import SinkError
from lakesync.core.positions import SourcePosition
from lakesync.sink import OP, POS, TS
from lakesync.sink.spark_tombstones import SparkTombstoneStore
from lakesync.sink.spark_writes import TXN_APP_ID, TXN_VERSION, USER_METADATA, SparkDeltaSink
from tests.oracle import read_delta_table

SNAPSHOT = SourcePosition("binlog.000003", 5000)


def pos(offset: int) -> str:
    return SourcePosition("binlog.000003", offset, 1).key()


def commits(uri: str) -> list[dict]:
    """Every action of the table's log, read as the JSON lines they are."""
    return [json.loads(line) for path in sorted(Path(uri, "_delta_log").glob("*.json"))
            for line in path.read_text().splitlines() if line]


def loaded(tmp_path: Path, schema: pa.Schema, columns: list[pa.Array]) -> SparkDeltaSink:
    sink = SparkDeltaSink(str(tmp_path / "lake" / "orders"), key_columns=["id"])
    sink.write_snapshot([pa.record_batch(columns, schema=schema)], schema=schema, position=SNAPSHOT,
                        snapshot_ts_ms=1)
    return sink


def test_an_update_of_a_few_rows_marks_them_deleted_in_a_vector_instead_of_rewriting_the_file(tmp_path, spark):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    sink = loaded(tmp_path, schema, [pa.array(range(10_000), pa.int64()), pa.array(["x"] * 10_000)])
    changes = pa.table({"id": pa.array([7, 9_000], pa.int64()), "name": ["seven", None], POS: [pos(6000), pos(6001)],
                        OP: ["u", "d"], TS: pa.array([6000, 6001], pa.int64())})

    result = sink.apply_changes(changes, app_id="stream", batch_version=0)

    actions = commits(sink.table_uri)
    vectors = [a["add"]["deletionVector"] for a in actions if "add" in a and a["add"].get("deletionVector")]
    assert vectors and sum(v["cardinality"] for v in vectors) == 2  # the updated row and the deleted one
    assert any("Delta-Lake" in a["commitInfo"].get("engineInfo", "") and a["commitInfo"]["operation"] == "MERGE"
               for a in actions if "commitInfo" in a)
    assert result.rows_updated == 1 and result.rows_deleted == 1
    rows = {r["id"]: r["name"] for r in read_delta_table(sink.table_uri).to_pylist()}
    assert len(rows) == 9_999 and rows[7] == "seven" and 9_000 not in rows and rows[8] == "x"


def test_the_app_transaction_settings_are_unset_after_the_write_so_the_next_one_is_not_skipped(tmp_path, spark):
    """Delta silently skips a commit whose txnVersion is not above the recorded one: settings left on the
    session would make the next, unrelated write of the table vanish."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    sink = loaded(tmp_path, schema, [pa.array([1, 2], pa.int64()), pa.array(["a", "b"])])

    def change(name: str, offset: int) -> pa.Table:
        return pa.table({"id": pa.array([1], pa.int64()), "name": [name], POS: [pos(offset)], OP: ["u"],
                         TS: pa.array([offset], pa.int64())})

    sink.apply_changes(change("first", 6000), app_id="stream", batch_version=9)
    session = sink.session()
    assert {key: session.conf.get(key, None) for key in (TXN_APP_ID, TXN_VERSION, USER_METADATA)} == dict.fromkeys(
        (TXN_APP_ID, TXN_VERSION, USER_METADATA))
    # batch 9 re-planned with other work (a restored checkpoint): applied with no app transaction, which settings
    # left on the session would have turned into a silently skipped (stream, 9) commit
    sink.apply_changes(change("second", 6100), app_id="stream", batch_version=9)

    txns = [a["txn"] for a in commits(sink.table_uri) if "txn" in a]
    assert {"appId": "stream", "version": 9} in [{k: t[k] for k in ("appId", "version")} for t in txns]
    assert {r["id"]: r["name"] for r in read_delta_table(sink.table_uri).to_pylist()} == {1: "second", 2: "b"}
    assert sink.committed_batch_version("stream") == 9


def test_a_delta_rs_table_with_not_null_and_datetime_columns_gets_the_features_delta_spark_needs(tmp_path, spark):
    """delta-rs writes such a table at writer version 7 without listing 'invariants' (delta-rs#2957), which
    delta-spark refuses to open; the sink lists it, switches deletion vectors on, then merges."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("at", pa.timestamp("us")),
                        pa.field("name", pa.string(), nullable=False)])
    sink = loaded(tmp_path, schema, [pa.array([1, 2], pa.int64()),
                                     pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("us")),
                                     pa.array(["a", "b"])])
    before = [a["protocol"] for a in commits(sink.table_uri) if "protocol" in a][-1]
    assert "invariants" not in before.get("writerFeatures", [])  # the state this test is about

    changes = pa.table({"id": pa.array([2, 3], pa.int64()),
                        "at": pa.array([dt.datetime(2025, 6, 30, 23, 59, 59, 999_999)] * 2, pa.timestamp("us")),
                        "name": ["b2", "c"], POS: [pos(6000), pos(6001)], OP: ["u", "c"],
                        TS: pa.array([6000, 6001], pa.int64())})
    sink.apply_changes(changes, app_id="stream", batch_version=0)

    after = [a["protocol"] for a in commits(sink.table_uri) if "protocol" in a][-1]
    assert {"invariants", "deletionVectors"} <= set(after["writerFeatures"])
    rows = {r["id"]: (r["at"], r["name"]) for r in read_delta_table(sink.table_uri).to_pylist()}
    assert rows == {1: (dt.datetime(2024, 1, 1), "a"), 2: (dt.datetime(2025, 6, 30, 23, 59, 59, 999_999), "b2"),
                    3: (dt.datetime(2025, 6, 30, 23, 59, 59, 999_999), "c")}


def string_keyed(tmp_path: Path, keys: list[str]) -> SparkDeltaSink:
    schema = pa.schema([pa.field("code", pa.string(), nullable=False), ("name", pa.string())])
    sink = SparkDeltaSink(str(tmp_path / "lake" / "codes"), key_columns=["code"])
    sink.write_snapshot([pa.record_batch([pa.array(keys), pa.array(["old"] * len(keys))], schema=schema)],
                        schema=schema, position=SNAPSHOT, snapshot_ts_ms=1)
    return sink


def test_string_keys_that_look_like_sql_bound_the_merge_exactly(tmp_path, spark):
    """The batch's key range is a pruning predicate in the ON clause: a bound read wrongly would turn these
    updates into inserts (a second row per key). Quotes, backslashes and ``${...}`` must stay values."""
    keys = ["a'b", "a\\'b", "${env:HOME}", "${spark.app.name}", "z\\", "é ü"]
    sink = string_keyed(tmp_path, keys)
    hostile = ["a'b", "${env:HOME}", "z\\"]  # the batch's bounds are hostile values themselves
    changes = pa.table({"code": hostile, "name": ["new"] * 3, POS: [pos(6000 + i) for i in range(3)],
                        OP: ["u"] * 3, TS: pa.array([6000] * 3, pa.int64())})

    result = sink.apply_changes(changes, app_id="stream", batch_version=0)

    rows = read_delta_table(sink.table_uri).to_pylist()
    assert sorted(r["code"] for r in rows) == sorted(keys)  # no key twice
    assert {r["code"]: r["name"] for r in rows} == {key: "new" if key in hostile else "old" for key in keys}
    assert result.rows_updated == 3 and result.rows_inserted == 0


def test_a_lost_commit_race_is_planned_again_and_retried(tmp_path, spark, monkeypatch):
    """Delta's conflict exceptions (no shared base class in delta-spark's Python) re-run the batch."""
    from delta.exceptions import ConcurrentAppendException
    from delta.tables import DeltaTable as SparkDeltaTable

    sink = string_keyed(tmp_path, ["k1", "k2"])
    for_path = SparkDeltaTable.forPath
    calls: list[str] = []

    def conflicting_once(session, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 1:
            raise ConcurrentAppendException(message="files were added to the table by a concurrent update")
        return for_path(session, path, *args, **kwargs)

    monkeypatch.setattr(SparkDeltaTable, "forPath", conflicting_once)
    changes = pa.table({"code": ["k2"], "name": ["new"], POS: [pos(6000)], OP: ["u"], TS: pa.array([6000], pa.int64())})
    result = sink.apply_changes(changes, app_id="stream", batch_version=0)

    assert len(calls) == 2 and result.rows_updated == 1
    assert {r["code"]: r["name"] for r in read_delta_table(sink.table_uri).to_pylist()} == {"k1": "old", "k2": "new"}
    assert sink.committed_batch_version("stream") == 0


def test_schema_changes_are_delta_spark_commits_and_a_reload_works_on_a_table_with_deletion_vectors(tmp_path, spark):
    """The stream's DDL steps (ADD COLUMN, filling older rows) are delta-spark's commits on a table it has
    written deletion vectors into, the next MERGE sees their work, and a re-load replaces the table."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    sink = loaded(tmp_path, schema, [pa.array(range(1, 101), pa.int64()), pa.array(["x"] * 100)])
    sink.apply_changes(pa.table({"id": pa.array([5], pa.int64()), "name": ["five"], POS: [pos(6000)], OP: ["u"],
                                 TS: pa.array([6000], pa.int64())}), app_id="stream", batch_version=0)
    assert any("deletionVector" in a.get("add", {}) for a in commits(sink.table_uri))

    before = len([a for a in commits(sink.table_uri) if "commitInfo" in a])
    sink.add_columns([pa.field("flag", pa.int32())])
    sink.fill_columns({"flag": pa.scalar(0, pa.int32())}, before_position=pos(6100))
    schema_steps = [a["commitInfo"] for a in commits(sink.table_uri) if "commitInfo" in a][before:]
    assert [step["operation"] for step in schema_steps] == ["ADD COLUMNS", "UPDATE"]
    assert all("Delta-Lake" in step.get("engineInfo", "") for step in schema_steps)
    sink.apply_changes(pa.table({"id": pa.array([6], pa.int64()), "name": ["six"], "flag": pa.array([1], pa.int32()),
                                 POS: [pos(6200)], OP: ["u"], TS: pa.array([6200], pa.int64())}),
                       app_id="stream", batch_version=1)
    rows = {r["id"]: (r["name"], r["flag"]) for r in read_delta_table(sink.table_uri).to_pylist()}
    assert len(rows) == 100 and rows[5] == ("five", 0) and rows[6] == ("six", 1) and rows[7] == ("x", 0)

    reloaded = SourcePosition("binlog.000004", 4)
    sink.write_snapshot([pa.record_batch([pa.array([1, 2], pa.int64()), pa.array(["a", "b"])], schema=schema)],
                        schema=schema, position=reloaded, snapshot_ts_ms=2)
    sink.apply_changes(pa.table({"id": pa.array([2], pa.int64()), "name": ["b2"],
                                 POS: [reloaded.with_row(1).key()], OP: ["u"], TS: pa.array([7000], pa.int64())}),
                       app_id="stream-after-reload", batch_version=0)
    assert {r["id"]: r["name"] for r in read_delta_table(sink.table_uri).to_pylist()} == {1: "a", 2: "b2"}


def test_tombstones_are_delta_spark_commits_and_a_replanned_batch_adds_those_it_lacks(tmp_path, spark):
    """A batch re-planned with more deletes under a recorded batch id (a restored checkpoint) must append the
    tombstones the first plan lacked: with the app transaction set, Delta would skip that append silently."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    sink = loaded(tmp_path, schema, [pa.array([1, 2, 3], pa.int64()), pa.array(["a", "b", "c"])])

    def deletes(*keys: int) -> pa.Table:
        return pa.table({"id": pa.array(keys, pa.int64()), "name": pa.nulls(len(keys), pa.string()),
                         POS: [pos(6000 + key) for key in keys], OP: ["d"] * len(keys),
                         TS: pa.array([6000 + key for key in keys], pa.int64())})

    sink.tombstones.record(deletes(1), app_id="stream", batch_version=0)  # the first plan, then a crash
    sink.apply_changes(deletes(1, 2), app_id="stream", batch_version=0)  # batch 0 re-planned with more

    tombstones = read_delta_table(sink.tombstones.uri)
    assert sorted(tombstones.column("id").to_pylist()) == [1, 2]  # each once, none skipped
    infos = [a["commitInfo"] for a in commits(sink.tombstones.uri) if "commitInfo" in a]
    assert infos and all("Delta-Lake" in info.get("engineInfo", "") for info in infos), infos
    assert {r["id"] for r in read_delta_table(sink.table_uri).to_pylist()} == {3}
    assert sink.purge_tombstones(older_than_ms=6002) == 1  # a delta-spark DELETE, its count from Spark
    assert read_delta_table(sink.tombstones.uri).column("id").to_pylist() == [2]


def test_a_widened_key_and_decimal_take_wider_values_in_place_and_tombstones_still_hold(tmp_path, spark):
    """INT -> BIGINT on the key and DECIMAL(10,2) -> DECIMAL(14,4): two metadata-only commits (no file rewritten,
    no re-load), then values only the wider types hold merge in, a replayed older insert of a key deleted before
    the widening stays deleted (the tombstone table's key was widened too), and every row reads back exactly."""
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("amount", pa.decimal128(10, 2))])
    sink = loaded(tmp_path, schema, [pa.array([1, 2, 3], pa.int32()),
                                     pa.array([Decimal("1.25"), Decimal("2.50"), Decimal("99999999.99")])])

    def change(key: int, amount: str | None, offset: int, op: str = "u", narrow: bool = False) -> pa.Table:
        key_type, amount_type = (pa.int32(), pa.decimal128(10, 2)) if narrow else (pa.int64(), pa.decimal128(14, 4))
        return pa.table({"id": pa.array([key], key_type),
                         "amount": pa.array([None if amount is None else Decimal(amount)], amount_type),
                         POS: [pos(offset)], OP: [op], TS: pa.array([offset], pa.int64())})

    sink.apply_changes(change(2, None, 6000, "d", narrow=True), app_id="stream", batch_version=0)
    files_before = {a["add"]["path"] for a in commits(sink.table_uri) if "add" in a}
    before = len([a for a in commits(sink.table_uri) if "commitInfo" in a])

    widened = [pa.field("id", pa.int64()), pa.field("amount", pa.decimal128(14, 4))]
    sink.widen_columns(widened)
    sink.widen_columns(widened)  # a replayed DDL: nothing left to do

    steps = [a["commitInfo"] for a in commits(sink.table_uri) if "commitInfo" in a][before:]
    assert [step["operation"] for step in steps] == ["SET TBLPROPERTIES", "CHANGE COLUMN", "CHANGE COLUMN"], steps
    assert {a["add"]["path"] for a in commits(sink.table_uri) if "add" in a} == files_before  # nothing rewritten
    for uri in (sink.table_uri, sink.tombstones.uri):
        protocol = [a["protocol"] for a in commits(uri) if "protocol" in a][-1]
        assert "typeWidening" in protocol["readerFeatures"], uri
    sink.apply_changes(pa.concat_tables([change(5_000_000_000, "123456789.1234", 6100),
                                         change(1, "1.0005", 6101),
                                         change(2, "2.0000", 5999, "c"),  # replayed, older than its delete
                                         change(5_000_000_001, "7.0000", 6102, "c")]),
                       app_id="stream", batch_version=1)
    sink.apply_changes(change(5_000_000_001, None, 6103, "d"), app_id="stream", batch_version=2)

    rows = {r["id"]: r["amount"] for r in read_delta_table(sink.table_uri).to_pylist()}
    assert rows == {1: Decimal("1.0005"), 3: Decimal("99999999.9900"), 5_000_000_000: Decimal("123456789.1234")}
    assert sorted(read_delta_table(sink.tombstones.uri).column("id").to_pylist()) == [2, 5_000_000_001]
    assert sorted(sink.scan(columns=["id"]).read_all().column("id").to_pylist()) == [1, 3, 5_000_000_000]


def test_a_datetime_key_merges_by_its_wall_clock_whatever_the_driver_time_zone(tmp_path, spark, monkeypatch):
    """A DATETIME key (TIMESTAMP_NTZ) bounds the MERGE's key range as the wall clock it is. With the driver's
    process in New York, PySpark's own literal reads a naive datetime as local time (five hours off from the
    session's UTC): the bound missed the row, and the update became an insert, the key twice."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        schema = pa.schema([pa.field("at", pa.timestamp("us"), nullable=False), ("v", pa.string())])
        noon, midnight = dt.datetime(2026, 1, 1, 12), dt.datetime(2026, 1, 1)
        sink = SparkDeltaSink(str(tmp_path / "lake" / "events"), key_columns=["at"])
        sink.write_snapshot([pa.record_batch([pa.array([midnight, noon], pa.timestamp("us")), pa.array(["a", "b"])],
                                             schema=schema)], schema=schema, position=SNAPSHOT, snapshot_ts_ms=1)
        sink.apply_changes(pa.table({"at": pa.array([noon], pa.timestamp("us")), "v": ["updated"], POS: [pos(6000)],
                                     OP: ["u"], TS: pa.array([6000], pa.int64())}), app_id="stream", batch_version=0)
    finally:
        monkeypatch.undo()
        time.tzset()
    rows = sorted((r["at"], r["v"]) for r in read_delta_table(sink.table_uri).to_pylist())
    assert rows == [(midnight, "a"), (noon, "updated")]


def test_a_tombstone_table_follows_its_key_type_and_never_casts_a_key_down(tmp_path, spark):
    """An append casts to the table's types, so a tombstone table narrower than the keys it gets would overflow
    or truncate them (a lost tombstone, and a false one on another key). Wider keys (the target widened, or
    re-loaded wider) widen it; narrower ones are cast up; an emptied table (a new load clears it) takes another
    key type; a table still holding tombstones of another type refuses, and keeps what it holds."""
    store = SparkTombstoneStore(str(tmp_path / "lake" / "_lakesync" / "tombstones" / "orders"), key_columns=["id"])

    def record(keys: list, key_type: pa.DataType, version: int) -> None:
        store.record(pa.table({"id": pa.array(keys, key_type), POS: [pos(7000 + version)] * len(keys),
                               TS: pa.array([7000 + version] * len(keys), pa.int64())}),
                     app_id="stream", batch_version=version)

    def ids() -> list:
        return sorted(read_delta_table(store.uri).column("id").to_pylist())

    record([1], pa.int32(), 0)
    record([5_000_000_000], pa.int64(), 1)
    record([7], pa.int32(), 2)
    assert ids() == [1, 7, 5_000_000_000]
    with pytest.raises(SinkError, match="key types differ"):
        record([Decimal("1.5")], pa.decimal128(10, 1), 3)
    assert ids() == [1, 7, 5_000_000_000]
    store.clear()
    record(["k1"], pa.string(), 4)
    assert ids() == ["k1"]
