"""Change planning for the Delta sink: newest change per key, upsert/delete split, tombstone filtering."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakesync.core.errors import SinkError
from lakesync.core.positions import SourcePosition
from lakesync.core.table_layout import OP, POS, TS
from lakesync.sink.changes import drop_superseded, last_change_per_key, plan_changes


def pos(offset: int, row: int = 1) -> str:
    return SourcePosition("binlog.000007", offset, row).key()


def changes(rows: list[tuple]) -> pa.Table:
    """rows of (id, name, offset, op)."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            POS: pa.array([pos(r[2]) for r in rows], pa.string()),
            OP: pa.array([r[3] for r in rows], pa.string()),
            TS: pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def by_id(table: pa.Table) -> dict:
    return {row["id"]: (row["name"], row[OP]) for row in table.to_pylist()}


def test_newest_change_per_key_wins_whatever_the_arrival_order():
    batch = changes([(1, "new", 300, "u"), (1, "old", 100, "c"), (2, "x", 50, "c"), (1, "mid", 200, "u")])
    assert by_id(last_change_per_key(batch, ["id"])) == {1: ("new", "u"), 2: ("x", "c")}


def test_exact_duplicates_collapse_to_one_row():
    batch = changes([(1, "a", 100, "c"), (1, "a", 100, "c"), (1, "a", 100, "c")])
    assert last_change_per_key(batch, ["id"]).num_rows == 1


def test_plan_splits_upserts_and_deletes_and_counts_duplicates():
    plan = plan_changes(
        changes([(1, "a", 100, "c"), (1, None, 200, "d"), (2, "b", 150, "c"), (3, "c", 10, "r")]), ["id"]
    )
    assert by_id(plan.upserts) == {2: ("b", "c"), 3: ("c", "r")}
    assert by_id(plan.deletes) == {1: (None, "d")}
    assert plan.duplicates == 1


def test_insert_after_delete_in_the_same_batch_is_an_upsert():
    plan = plan_changes(changes([(1, None, 200, "d"), (1, "back", 300, "c")]), ["id"])
    assert by_id(plan.upserts) == {1: ("back", "c")}
    assert plan.deletes.num_rows == 0


def test_composite_keys_are_compared_on_every_column():
    batch = pa.table(
        {
            "a": pa.array([1, 1, 1, 2], pa.int32()),
            "b k": pa.array(["x", "y", "x", "x"]),
            POS: [pos(1), pos(2), pos(3), pos(4)],
            OP: ["c", "c", "u", "c"],
            TS: pa.array([1, 2, 3, 4], pa.int64()),
        }
    )
    latest = last_change_per_key(batch, ["a", "b k"])
    assert sorted((r["a"], r["b k"], r[OP]) for r in latest.to_pylist()) == [
        (1, "x", "u"),
        (1, "y", "c"),
        (2, "x", "c"),
    ]


def test_works_across_chunk_boundaries():
    first = changes([(1, "a", 100, "c"), (2, "b", 100, "c")])
    second = changes([(1, "a2", 200, "u"), (2, "b0", 50, "u")])
    batch = pa.concat_tables([first, second])
    assert batch.column("id").num_chunks == 2
    assert by_id(last_change_per_key(batch, ["id"])) == {1: ("a2", "u"), 2: ("b", "c")}


def test_empty_and_single_row_batches_pass_through():
    assert plan_changes(changes([]), ["id"]).upserts.num_rows == 0
    assert plan_changes(changes([(1, "a", 1, "c")]), ["id"]).upserts.num_rows == 1


def test_missing_columns_null_keys_and_unknown_ops_are_refused():
    with pytest.raises(SinkError, match="lacks"):
        plan_changes(changes([(1, "a", 1, "c")]).drop_columns([TS]), ["id"])
    with pytest.raises(SinkError, match="nulls"):
        plan_changes(changes([(None, "a", 1, "c")]), ["id"])
    with pytest.raises(SinkError, match="unknown change op"):
        plan_changes(changes([(1, "a", 1, "x")]), ["id"])


def test_upserts_at_or_before_a_tombstone_are_dropped():
    upserts = changes([(1, "old", 100, "c"), (2, "same", 200, "c"), (3, "newer", 400, "c"), (4, "none", 1, "c")])
    tombstones = pa.table(
        {
            "id": pa.array([1, 2, 3, 3], pa.int64()),
            POS: [pos(150), pos(200), pos(300), pos(100)],
        }
    )
    kept = drop_superseded(upserts, tombstones, ["id"])
    assert sorted(kept.column("id").to_pylist()) == [3, 4]
    assert kept.column_names == upserts.column_names
