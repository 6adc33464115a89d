"""The pure parts of validation: fingerprints, chunk assignment, checksums, key diffs, the report."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from lakesync.core.errors import ValidationMismatch
from lakesync.validation.chunks import ChunkPlan, chunk_digests
from lakesync.validation.fingerprints import conform, row_hashes
from lakesync.validation.key_diff import diff_keys
from lakesync.validation.report import TableComparison, ValidationReport, key_dicts
from lakesync.validation.store import SCHEMA, report_rows

SCHEMA_ROWS = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string()),
                         pa.field("amount", pa.decimal128(10, 2)), pa.field("at", pa.timestamp("us", tz="UTC"))])


def rows(ids: list[int], names: list[str | None] | None = None) -> pa.Table:
    names = names or [f"n{i}" for i in ids]
    return pa.Table.from_pylist(
        [{"id": i, "name": n, "amount": Decimal(f"{i}.50"), "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}
         for i, n in zip(ids, names, strict=True)], schema=SCHEMA_ROWS)


def with_positions(table: pa.Table, positions: list[str], ops: list[str] | None = None) -> pa.Table:
    ops = ops or ["r"] * table.num_rows
    return table.append_column("_lakesync_pos", pa.array(positions)).append_column("_lakesync_op", pa.array(ops))


def test_fingerprints_do_not_depend_on_the_arrow_layout():
    table = rows([1, 2, 3])
    views = conform(table, table.schema).set_column(1, "name", table["name"].cast(pa.string_view()))
    split = pa.concat_tables([table.slice(0, 1), table.slice(1)])
    assert (row_hashes(table) == row_hashes(conform(views, table.schema))).all()
    assert (row_hashes(table) == row_hashes(split)).all()


def test_fingerprints_see_every_column_change():
    base = row_hashes(rows([1, 2]))
    assert (row_hashes(rows([1, 2], ["n1", "other"])) != base).tolist() == [False, True]
    assert (row_hashes(rows([1, 2], ["n1", None])) != base).tolist() == [False, True]


def test_decimals_and_dates_are_fingerprinted_by_value():
    def table(amounts: list[str | None], day: int) -> pa.Table:
        return pa.table({"amount": pa.array([None if a is None else Decimal(a) for a in amounts], pa.decimal128(38, 2)),
                         "day": pa.array([dt.date(2026, 1, day)] * len(amounts), pa.date32())})

    base = row_hashes(table(["1.00", None, "-99999999999999999999999999999999.99"], 1))
    assert (row_hashes(table(["1.00", None, "-99999999999999999999999999999999.99"], 1).slice(0)) == base).all()
    assert (row_hashes(table(["1.01", "0.00", "-99999999999999999999999999999999.98"], 1)) != base).all()
    assert (row_hashes(table(["1.00", None, "-99999999999999999999999999999999.99"], 2)) != base).all()
    sliced = table(["5.00", "1.00", None], 1).slice(1)
    assert (row_hashes(sliced) == row_hashes(table(["1.00", None], 1))).all()


UNUSUAL_TEXT = ["a\x00b", "a\x00c", "", "\x00", "\x00\x00", "x", "x\x00", "x ", "😀", "𝐀", "None", None]


def test_a_row_fingerprint_depends_only_on_its_own_values():
    """Strings that differ only after a NUL, empty strings, NULL and the text 'None' all differ, and each row
    hashes the same alone, in any order and next to any other rows (pandas' grouping cut strings at NUL)."""
    table = pa.table({"s": pa.array(UNUSUAL_TEXT, pa.string()), "b": pa.array(
        [None if t is None else t.encode() for t in UNUSUAL_TEXT], pa.binary())})
    together = row_hashes(table)
    assert len(set(together.tolist())) == len(UNUSUAL_TEXT)
    alone = [int(row_hashes(table.slice(i, 1))[0]) for i in range(table.num_rows)]
    assert together.tolist() == alone
    reversed_order = table.take(pa.array(range(table.num_rows - 1, -1, -1)))
    assert row_hashes(reversed_order).tolist() == alone[::-1]


def test_swapping_values_between_columns_changes_the_fingerprint():
    assert row_hashes(pa.table({"a": ["x"], "b": ["y"]}))[0] != row_hashes(pa.table({"a": ["y"], "b": ["x"]}))[0]
    def pair(a: str | None, b: str | None) -> int:
        return int(row_hashes(pa.table({"a": pa.array([a], pa.string()), "b": pa.array([b], pa.string())}))[0])

    assert pair(None, "x") != pair("x", None)


def test_fingerprints_cover_every_arrow_type_of_the_type_map():
    """Each type: a value, its neighbour and NULL differ; the same value hashes the same in any company."""
    cases = {
        pa.int8(): [-128, 127], pa.int16(): [0, 255], pa.int32(): [-(2**31), 2**31 - 1],
        pa.int64(): [-(2**63), 2**63 - 1], pa.decimal128(20, 0): [Decimal(0), Decimal(2**64 - 1)],
        pa.decimal128(38, 10): [Decimal("-1.0000000001"), Decimal("-1.0000000002")],
        pa.float32(): [1.5, -0.0], pa.float64(): [5e-324, -1e308], pa.date32(): [dt.date(1000, 1, 1), dt.date(9999, 12, 31)],
        pa.timestamp("us"): [dt.datetime(1000, 1, 1), dt.datetime(1000, 1, 1, 0, 0, 0, 1)],
        pa.timestamp("us", tz="UTC"): [dt.datetime(2038, 1, 19, tzinfo=dt.UTC), dt.datetime(1970, 1, 1, tzinfo=dt.UTC)],
        pa.string(): ["", "\x00"], pa.binary(): [b"", b"\x00"],
    }
    for kind, values in cases.items():
        column = pa.array([*values, None], kind)
        hashes = row_hashes(pa.table({"c": column}))
        assert len(set(hashes.tolist())) == 3, kind
        assert row_hashes(pa.table({"c": column.slice(1)})).tolist() == hashes[1:].tolist(), kind


def test_negative_zero_is_the_same_number_as_zero():
    for kind in (pa.float32(), pa.float64()):
        zeros = row_hashes(pa.table({"f": pa.array([0.0, -0.0, 1.0], kind)}))
        assert zeros[0] == zeros[1] != zeros[2]


def test_bigint_with_nulls_keeps_its_low_bits():
    first = pa.table({"big": pa.array([2**62 + 1, None], pa.int64())})
    second = pa.table({"big": pa.array([2**62 + 2, None], pa.int64())})
    assert row_hashes(first)[0] != row_hashes(second)[0]


def test_range_chunks_follow_the_key_ranges_with_open_ends():
    plan = ChunkPlan(("id",), uppers=(10, 20))
    keys = pa.table({"id": pa.array([-5, 10, 11, 20, 21, 10**12], pa.int64())})
    assert plan.chunk_ids(keys).tolist() == [0, 0, 1, 1, 2, 2]
    assert plan.count == 3
    assert plan.key_range(0).upper == (10,) and plan.key_range(0).lower is None
    assert plan.key_range(2).lower == (20,) and plan.key_range(2).upper is None


def test_unsigned_bigint_keys_chunk_without_overflow():
    plan = ChunkPlan(("id",), uppers=(2**63,))
    keys = pa.table({"id": pa.array([Decimal(1), Decimal(2**64 - 1)], pa.decimal128(20, 0))})
    assert plan.chunk_ids(keys).tolist() == [0, 1]


def test_hash_buckets_are_the_same_on_both_sides():
    plan = ChunkPlan(("a", "b"), buckets=7)
    source = pa.table({"a": ["x", "y", "ä"], "b": pa.array([1, 2, 3], pa.int32())})
    delta = pa.table({"a": pa.array(["x", "y", "ä"], pa.string_view()), "b": pa.array([1, 2, 3], pa.int32())})
    ids = plan.chunk_ids(source)
    assert (ids == plan.chunk_ids(conform(delta, source.schema))).all()
    assert ((ids >= 0) & (ids < 7)).all()


def test_delta_predicate_quotes_hostile_key_names():
    plan = ChunkPlan(('we"ird `id`',), uppers=(5, 9))
    assert plan.delta_predicate(1) == '`we"ird ``id``` > 5 AND `we"ird ``id``` <= 9'
    assert plan.delta_predicate(0) == '`we"ird ``id``` <= 5'


def test_chunk_checksums_do_not_depend_on_batching():
    hashes = row_hashes(rows(list(range(10))))
    chunks = np.array([0, 1, 0, 1, 2, 2, 0, 1, 2, 0])
    whole = chunk_digests(chunks, hashes)
    parts = chunk_digests(chunks[:4], hashes[:4])
    for chunk, digest in chunk_digests(chunks[4:], hashes[4:]).items():
        parts.setdefault(chunk, type(digest)()).add(digest)
    assert whole == parts
    assert whole[0].rows == 4


def compared(source: pa.Table, delta: pa.Table, key_columns: list[str]) -> TableComparison:
    """The key diff of two whole tables (no positions, so nothing in flight), as a table's result."""
    result = TableComparison("t", source.num_rows, delta.num_rows, key_columns=key_columns)
    diff_keys(source, delta, source.schema, key_columns, snapshot_key=None).fill(result)
    return result


def test_key_diff_names_missing_extra_and_different_keys():
    source = rows([1, 2, 3, 4])
    delta = rows([1, 2, 4, 5], ["n1", "changed", "n4", "n5"])
    result = compared(source, delta, ["id"])
    assert result.missing_in_delta == [{"id": 3}]
    assert result.extra_in_delta == [{"id": 5}]
    assert result.different == [{"id": 2}]
    assert result.mismatched_keys == 3 and result.status == "mismatch"
    json.dumps(result.to_json())


def test_a_key_twice_in_delta_is_a_difference():
    result = compared(rows([1, 2]), rows([1, 2, 2]), ["id"])
    assert result.different == [{"id": 2}]


def test_decimal_and_binary_keys_are_reported_as_json():
    schema = pa.schema([pa.field("k", pa.decimal128(20, 0)), pa.field("b", pa.binary())])
    source = pa.table({"k": pa.array([Decimal(2**64 - 1)], pa.decimal128(20, 0)), "b": [b"\x00\xff"]}, schema=schema)
    result = compared(source, schema.empty_table(), ["k", "b"])
    assert result.missing_in_delta == [{"k": 2**64 - 1, "b": "00ff"}]
    assert key_dicts(source.select(["b"]), 1) == [{"b": "00ff"}]


def test_rows_changed_after_the_snapshot_are_in_flight_not_different():
    snapshot = "00000001.000000001000.000000"
    before, after = "00000001.000000000500.000001", "00000001.000000002000.000001"
    source = rows([1, 2, 3, 4])
    delta = with_positions(rows([1, 2, 3, 4], ["n1", "new", "n3", "n4"]), [before, after, before, after],
                           ["r", "u", "r", "d"])
    diff = diff_keys(source, delta, source.schema, ["id"], snapshot_key=snapshot)
    assert diff.count == 0 and diff.in_flight == 2
    assert diff.keys().num_rows == 0


def test_an_old_tombstone_for_a_live_source_row_is_a_missing_row():
    snapshot = "00000001.000000001000.000000"
    source = rows([1, 2])
    delta = with_positions(rows([1, 2]), ["00000001.000000000500.000001"] * 2, ["r", "d"])
    diff = diff_keys(source, delta, source.schema, ["id"], snapshot_key=snapshot)
    assert diff.missing["id"].to_pylist() == [2] and diff.in_flight == 0


def test_report_raises_validation_mismatch_with_exit_code_3():
    report = ValidationReport("run", "p", "2026-01-01T00:00:00Z", tables=[
        TableComparison("good", 1, 1), TableComparison("log", 1, 5, comparable=False, note="append-only")])
    report.raise_for_mismatch()
    report.tables.append(TableComparison("bad", 2, 1, missing_in_delta=[{"id": 2}], mismatched_keys=1))
    with pytest.raises(ValidationMismatch) as raised:
        report.raise_for_mismatch()
    assert raised.value.exit_code == 3 and "bad" in raised.value.message and "good" not in raised.value.message


def test_a_table_that_failed_to_compare_fails_the_run():
    failed = TableComparison("t", 0, 0, error="no such table")
    assert failed.status == "error" and not failed.matches


def test_report_rows_fit_the_validation_table_schema():
    report = ValidationReport("run", "p", "2026-01-01T00:00:00Z", tables=[
        TableComparison("t", 2, 1, missing_in_delta=[{"id": 2}], mismatched_keys=1, key_columns=["id"],
                        started_at="2026-01-01T00:00:00.000001Z", finished_at="2026-01-01T00:00:01Z")])
    table = report_rows(report)
    assert table.schema == SCHEMA
    (row,) = table.to_pylist()
    assert row["status"] == "mismatch" and json.loads(row["sample"])["missing_in_delta"] == [{"id": 2}]
    assert row["finished_at"] == dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=dt.UTC)
