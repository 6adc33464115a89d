"""Chunk planning and chunk checksums: which chunk each row falls in, and ``(rows, XOR, sum)`` per chunk.

A single integer key is cut into key ranges (each read from the source with a range predicate, so re-reading
one chunk is cheap); any other key is bucketed by the fingerprint of the key (the source is then read whole,
in bounded batches). The chunk of a row is computed from its Arrow key value, identically on both sides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from lakesync.sink.merge import quote
from lakesync.source import queries
from lakesync.source.table_reader import KeyRange, TableShape
from lakesync.validation.fingerprints import row_hashes


@dataclass(frozen=True)
class ChunkPlan:
    """How rows map to chunks. ``uppers`` set: key ranges ``(uppers[i-1], uppers[i]]`` on a single integer key
    (first and last open); else ``buckets`` hash buckets of the key."""

    key_columns: tuple[str, ...]
    uppers: tuple[int, ...] | None = None
    buckets: int = 1

    @property
    def count(self) -> int:
        return len(self.uppers) + 1 if self.uppers is not None else self.buckets

    @property
    def by_range(self) -> bool:
        return self.uppers is not None

    def chunk_ids(self, keys: pa.Table) -> np.ndarray:
        """The chunk of every row of ``keys`` (a table of the key columns, already conformed)."""
        if keys.num_rows == 0:
            return np.zeros(0, dtype=np.int64)
        if self.uppers is not None:
            column = keys.column(0)
            unsigned = pa.types.is_decimal(column.type)
            values = pc.cast(column, pa.uint64() if unsigned else pa.int64()).to_numpy()
            bounds = np.array(self.uppers, dtype=np.uint64 if unsigned else np.int64)
            return np.searchsorted(bounds, values, side="left").astype(np.int64)
        return (row_hashes(keys) % np.uint64(self.buckets)).astype(np.int64)

    def key_range(self, chunk: int) -> KeyRange:
        assert self.uppers is not None
        lower = (self.uppers[chunk - 1],) if chunk > 0 else None
        upper = (self.uppers[chunk],) if chunk < len(self.uppers) else None
        return KeyRange(str(chunk), lower, upper)

    def delta_predicate(self, chunk: int) -> str:
        """The DataFusion predicate selecting one range chunk in the Delta table."""
        key_range = self.key_range(chunk)
        column = quote(self.key_columns[0])
        parts = []
        if key_range.lower is not None:
            parts.append(f"{column} > {key_range.lower[0]}")
        if key_range.upper is not None:
            parts.append(f"{column} <= {key_range.upper[0]}")
        return " AND ".join(parts) or "TRUE"


def plan_chunks(cursor: pymysql.cursors.Cursor, shape: TableShape, chunk_rows: int) -> tuple[ChunkPlan, int]:
    """The chunk plan for a keyed table (read inside the snapshot) and the source's row count."""
    keys = tuple(shape.key_columns)
    if shape.integer_key:
        queries.execute(cursor, queries.key_bounds(shape.database, shape.name, keys[0]))
        low, high, count = queries.one_row(cursor)
        if low is None:
            return ChunkPlan(keys, uppers=()), 0
        pieces = max(1, math.ceil(count / chunk_rows))
        step = max(1, math.ceil((int(high) - int(low) + 1) / pieces))
        uppers = tuple(range(int(low) - 1 + step, int(high), step))
        return ChunkPlan(keys, uppers=uppers), int(count)
    queries.execute(cursor, queries.row_count(shape.database, shape.name))
    count = int(queries.one_row(cursor)[0])
    return ChunkPlan(keys, buckets=max(1, math.ceil(count / chunk_rows))), count


@dataclass
class Digest:
    rows: int = 0
    xor: int = 0
    total: int = 0

    def add(self, other: Digest) -> None:
        self.rows += other.rows
        self.xor ^= other.xor
        self.total = (self.total + other.total) % (1 << 64)


def chunk_digests(chunks: np.ndarray, hashes: np.ndarray) -> dict[int, Digest]:
    """Per chunk: rows, XOR and sum (mod 2^64) of the row fingerprints."""
    if len(chunks) == 0:
        return {}
    order = np.argsort(chunks, kind="stable")
    ordered, values = chunks[order], hashes[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    xors = np.bitwise_xor.reduceat(values, starts)
    sums = np.add.reduceat(values, starts)
    counts = np.diff(np.r_[starts, len(ordered)])
    return {int(ordered[start]): Digest(int(n), int(x), int(t))
            for start, n, x, t in zip(starts, counts, xors, sums, strict=True)}


def merge_digests(into: dict[int, Digest], more: dict[int, Digest]) -> None:
    for chunk, digest in more.items():
        into.setdefault(chunk, Digest()).add(digest)
