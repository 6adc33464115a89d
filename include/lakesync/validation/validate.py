"""Comparing the source with Delta, table by table: counts, chunk checksums, and the keys that differ.

How a table is checked (:func:`validate_pipeline`):

1. **Chunks.** Rows are grouped into chunks by key: a single integer key is cut into key ranges (each read
   from the source with a range predicate, so re-reading one chunk is cheap); any other key is bucketed by
   a hash of the key (the source is then read whole, in bounded batches). The chunk a row falls in is
   computed in Python from the Arrow key value, identically on both sides.
2. **Checksums.** Both sides are brought to the same Arrow schema (the source through
   :class:`lakesync.source.table_reader.RangeReader`, the loader's own reader and type map), every row gets
   a 64-bit fingerprint over all its source columns, and each chunk gets ``(rows, XOR, sum)`` of them.
   Fingerprinting Arrow values rather than server-side ``CRC32(CONCAT_WS(...))`` text is deliberate: the
   server's text of a FLOAT, a TIMESTAMP or a DECIMAL can't be reproduced robustly from Delta's values,
   while both sides already meet in the type map's Arrow form. Memory stays at one chunk (or one batch).
3. **Keys.** Only chunks whose checksums differ are read again, row by row, in groups of at most
   :data:`DIFF_ROWS` rows per side, and joined on the key: keys missing in Delta, extra in Delta, or
   different. The sink's tombstones (its side table, :mod:`lakesync.sink.tombstones`) count as deletes.
4. **No crying wolf.** The source is read inside a consistent snapshot whose binlog position P is known.
   A Delta row or tombstone whose ``_lakesync_pos`` is after P was changed after the snapshot: it is
   "in flight", explained by its position, not a mismatch. Keys that still differ are re-checked in later
   rounds: each round opens a new snapshot, waits (bounded by ``settle_timeout_s`` over the whole table)
   until the stream's applied position for the table has reached it, and re-reads only the chunks that held
   differing keys. What still differs after the last round is reported, with a sample of keys, and the run
   raises :class:`~lakesync.core.errors.ValidationMismatch` (exit code 3) through
   :meth:`ValidationReport.raise_for_mismatch`. The applied position of a table with no change after P
   never reaches P, so a real difference in a quiet table costs the whole ``settle_timeout_s`` and is
   flagged ``stream_behind``.

Tables with an append-only change log (no key) are not comparable row for row and are reported as such.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from lakesync.core.config import Pipeline
from lakesync.core.errors import SourceError, ValidationMismatch
from lakesync.core.positions import MIN_KEY
from lakesync.core.table_layout import DELETE_OP, OP, POS, TS, table_semantics
from lakesync.core.types import (
    SNAPSHOT_TIME_ZONE_SQL,
    arrow_schema,
    arrow_table_from_db_rows,
    quote_identifier,
    snapshot_select_list,
)
from lakesync.sink.merge import quote
from lakesync.source.schema import read_table_columns
from lakesync.source.table_reader import KeyRange, RangeReader, TableShape, describe_table, rows_per_read
from lakesync.stream.progress import StreamProgress, applied_position

log = logging.getLogger(__name__)

FETCH_ROWS = 50_000
SAMPLE_KEYS = 10
#: Rows per chunk unless the pipeline says otherwise (``snapshot.chunk_rows`` caps it too).
DEFAULT_CHUNK_ROWS = 100_000
#: Rows per side the key comparison holds in memory at once: suspect chunks are compared in groups.
DIFF_ROWS = 500_000
DEFAULT_SETTLE_TIMEOUT_S = 30.0
DEFAULT_ROUNDS = 3
_POLL_SECONDS = 0.25
#: Server errors meaning "not allowed" (no RELOAD for FLUSH TABLES WITH READ LOCK, say).
_LOCK_DENIED = {1044, 1142, 1227}
#: 6: "Error on delete of '/tmp/#sql-temptable...'" (seen with servers sharing a tmpdir); 2006/2013: lost connection.
_TRANSIENT_ERRORS = {6, 2006, 2013}

ProgressCallback = Callable[[str, str], None]
"""``(table, what is happening)``: for the CLI's progress line."""


# -- results ------------------------------------------------------------------------------------------------
@dataclass
class TableComparison:
    """The result for one table. ``status`` is ``equal``, ``mismatch``, ``not_comparable`` or ``error``."""

    table: str
    source_rows: int
    delta_rows: int
    missing_in_delta: list[dict] = field(default_factory=list)
    extra_in_delta: list[dict] = field(default_factory=list)
    different: list[dict] = field(default_factory=list)
    mismatched_keys: int = 0
    comparable: bool = True
    note: str = ""
    semantics: str = "exactly_once"
    key_columns: list[str] = field(default_factory=list)
    chunks: int = 0
    chunks_mismatched: int = 0
    rounds: int = 0
    #: keys whose Delta row is newer than the last snapshot: changed while we looked, not a mismatch
    in_flight_keys: int = 0
    #: the last re-check ran after ``settle_timeout_s`` without the stream reaching the snapshot position
    stream_behind: bool = False
    position: str | None = None
    error: str | None = None
    started_at: str | None = None
    finished_at: str | None = None

    @property
    def matches(self) -> bool:
        """No key differs. Row counts are the first pass's: on a busy source they may differ by keys that
        were in flight, which the key comparison settles (a duplicated or missing key is a differing key)."""
        if self.error:
            return False
        return not self.comparable or self.mismatched_keys == 0

    @property
    def status(self) -> str:
        if self.error:
            return "error"
        if not self.comparable:
            return "not_comparable"
        return "equal" if self.matches else "mismatch"

    def sample(self) -> dict[str, list[dict]]:
        return {"missing_in_delta": self.missing_in_delta, "extra_in_delta": self.extra_in_delta,
                "different": self.different}

    def describe(self) -> str:
        if self.error:
            return f"{self.table}: error: {self.error}"
        if not self.comparable:
            return f"{self.table}: {self.note}"
        if self.matches:
            return f"{self.table}: identical ({self.source_rows} rows)"
        parts = [f"{label}: {keys[:3]}" for label, keys in self.sample().items() if keys]
        counts = f"source {self.source_rows} rows, Delta {self.delta_rows} rows"
        detail = "; ".join(parts) or self.note
        behind = ("; the stream's applied position had not reached the source snapshot when last compared "
                  "(normal for a table with no later changes)") if self.stream_behind else ""
        return f"{self.table}: {self.mismatched_keys} keys differ ({counts}; {detail}{behind})"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status, "matches": self.matches}


@dataclass
class ValidationReport:
    run_id: str
    pipeline: str
    started_at: str
    finished_at: str | None = None
    tables: list[TableComparison] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return all(table.matches for table in self.tables)

    @property
    def failed(self) -> list[TableComparison]:
        return [table for table in self.tables if not table.matches]

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "pipeline": self.pipeline, "started_at": self.started_at,
                "finished_at": self.finished_at, "matches": self.matches,
                "tables": [table.to_json() for table in self.tables]}

    def raise_for_mismatch(self) -> None:
        """Raise :class:`ValidationMismatch` (exit code 3) naming every table that differs or failed."""
        if self.matches:
            return
        lines = "\n".join("  " + table.describe() for table in self.failed)
        raise ValidationMismatch(
            f"source and Delta differ in pipeline {self.pipeline} (run {self.run_id}):\n{lines}",
            hint="check the stream (`lakesync status`); if a table stays different, re-run its full load",
        )


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- whole-table reads (small tables, tests, the Airflow operator) -------------------------------------------
def read_source_table(conn: pymysql.connections.Connection, database: str, table: str) -> pa.Table:
    """The whole source table as Arrow, converted exactly as the full load converts it."""
    columns = read_table_columns(conn, database, table)
    sql = f"SELECT {snapshot_select_list(columns)} FROM {quote_identifier(database)}.{quote_identifier(table)}"
    parts: list[pa.Table] = []
    with conn.cursor(pymysql.cursors.SSCursor) as cursor:
        cursor.execute(SNAPSHOT_TIME_ZONE_SQL)
        cursor.execute(sql)
        while rows := cursor.fetchmany(FETCH_ROWS):
            parts.append(arrow_table_from_db_rows(columns, rows))
    if not parts:
        return arrow_table_from_db_rows(columns, [])
    return pa.concat_tables(parts)


def read_delta_table(uri: str, *, storage_options: dict[str, str] | None = None) -> pa.Table:
    """The live rows of a target table (tombstones dropped), without lakesync's own columns."""
    from deltalake import DeltaTable

    # delta-rs's own reader: pyarrow's dataset reader can abort the interpreter at exit (docs/sink.md).
    table = pa.RecordBatchReader.from_stream(DeltaTable(uri, storage_options=storage_options).scan()).read_all()
    # its string/binary columns come as view types, which Arrow's filter (take) has no kernel for
    table = table.cast(pa.schema([
        f.with_type(pa.string()) if pa.types.is_string_view(f.type)
        else f.with_type(pa.binary()) if pa.types.is_binary_view(f.type) else f
        for f in table.schema]))
    if OP in table.column_names:
        table = table.filter(_live_mask(table))
    return table.select([name for name in table.column_names if not name.startswith("_lakesync_")])


def _live_mask(table: pa.Table | pa.RecordBatch) -> pa.Array:
    return pc.invert(pc.fill_null(pc.equal(pc.cast(table[OP], pa.string()), DELETE_OP), False))


# -- fingerprints ----------------------------------------------------------------------------------------------
def conform(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """``table``'s columns named in ``schema``, cast to its types (Delta hands back view types, e.g.); a
    column ``table`` lacks is all NULL (callers check for missing source columns first)."""
    names = set(table.schema.names)
    return pa.Table.from_arrays(
        [pc.cast(table[f.name], f.type) if f.name in names else pa.nulls(table.num_rows, f.type)
         for f in schema], names=schema.names)


def row_hashes(table: pa.Table) -> np.ndarray:
    """A 64-bit fingerprint per row over all columns, equal for equal values whatever the Arrow layout."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_pandas_object(_frame(table), index=False).to_numpy(dtype=np.uint64)


def _frame(table: pa.Table) -> pd.DataFrame:
    """The columns pandas hashes, under positional names (hostile names can't collide).

    A DECIMAL becomes the two 64-bit halves of its 128-bit unscaled integer plus a NULL flag (both sides
    share one schema, so equal values have equal integers; pandas would hash ``Decimal`` objects through
    ``str`` one by one). Integers with NULLs stay Python ints, never float64, which would lose the low bits
    of a BIGINT."""
    columns: dict[str, Any] = {}
    for i, column in enumerate(table.columns):
        if pa.types.is_decimal128(column.type):
            array = column.combine_chunks()
            halves = np.frombuffer(array.buffers()[1], dtype=np.int64)[2 * array.offset:2 * (array.offset + len(array))]
            nulls = array.is_null().to_numpy(zero_copy_only=False)
            halves = np.where(np.repeat(nulls, 2), 0, halves).reshape(-1, 2)
            columns[f"c{i}lo"], columns[f"c{i}hi"], columns[f"c{i}null"] = halves[:, 0], halves[:, 1], nulls
        else:
            columns[f"c{i}"] = column.to_pandas(integer_object_nulls=True, date_as_object=False)
    return pd.DataFrame(columns, copy=False)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and value.as_tuple().exponent >= 0 else str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    return value


def _key_dicts(keys: pa.Table, limit: int) -> list[dict]:
    return [{name: _jsonable(value) for name, value in row.items()} for row in keys.slice(0, limit).to_pylist()]


def compare_tables(name: str, source: pa.Table, delta: pa.Table, key_columns: list[str]) -> TableComparison:
    """Join two whole tables on the key and name what differs (a sample of up to :data:`SAMPLE_KEYS` keys each).

    ``delta`` holds live rows only (see :func:`read_delta_table`); no positions, so nothing is "in flight"."""
    result = TableComparison(name, source.num_rows, delta.num_rows, key_columns=list(key_columns))
    if not key_columns:
        result.comparable, result.semantics = False, "append_log"
        result.note = "append-only change log (no key): not comparable row for row"
        return result
    missing_columns = [f.name for f in source.schema if f.name not in delta.schema.names]
    if missing_columns:
        result.note = f"Delta lacks columns {missing_columns}"
        result.mismatched_keys = source.num_rows or 1
        return result
    diff = _diff(source, delta.select(source.schema.names), source.schema, key_columns, snapshot_key=None)
    diff.fill(result)
    return result


@dataclass
class _Diff:
    """Key-level differences within some chunks."""

    missing: pa.Table
    extra: pa.Table
    different: pa.Table
    in_flight: int

    @property
    def count(self) -> int:
        return self.missing.num_rows + self.extra.num_rows + self.different.num_rows

    def keys(self) -> pa.Table:
        return pa.concat_tables([self.missing, self.extra, self.different])

    def fill(self, result: TableComparison) -> None:
        result.missing_in_delta = _key_dicts(self.missing, SAMPLE_KEYS)
        result.extra_in_delta = _key_dicts(self.extra, SAMPLE_KEYS)
        result.different = _key_dicts(self.different, SAMPLE_KEYS)
        result.mismatched_keys = self.count
        result.in_flight_keys = self.in_flight


@dataclass
class _Findings:
    """Key-level differences gathered over groups of chunks: counts, samples, and the chunks that hold the
    differing keys (re-checked next round; keys in flight are explained by their positions and are not)."""

    missing: list[dict] = field(default_factory=list)
    extra: list[dict] = field(default_factory=list)
    different: list[dict] = field(default_factory=list)
    count: int = 0
    in_flight: int = 0
    recheck: set[int] = field(default_factory=set)

    def add(self, diff: _Diff, plan: ChunkPlan, key_schema: pa.Schema) -> None:
        for sample, keys in ((self.missing, diff.missing), (self.extra, diff.extra),
                             (self.different, diff.different)):
            sample.extend(_key_dicts(keys, SAMPLE_KEYS - len(sample)))
        self.count += diff.count
        self.in_flight += diff.in_flight
        self.recheck.update(int(c) for c in plan.chunk_ids(conform(diff.keys(), key_schema)))

    def fill(self, result: TableComparison) -> None:
        result.missing_in_delta, result.extra_in_delta, result.different = self.missing, self.extra, self.different
        result.mismatched_keys, result.in_flight_keys = self.count, self.in_flight


def _diff(source: pa.Table, delta: pa.Table, schema: pa.Schema, key_columns: list[str], *,
          snapshot_key: str | None) -> _Diff:
    """Join on the key. ``delta`` may carry ``_lakesync_pos``/``_lakesync_op`` (tombstones included): a Delta
    row or tombstone positioned after ``snapshot_key`` changed after the source was read, so it is counted as
    in flight instead of as a difference. A key live twice in Delta is reported as different."""
    key_schema = pa.schema([schema.field(name) for name in key_columns])
    src = conform(source, schema)
    dst = conform(delta, schema)
    pos = delta[POS] if POS in delta.column_names else pa.nulls(delta.num_rows, pa.string())
    live = (_live_mask(delta).to_numpy(zero_copy_only=False) if OP in delta.column_names
            else np.ones(delta.num_rows, dtype=bool))
    s = pd.DataFrame({"k": row_hashes(src.select(key_columns)), "h": row_hashes(src), "i": np.arange(src.num_rows)})
    d = pd.DataFrame({"k": row_hashes(dst.select(key_columns)), "h": row_hashes(dst), "j": np.arange(dst.num_rows),
                      "pos": pos.to_pandas(), "live": live})
    newer = (d["pos"].fillna(MIN_KEY) > snapshot_key) if snapshot_key else pd.Series(False, index=d.index)
    d["newer"] = newer.to_numpy(dtype=bool)
    in_flight_keys = set(d.loc[d["newer"], "k"])
    d = d[d["live"]]
    duplicated = set(d.loc[d["k"].duplicated(keep=False), "k"])
    merged = s.merge(d.drop_duplicates("k"), on="k", how="outer", suffixes=("_s", "_d"), indicator=True)
    merged["flight"] = merged["k"].isin(in_flight_keys)
    settled = merged[~merged["flight"]]
    missing = settled[settled["_merge"] == "left_only"]
    extra = settled[settled["_merge"] == "right_only"]
    both = settled[settled["_merge"] == "both"]
    different = both[(both["h_s"] != both["h_d"]) | both["k"].isin(duplicated)]

    def keys_of(frame: pd.DataFrame, side: str) -> pa.Table:
        rows = frame[side].astype("int64").to_numpy()
        table = (src if side == "i" else dst).select(key_columns).take(pa.array(rows, pa.int64()))
        return table.cast(key_schema)

    missing_keys, extra_keys, different_keys = keys_of(missing, "i"), keys_of(extra, "j"), keys_of(different, "i")
    return _Diff(missing_keys, extra_keys, different_keys, int(merged["flight"].sum()))


# -- chunking ---------------------------------------------------------------------------------------------------
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
        key = quote_identifier(keys[0])
        cursor.execute(f"SELECT MIN({key}), MAX({key}), COUNT(*) FROM {shape.qualified}")
        low, high, count = cursor.fetchone()
        if low is None:
            return ChunkPlan(keys, uppers=()), 0
        pieces = max(1, math.ceil(count / chunk_rows))
        step = max(1, math.ceil((int(high) - int(low) + 1) / pieces))
        uppers = tuple(range(int(low) - 1 + step, int(high), step))
        return ChunkPlan(keys, uppers=uppers), int(count)
    cursor.execute(f"SELECT COUNT(*) FROM {shape.qualified}")
    count = int(cursor.fetchone()[0])
    return ChunkPlan(keys, buckets=max(1, math.ceil(count / chunk_rows))), count


@dataclass
class _Digest:
    rows: int = 0
    xor: int = 0
    total: int = 0

    def add(self, other: _Digest) -> None:
        self.rows += other.rows
        self.xor ^= other.xor
        self.total = (self.total + other.total) % (1 << 64)


def chunk_digests(chunks: np.ndarray, hashes: np.ndarray) -> dict[int, _Digest]:
    """Per chunk: rows, XOR and sum (mod 2^64) of the row fingerprints."""
    if len(chunks) == 0:
        return {}
    order = np.argsort(chunks, kind="stable")
    ordered, values = chunks[order], hashes[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    xors = np.bitwise_xor.reduceat(values, starts)
    sums = np.add.reduceat(values, starts)
    counts = np.diff(np.r_[starts, len(ordered)])
    return {int(ordered[start]): _Digest(int(n), int(x), int(t))
            for start, n, x, t in zip(starts, counts, xors, sums, strict=True)}


def _merge_digests(into: dict[int, _Digest], more: dict[int, _Digest]) -> None:
    for chunk, digest in more.items():
        into.setdefault(chunk, _Digest()).add(digest)


# -- the two sides ------------------------------------------------------------------------------------------------
class _SourceSide:
    """One table read inside an open snapshot connection, chunk by chunk.

    By default rows come the plain way, PyMySQL rows through :func:`lakesync.core.types.arrow_table_from_db_rows`,
    independent of the full load's fast reader, so that a bug in that reader can't hide itself by reading
    the source just as wrongly. ``fast`` reads through the loader's :class:`RangeReader` (about 3x faster).
    """

    def __init__(self, conn: pymysql.connections.Connection, shape: TableShape, plan: ChunkPlan,
                 batch_rows: int, *, fast: bool) -> None:
        self.conn, self.shape, self.plan, self.batch_rows = conn, shape, plan, batch_rows
        self.columns = list(shape.columns)
        self.reader = RangeReader(shape) if fast else None
        self.schema = arrow_schema(self.columns)

    def batches(self, chunks: set[int] | None = None) -> Iterator[pa.Table]:
        """The rows of ``chunks`` (all when None): range chunks are read one by one with a key predicate,
        hash buckets by reading the whole table and keeping theirs."""
        if self.plan.by_range:
            wanted = range(self.plan.count) if chunks is None else sorted(chunks)
            for chunk in wanted:
                yield from self._read_range(self.plan.key_range(chunk))
            return
        whole = self.reader.stream_all(self.conn, self.batch_rows) if self.reader else self._select("TRUE")
        for batch in whole:
            if chunks is not None:
                ids = self.plan.chunk_ids(batch.select(list(self.plan.key_columns)))
                batch = batch.filter(pa.array(np.isin(ids, list(chunks))))
            yield batch

    def _read_range(self, key_range: KeyRange) -> Iterator[pa.Table]:
        where = key_range.predicate(tuple(self.shape.key_columns))
        if self.reader is None:
            yield from self._select(where)
            return
        try:
            with self.conn.cursor(pymysql.cursors.Cursor) as cursor:
                table = self.reader.read_range(cursor, key_range)
        except SourceError:
            # A dense stretch of keys made the chunk's text too long for one GROUP_CONCAT: read it row by row.
            yield from self._select(where)
            return
        yield table

    def _select(self, where: str) -> Iterator[pa.Table]:
        sql = f"SELECT {snapshot_select_list(self.columns)} FROM {self.shape.qualified} WHERE {where}"
        with self.conn.cursor(pymysql.cursors.SSCursor) as cursor:
            cursor.execute(sql)
            while rows := cursor.fetchmany(FETCH_ROWS):
                yield arrow_table_from_db_rows(self.columns, rows)


class _DeltaSide:
    """The Delta table, streamed in batches, and its tombstones (the sink keeps live rows only in the table
    and ``(key, position)`` of each delete in a side table, see :mod:`lakesync.sink.tombstones`)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None, schema: pa.Schema, plan: ChunkPlan
                 ) -> None:
        from deltalake import DeltaTable

        from lakesync.sink.tombstones import TombstoneStore, tombstone_uri

        self.table = DeltaTable(uri, storage_options=storage_options)
        names = set(self.table.schema().to_arrow().names)
        self.missing_columns = [name for name in schema.names if name not in names]
        self.extra_columns = sorted(names - set(schema.names) - {POS, OP, TS})
        self.schema = pa.schema([*schema, pa.field(POS, pa.string()), pa.field(OP, pa.string())])
        self.columns = [name for name in self.schema.names if name in names]
        self.key_schema = pa.schema([schema.field(name) for name in plan.key_columns])
        self.plan = plan
        self.tombstone_store = TombstoneStore(tombstone_uri(uri), key_columns=list(plan.key_columns),
                                              storage_options=storage_options)

    def tombstones(self, keys: pa.Table) -> pa.Table:
        """The tombstones of ``keys`` as rows of :attr:`schema` with ``_lakesync_op = 'd'``."""
        found = self.tombstone_store.matching(keys)
        found = found.append_column(OP, pa.array([DELETE_OP] * found.num_rows, pa.string()))
        return conform(found, self.schema)

    def batches(self, chunks: set[int] | None = None) -> Iterator[pa.Table]:
        if self.plan.by_range and chunks is not None:
            for chunk in sorted(chunks):
                yield self._scan(self.plan.delta_predicate(chunk))
            return
        reader = pa.RecordBatchReader.from_stream(self.table.scan(columns=self.columns))
        for batch in reader:
            table = conform(batch, self.schema)  # Delta scans hand back view types, which few kernels take
            if chunks is not None:
                ids = self.plan.chunk_ids(conform(table, self.key_schema))
                table = table.filter(pa.array(np.isin(ids, list(chunks))))
            yield table

    def refresh(self) -> None:
        """Move to the table's newest version (the stream keeps committing while we compare)."""
        self.table.update_incremental()

    def _scan(self, predicate: str) -> pa.Table:
        return conform(pa.table(self.table.scan(columns=self.columns, predicate=predicate)), self.schema)


def _source_digests(side: _SourceSide) -> tuple[dict[int, _Digest], int]:
    digests: dict[int, _Digest] = {}
    rows = 0
    for batch in side.batches():
        rows += batch.num_rows
        _merge_digests(digests, chunk_digests(side.plan.chunk_ids(batch.select(list(side.plan.key_columns))),
                                              row_hashes(batch)))
    return digests, rows


def _delta_digests(side: _DeltaSide, schema: pa.Schema) -> tuple[dict[int, _Digest], int]:
    digests: dict[int, _Digest] = {}
    rows = 0
    for batch in side.batches():
        if OP in batch.column_names:
            batch = batch.filter(_live_mask(batch))
        conformed = conform(batch, schema)
        rows += conformed.num_rows
        _merge_digests(digests, chunk_digests(side.plan.chunk_ids(conformed.select(list(side.plan.key_columns))),
                                              row_hashes(conformed)))
    return digests, rows


def _concat(parts: Iterator[pa.Table], schema: pa.Schema) -> pa.Table:
    tables = [conform(part, schema) for part in parts]
    return pa.concat_tables(tables) if tables else schema.empty_table()


# -- waiting for the stream ----------------------------------------------------------------------------------
def stopped_reason(pipeline: Pipeline, table: str) -> str | None:
    """Why the stream stopped applying ``table`` (a schema change it can't follow...), or None."""
    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables.get(table)
    return progress.stopped_reason if progress else None


def wait_for_stream(pipeline: Pipeline, table: str, position_key: str, deadline: float) -> bool:
    """Poll until the stream has applied ``table`` up to ``position_key`` or the monotonic ``deadline``
    passes; True when it got there. Returns False at once when the stream has stopped the table."""
    if stopped_reason(pipeline, table):
        return False
    while True:
        applied = applied_position(pipeline, table)
        if applied is not None and applied >= position_key:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_SECONDS)


# -- one table, one pipeline --------------------------------------------------------------------------------------
@dataclass
class _Context:
    pipeline: Pipeline
    rounds: int
    settle_timeout_s: float
    chunk_rows: int
    fast_read: bool
    progress: ProgressCallback

    def say(self, table: str, what: str) -> None:
        self.progress(table, what)


def _semantics(pipeline: Pipeline, table: str, key_columns: Sequence[str]) -> str:
    configured = pipeline.tables.settings_for(table).semantics
    return table_semantics(configured, bool(key_columns))


def _validate_table(ctx: _Context, table: str, open_snapshot_fn: Callable[[], Any]) -> TableComparison:
    """Compare one table (see the module docstring for the rounds)."""
    pipeline = ctx.pipeline
    uri = pipeline.delta.table_uri(table)
    storage = pipeline.delta.storage_options or None
    deadline = time.monotonic() + ctx.settle_timeout_s
    result = TableComparison(table, 0, 0, started_at=_utc_now())
    if not _delta_exists(uri, storage):
        result.error = f"there is no Delta table at {uri}: run the full load of {table} first"
        result.finished_at = _utc_now()
        return result
    snapshot = open_snapshot_fn()
    try:
        conn = snapshot.connections[0]
        shape = describe_table(conn, pipeline.source.database, table,
                               key_columns=pipeline.tables.settings_for(table).key_columns)
        result.key_columns = list(shape.key_columns)
        result.semantics = _semantics(pipeline, table, shape.key_columns)
        if result.semantics == "append_log" or not shape.key_columns:
            return _not_comparable(result, conn, shape, uri, storage)
        with conn.cursor(pymysql.cursors.Cursor) as cursor:
            chunk_rows = min(ctx.chunk_rows, rows_per_read(shape, cursor, ctx.chunk_rows))
            plan, _ = plan_chunks(cursor, shape, chunk_rows)
        source = _SourceSide(conn, shape, plan, chunk_rows, fast=ctx.fast_read)
        delta = _DeltaSide(uri, storage, source.schema, plan)
        result.chunks, result.position, result.rounds = plan.count, snapshot.position.key(), 1
        if delta.missing_columns:
            result.source_rows = _source_digests(source)[1]
            result.note = f"the Delta table lacks the source columns {delta.missing_columns}"
            result.mismatched_keys = max(1, result.source_rows)
            return result
        if delta.extra_columns:
            result.note = f"not compared: Delta columns the source no longer has {delta.extra_columns}"
        ctx.say(table, f"checksums of {plan.count} chunks")
        source_digests, result.source_rows = _source_digests(source)
        delta_digests, result.delta_rows = _delta_digests(delta, source.schema)
        suspects = {c for c in set(source_digests) | set(delta_digests)
                    if source_digests.get(c) != delta_digests.get(c)}
        result.chunks_mismatched = len(suspects)
        key_schema = pa.schema([source.schema.field(name) for name in shape.key_columns])
        group_size = max(1, DIFF_ROWS // chunk_rows)
        while suspects:
            ctx.say(table, f"round {result.rounds}: {len(suspects)} chunks differ, comparing keys")
            findings = _Findings()
            ordered = sorted(suspects)
            for start in range(0, len(ordered), group_size):
                group = set(ordered[start:start + group_size])
                source_rows = _concat(source.batches(group), source.schema)
                delta_rows = _concat(delta.batches(group), delta.schema)
                delta_rows = pa.concat_tables([delta_rows, delta.tombstones(source_rows.select(shape.key_columns))])
                findings.add(_diff(source_rows, delta_rows, source.schema, list(shape.key_columns),
                                   snapshot_key=snapshot.position.key()), plan, key_schema)
            findings.fill(result)
            if not findings.recheck or result.rounds >= ctx.rounds:
                break
            suspects = findings.recheck
            snapshot.close()
            snapshot = open_snapshot_fn()
            source.conn = snapshot.connections[0]
            result.rounds += 1
            result.position = snapshot.position.key()
            ctx.say(table, f"round {result.rounds}: waiting for the stream to reach the source")
            result.stream_behind = not wait_for_stream(pipeline, table, snapshot.position.key(), deadline)
            if reason := stopped_reason(pipeline, table):
                result.note = f"the stream stopped applying {table}: {reason}"
            delta.refresh()
        return result
    finally:
        snapshot.close()
        result.finished_at = _utc_now()


def _delta_exists(uri: str, storage: dict[str, str] | None) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(uri, storage_options=storage)


def _not_comparable(result: TableComparison, conn: Any, shape: TableShape, uri: str,
                    storage: dict[str, str] | None) -> TableComparison:
    from deltalake import DeltaTable

    with conn.cursor(pymysql.cursors.Cursor) as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {shape.qualified}")
        result.source_rows = int(cursor.fetchone()[0])
    log_table = DeltaTable(uri, storage_options=storage)
    names = log_table.schema().to_arrow().names
    if POS in names:
        positions = pa.table(log_table.scan(columns=[POS]))[POS]
        result.delta_rows = len(pc.unique(positions))
        counted = "distinct positions"
    else:
        result.delta_rows = log_table.count()
        counted = "rows"
    result.comparable = False
    result.note = (f"append-only change log (no key): not comparable row for row; source {result.source_rows} "
                   f"rows, Delta {result.delta_rows} {counted}")
    return result


def _transient(exc: BaseException) -> bool:
    """A server hiccup worth one more try (a lost connection, a temporary file the server failed to
    delete), as opposed to a missing table or privilege."""
    cause = exc if isinstance(exc, pymysql.MySQLError) else exc.__cause__
    return isinstance(cause, pymysql.err.InternalError | pymysql.err.OperationalError) and bool(cause.args) \
        and cause.args[0] in _TRANSIENT_ERRORS


def _validate_with_retry(ctx: _Context, table: str, snapshot: Callable[[], Any]) -> TableComparison:
    """Validate one table, once more after a transient server error. Any failure becomes this table's
    result (status ``error``): one unreadable table must not hide the others' results."""
    try:
        return _validate_table(ctx, table, snapshot)
    except Exception as exc:
        if not _transient(exc):
            return _failed(table, exc)
        log.info("validating %s hit a transient server error, trying again: %s", table, exc)
    try:
        return _validate_table(ctx, table, snapshot)
    except Exception as exc:
        return _failed(table, exc)


def _failed(table: str, exc: Exception) -> TableComparison:
    log.warning("validating %s failed: %s", table, exc, exc_info=log.isEnabledFor(logging.DEBUG))
    return TableComparison(table, 0, 0, error=str(exc), started_at=_utc_now(), finished_at=_utc_now())


def _lock_free_snapshot(connection: Any, database: str) -> Any:
    """A snapshot tagged with the position read just *before* it started, for a MySQL user without RELOAD
    (no ``FLUSH TABLES WITH READ LOCK``). The position may be a little early: a row committed in between is
    read with its new value while its Delta row is positioned after the tag, so it counts as in flight and
    is re-checked, never reported as a false mismatch."""
    from lakesync.source.server_checks import current_position
    from lakesync.source.snapshot import Snapshot, connect

    conn = connect(connection, database=database)
    position = current_position(conn)
    with conn.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    return Snapshot(position, "position read before START TRANSACTION WITH CONSISTENT SNAPSHOT (no lock)", [conn])


def validate_pipeline(pipeline: Pipeline, *, tables: Sequence[str] | None = None,
                      settle_timeout_s: float = DEFAULT_SETTLE_TIMEOUT_S, rounds: int = DEFAULT_ROUNDS,
                      chunk_rows: int | None = None, fast_read: bool = False, store: bool = True,
                      progress: ProgressCallback | None = None) -> ValidationReport:
    """Compare every selected table (or ``tables``) of ``pipeline`` with its Delta table.

    Never raises for a difference: call :meth:`ValidationReport.raise_for_mismatch`. A table that can't be
    read is reported with ``status == "error"`` and the others are still checked. With ``store`` the
    results are appended to the pipeline's validation table (:mod:`lakesync.validation.store`).
    ``fast_read`` reads the source with the full load's own reader instead of the independent plain path
    (see :class:`_SourceSide`).
    """
    from lakesync.core.connections import mysql_connection
    from lakesync.source.schema import list_tables
    from lakesync.source.snapshot import connect, open_snapshot

    connection = mysql_connection(pipeline)
    database = pipeline.source.database
    report = ValidationReport(uuid.uuid4().hex, pipeline.name, _utc_now())
    if tables is None:
        conn = connect(connection, database=database)
        try:
            tables = [t for t in list_tables(conn, database) if pipeline.tables.selects(t)]
        finally:
            conn.close()
    ctx = _Context(pipeline, max(1, rounds), settle_timeout_s,
                   chunk_rows or min(DEFAULT_CHUNK_ROWS, pipeline.snapshot.chunk_rows), fast_read,
                   progress or (lambda table, what: log.info("%s: %s", table, what)))

    def snapshot() -> Any:
        try:
            return open_snapshot(connection, database=database, connections=1)
        except SourceError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, pymysql.MySQLError) and cause.args and cause.args[0] in _LOCK_DENIED):
                raise
            return _lock_free_snapshot(connection, database)

    for table in tables:
        ctx.say(table, "reading")
        report.tables.append(_validate_with_retry(ctx, table, snapshot))
    report.finished_at = _utc_now()
    if store:
        from lakesync.validation.store import record_run

        record_run(pipeline, report)
    return report
