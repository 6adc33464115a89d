"""Change planning for the Delta sink: pure Arrow functions, no I/O.

A batch of changes arrives as an Arrow table of user columns plus the lakesync columns below. Before one
MERGE can apply it, the batch must hold at most one change per key (MERGE rejects a target row matched by
two source rows), and that change must be the newest one by source position. Upserts that a recorded
tombstone already supersedes are dropped here too, so the MERGE never has to look at the tombstone table.

Everything is vectorised (sort, compare neighbours, filter, join): no Python work per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lakesync.core.errors import SinkError
from lakesync.core.table_layout import DELETE_OP, DELETED_MS, META_COLUMNS, OP, POS

RESERVED_COLUMNS = frozenset((*META_COLUMNS, DELETED_MS))
UPSERT_OPS = ("r", "c", "u")
_TOMB_POS = "_lakesync_tombstone_pos"


@dataclass(frozen=True)
class ChangePlan:
    """The newest change per key of one batch, split by what the MERGE does with it.

    ``upserts`` and ``deletes`` keep the input's columns. ``duplicates`` counts the changes dropped because
    a newer (or identical) change for the same key was in the same batch.
    """

    upserts: pa.Table
    deletes: pa.Table
    duplicates: int


def check_changes(changes: pa.Table, key_columns: list[str]) -> None:
    """Raise :class:`SinkError` if ``changes`` lacks a column the sink needs or holds an impossible value.

    Null keys or positions and unknown ops would make the MERGE silently wrong, so they stop the batch.
    """
    missing = [name for name in (*key_columns, *META_COLUMNS) if name not in changes.column_names]
    if missing:
        raise SinkError(
            f"the change batch lacks the column(s) {missing}",
            hint="changes need the key columns plus _lakesync_pos, _lakesync_op and _lakesync_ts_ms",
        )
    for name in (*key_columns, POS, OP):
        if changes.column(name).null_count:
            raise SinkError(f"the change batch has nulls in {name!r}", hint="every change needs its key and position")
    ops: set[str | None] = set(pc.unique(changes.column(OP)).to_pylist())
    unknown = sorted(str(op) for op in ops - {*UPSERT_OPS, DELETE_OP})
    if unknown:
        raise SinkError(f"unknown change op(s) {unknown}", hint="ops are r (snapshot read), c, u and d")


def last_change_per_key(changes: pa.Table, key_columns: list[str]) -> pa.Table:
    """The change with the greatest position for each key (ties: the one that arrived last).

    Sorts by key then position then arrival, and keeps each row whose key differs from the next row's.
    """
    if changes.num_rows <= 1:
        return changes
    arrival = "_lakesync_arrival"
    indexed = changes.append_column(arrival, pa.array(range(changes.num_rows), pa.int64()))
    order = pc.sort_indices(indexed, sort_keys=[(name, "ascending") for name in (*key_columns, POS, arrival)])
    ordered = changes.take(order)
    is_last = _differs_from_next(ordered, key_columns)
    return ordered.filter(is_last)


def _differs_from_next(ordered: pa.Table, key_columns: list[str]) -> pa.Array:
    """True where the row's key differs from the following row's key; always True for the last row."""
    differs: pa.Array | None = None
    for name in key_columns:
        column = ordered.column(name).combine_chunks()
        step = pc.not_equal(column.slice(0, len(column) - 1), column.slice(1))
        differs = step if differs is None else pc.or_(differs, step)
    assert differs is not None, "a key has at least one column"
    return pa.concat_arrays([differs, pa.array([True])])


def plan_changes(changes: pa.Table, key_columns: list[str]) -> ChangePlan:
    """Check the batch, keep the newest change per key, and split it into upserts and deletes."""
    check_changes(changes, key_columns)
    latest = last_change_per_key(changes, key_columns)
    is_delete = pc.equal(latest.column(OP), pa.scalar(DELETE_OP))
    return ChangePlan(
        upserts=latest.filter(pc.invert(is_delete)),
        deletes=latest.filter(is_delete),
        duplicates=changes.num_rows - latest.num_rows,
    )


def newest_tombstones(tombstones: pa.Table, key_columns: list[str]) -> pa.Table:
    """One row per key with the greatest tombstone position (tombstones may repeat after replays)."""
    grouped = tombstones.group_by(key_columns).aggregate([(POS, "max")])
    return grouped.rename_columns([_TOMB_POS if name == f"{POS}_max" else name for name in grouped.column_names])


def drop_superseded(upserts: pa.Table, tombstones: pa.Table, key_columns: list[str]) -> pa.Table:
    """Drop upserts at or before a tombstone of their key: the delete (or something later) supersedes them.

    ``tombstones`` has the key columns and ``_lakesync_pos``, possibly several rows per key. This holds
    whatever the target holds for the key, so the MERGE needs no tombstone lookup of its own.
    """
    if upserts.num_rows == 0 or tombstones.num_rows == 0:
        return upserts
    newest = newest_tombstones(tombstones.select([*key_columns, POS]), key_columns)
    joined = upserts.join(newest, keys=key_columns, join_type="left outer")
    tomb_pos = joined.column(_TOMB_POS)
    keep = pc.or_kleene(pc.is_null(tomb_pos), pc.greater(joined.column(POS), tomb_pos))
    return joined.filter(keep).drop_columns([_TOMB_POS]).select(upserts.column_names)
