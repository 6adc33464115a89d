"""The full load: every selected table into Delta, each in one commit, tagged with the binlog position P.

Two modes (``snapshot.mode`` in the pipeline, ``--mode`` on the command line):

* **consistent** (default): one snapshot for all tables (:mod:`lakesync.source.snapshot`), read on a few
  connections that share it, so every table is exactly as of P. The snapshot lives in this process, so the
  reading happens here (the Spark app runs it on the driver). An interrupted table is read again from a
  new snapshot (its rows must all come from one snapshot); tables already done are not read again.
* **chunked**: each key range is read in its own statement, on its own connection, tagged with the
  position read *before* its SELECT, and written as a Parquet file by whoever runs the chunks (a thread
  pool here, Spark tasks in ``spark_apps/full_load.py``). The table's files are committed in one Delta
  transaction when all its chunks are written, and the table is recorded at its smallest chunk position:
  the stream replays from there and repairs whatever moved during the read (the sink keeps the larger
  position per key). No lock, and an interrupted table keeps the chunks it wrote.

Either way a table becomes visible in one commit: files written but not committed are invisible to
readers (``VACUUM`` removes them), and progress is kept in ``full_load.json`` (:mod:`lakesync.full_load.state`),
which the relay reads to know where the stream must start.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import queue
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pymysql
from deltalake import CommitProperties, DeltaTable, Schema
from deltalake.transaction import AddAction, create_table_with_add_actions

from lakesync.core.config import Pipeline
from lakesync.core.connections import MySQLConnection, mysql_connection
from lakesync.core.errors import ConfigError, SchemaChangeError, SinkError, SourceError
from lakesync.core.object_store import arrow_filesystem
from lakesync.core.positions import SourcePosition
from lakesync.core.table_layout import OP, POS, TS
from lakesync.full_load.state import ChunkDone, LoadState, position_from_json, position_to_json, utc_now
from lakesync.sink.delta import DeltaSink, snapshot_transaction
from lakesync.source.schema import list_tables
from lakesync.source.server_checks import check_binlog_settings, current_position
from lakesync.source.snapshot import Snapshot, connect, open_snapshot
from lakesync.source.table_reader import (
    KeyRange,
    RangeReader,
    TableShape,
    describe_table,
    plan_ranges,
    rows_per_read,
)

log = logging.getLogger(__name__)

SNAPSHOT_OP = "r"
#: Delta table settings every lakesync table gets (the stream and the nightly validation read the feed).
TABLE_CONFIGURATION = {"delta.enableChangeDataFeed": "true"}
#: Rows per batch when a table without a key is streamed whole, and batches per file (consistent mode).
KEYLESS_BATCH_ROWS = 100_000
KEYLESS_FILE_BATCHES = 10
READ_THREADS_PER_CONNECTION = 2
ProgressCallback = Callable[[str, int, int], None]
"""``(table, rows read so far, estimated total rows)``, called as chunks arrive."""


@dataclass(frozen=True)
class TableResult:
    table: str
    rows: int
    seconds: float
    delta_version: int | None
    position: SourcePosition
    mode: str
    skipped: bool = False  # done by an earlier run and not read again

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


# -- the rows as Delta stores them ----------------------------------------------------------------------------
def delta_schema(source_schema: pa.Schema) -> pa.Schema:
    """The source columns plus the position columns the sink compares (see :mod:`lakesync.core.positions`)."""
    return source_schema.append(pa.field(POS, pa.string(), nullable=False)).append(
        pa.field(OP, pa.string(), nullable=False)).append(pa.field(TS, pa.int64(), nullable=False))


class RowTagger:
    """Adds the position columns to parts of one table. Their values are the same for every row, so the
    arrays are built once and sliced (zero-copy) per part, instead of costing ~0.1 s per million rows."""

    def __init__(self, schema: pa.Schema, position: SourcePosition, ts_ms: int) -> None:
        self.schema = schema
        self._values = (pa.scalar(position.key()), pa.scalar(SNAPSHOT_OP), pa.scalar(ts_ms, pa.int64()))
        self._constants = [pa.repeat(value, 0) for value in self._values]

    def __call__(self, table: pa.Table) -> pa.Table:
        rows = table.num_rows
        constants = self._constants
        if len(constants[0]) < rows:  # a benign race between worker threads: both build the same arrays
            constants = self._constants = [pa.repeat(value, rows) for value in self._values]
        return pa.Table.from_arrays([*table.columns, *(array.slice(0, rows) for array in constants)],
                                    schema=self.schema)


def commit_metadata(position: SourcePosition, *, table: str, mode: str, ts_ms: int) -> dict[str, str | int]:
    """What each load commit carries in its commit info (the same keys as ``DeltaSink.write_snapshot``), so
    people can read the position from the table's history. delta-rs 1.6 refuses table properties outside
    the ``delta.*`` set, so commit info is the place; the sink itself reads the app transaction."""
    return {
        "lakesync.operation": "snapshot",
        "lakesync.snapshot.position": position.key(),
        "lakesync.snapshot.token": position.token(),
        "lakesync.snapshot.gtid": position.gtid or "",
        "lakesync.snapshot.ts_ms": ts_ms,
        "lakesync.snapshot.mode": mode,
        "lakesync.table": table,
    }


# -- chunks (chunked mode) --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkTask:
    """Everything a worker (a thread or a Spark task) needs to read one key range and write it as Parquet."""

    connection: MySQLConnection
    shape: TableShape
    key_range: KeyRange
    table_uri: str
    ts_ms: int
    #: ``delta.storage_options``: the executors write to the same object store as the driver commits to.
    storage_options: dict[str, str] = field(default_factory=dict)


def _stats_value(value: Any) -> Any:
    """A min/max in Delta's JSON stats form, or None where an exact form is not worth the trouble."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | str):
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    return None


class _FileStats:
    """Delta add-action statistics: row count, and exact min/max/null count of the columns MERGE prunes by
    (the key and ``_lakesync_pos``), so the stream's MERGE can skip files of a big table."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self.rows = 0
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.nulls: dict[str, int] = {}
        self.exact = set(self.columns)

    def add(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for name in self.columns:
            column = table.column(name)
            self.nulls[name] = self.nulls.get(name, 0) + column.null_count
            if column.null_count == len(column) or name not in self.exact:
                continue
            extremes = pc.min_max(column).as_py()
            low, high = _stats_value(extremes["min"]), _stats_value(extremes["max"])
            if low is None or high is None:
                self.exact.discard(name)
                continue
            self.low[name] = low if name not in self.low else min(self.low[name], low)
            self.high[name] = high if name not in self.high else max(self.high[name], high)

    def to_json(self) -> str:
        kept = [name for name in self.columns if name in self.exact and name in self.low]
        return json.dumps({
            "numRecords": self.rows,
            "minValues": {name: self.low[name] for name in kept},
            "maxValues": {name: self.high[name] for name in kept},
            "nullCount": {name: self.nulls.get(name, 0) for name in kept},
        })


def write_part(table_uri: str, schema: pa.Schema, parts: Iterable[pa.Table], *, stats_columns: Sequence[str],
               storage_options: dict[str, str] | None = None) -> tuple[str, int, int, str]:
    """Write tagged rows as one Parquet file in the table folder; ``(relative path, bytes, rows, stats)``.

    The file is invisible to readers until a commit adds it; a load that fails leaves it for VACUUM.
    """
    filesystem, root = arrow_filesystem(table_uri, storage_options)
    name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
    stats = _FileStats(stats_columns)
    try:
        filesystem.create_dir(root, recursive=True)
        # Dictionary encoding only for the constant columns: on the source columns it costs half the encoding
        # time and, for mostly unique values, makes the file bigger, not smaller.
        with filesystem.open_output_stream(f"{root}/{name}") as sink, \
                pq.ParquetWriter(sink, schema, compression="snappy", use_dictionary=[POS, OP]) as writer:
            for part in parts:
                writer.write_table(part)
                stats.add(part)
        size = filesystem.get_file_info(f"{root}/{name}").size or 0
    except OSError as exc:  # a full disk, a missing permission, an unreachable object store
        raise SinkError(
            f"writing a data file of {table_uri} failed: {exc}; nothing of this table was committed",
            hint="free space or fix access under delta.root, then run the load again (it resumes; files "
            "written but never committed are invisible and VACUUM removes them)",
        ) from exc
    return name, int(size), stats.rows, stats.to_json()


def load_chunk(task: ChunkTask) -> ChunkDone:
    """Read one key range in one statement, tagged with the position read just before it; write it as a
    Parquet file in the table folder (invisible until the driver commits it)."""
    reader = RangeReader(task.shape)
    schema = delta_schema(reader.schema)
    conn = connect(task.connection, database=task.shape.database)
    try:
        position = current_position(conn)
        with _read_errors(task.shape.name):
            tag = RowTagger(schema, position, task.ts_ms)
            parts = (tag(part) for part in _read_chunk(conn, reader, task.key_range))
            name, size, rows, stats = write_part(task.table_uri, schema, parts,
                                                 stats_columns=[*task.shape.key_columns, POS],
                                                 storage_options=task.storage_options)
    finally:
        conn.close()
    return ChunkDone(chunk_id=task.key_range.chunk_id, path=name, size=size, rows=rows,
                     position_key=position.key(), position=position_to_json(position), stats=stats)


def _read_chunk(conn: pymysql.connections.Connection, reader: RangeReader, key_range: KeyRange) -> Iterator[pa.Table]:
    if reader.shape.has_key:
        with conn.cursor() as cursor:
            yield reader.read_range(cursor, key_range)
    else:
        yield from reader.stream_all(conn, KEYLESS_BATCH_ROWS)


class ChunkRunner(Protocol):
    """Runs :func:`load_chunk` over tasks, calling ``on_done`` on the caller's thread as each one finishes."""

    def run(self, tasks: Sequence[ChunkTask], on_done: Callable[[ChunkDone], None]) -> None: ...


@dataclass
class ThreadChunkRunner:
    """Chunks on a local thread pool (the reads and Arrow's parsing release the GIL)."""

    workers: int = 2

    def run(self, tasks: Sequence[ChunkTask], on_done: Callable[[ChunkDone], None]) -> None:
        _run_pool(self.workers, load_chunk, tasks, on_done)


@dataclass
class SparkChunkRunner:
    """Chunks as Spark tasks, read and written on the executors; the driver only commits.

    One small job per chunk, submitted from as many driver threads as the cluster has cores, so that each
    finished chunk is recorded in the state file at once (one big job would report nothing until its last
    task ended, and an interruption would lose the record of every chunk it wrote).
    """

    spark: Any  # pyspark.sql.SparkSession; not imported here, so the library does not need Spark to load

    def run(self, tasks: Sequence[ChunkTask], on_done: Callable[[ChunkDone], None]) -> None:
        context = self.spark.sparkContext

        def one(task: ChunkTask) -> ChunkDone:
            context.setJobDescription(f"lakesync full load {task.shape.name} chunk {task.key_range.chunk_id}")
            return context.parallelize([task], 1).map(load_chunk).collect()[0]

        _run_pool(max(1, context.defaultParallelism), one, tasks, on_done)


def _run_pool(workers: int, work: Callable[[ChunkTask], ChunkDone], tasks: Sequence[ChunkTask],
              on_done: Callable[[ChunkDone], None]) -> None:
    """Run ``work`` over ``tasks`` on ``workers`` threads; ``on_done`` runs on the calling thread."""
    with ThreadPoolExecutor(workers, thread_name_prefix="lakesync-chunk") as pool:
        pending = {pool.submit(work, task) for task in tasks}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    on_done(future.result())
        finally:
            for future in pending:
                future.cancel()


# -- the load -------------------------------------------------------------------------------------------------
@dataclass
class FullLoad:
    """Loads a pipeline's tables; :meth:`run` is resumable (see the module docstring)."""

    pipeline: Pipeline
    tables: Sequence[str] | None = None
    mode: str | None = None
    connections: int = 2
    restart: bool = False
    on_progress: ProgressCallback | None = None
    chunk_runner: ChunkRunner | None = None
    connection: MySQLConnection | None = None
    state: LoadState = field(init=False)

    def __post_init__(self) -> None:
        self.mode = self.mode or self.pipeline.snapshot.mode
        if self.mode not in ("consistent", "chunked"):
            raise ConfigError(f"unknown snapshot mode {self.mode!r}", hint="use consistent or chunked")
        self.connection = self.connection or mysql_connection(self.pipeline)
        self.state = LoadState.for_pipeline_dir(self.pipeline.pipeline_state_dir)

    @property
    def database(self) -> str:
        return self.pipeline.source.database

    def run(self) -> list[TableResult]:
        assert self.connection is not None
        control = connect(self.connection, database=self.database)
        try:
            check_binlog_settings(control)
            tables = self._select_tables(control)
        finally:
            control.close()
        if self.restart:
            self.state.forget(tables)
        if self.state.started_at is None or self.state.finished_at is not None:
            self.state.started_at, self.state.finished_at = utc_now(), None
        self.state.mode = self.mode
        self.state.save()
        results = [self._skipped(name) for name in tables if self.state.is_done(name)]
        pending = [name for name in tables if not self.state.is_done(name)]
        if pending:
            results += self._run_consistent(pending) if self.mode == "consistent" else self._run_chunked(pending)
        self.state.finished_at = utc_now()
        self.state.save()
        order = {name: i for i, name in enumerate(tables)}
        return sorted(results, key=lambda result: order[result.table])

    def _select_tables(self, conn: pymysql.connections.Connection) -> list[str]:
        existing = list_tables(conn, self.database)
        selected = [name for name in existing if self.pipeline.tables.selects(name)]
        if not self.tables:
            if not selected:
                raise ConfigError(
                    f"pipeline {self.pipeline.name} selects no tables of database {self.database}",
                    hint=f"tables there: {', '.join(existing) or 'none'}; check tables.include/exclude",
                )
            return selected
        unknown = [name for name in self.tables if name not in existing]
        if unknown:
            raise SourceError(
                f"no table {', '.join(unknown)} in database {self.database} (or the lakesync user can't see it)",
                hint=f"tables there: {', '.join(existing) or 'none'}",
            )
        excluded = [name for name in self.tables if name not in selected]
        if excluded:
            raise ConfigError(
                f"table {', '.join(excluded)} is not selected by pipeline {self.pipeline.name}",
                hint="add it to tables.include (or remove it from tables.exclude) in the pipeline file",
            )
        return list(dict.fromkeys(self.tables))

    def _skipped(self, name: str) -> TableResult:
        entry = self.state.tables[name]
        position = position_from_json(entry.position) if entry.position else self.state.position
        assert position is not None
        return TableResult(name, entry.rows, entry.seconds or 0.0, entry.delta_version, position,
                           entry.mode or "", skipped=True)

    def _describe(self, conn: pymysql.connections.Connection, name: str) -> TableShape:
        settings = self.pipeline.tables.settings_for(name)
        with _read_errors(name):
            return describe_table(conn, self.database, name, key_columns=settings.key_columns)

    def _chunk_rows(self, name: str) -> int:
        return self.pipeline.tables.settings_for(name).chunk_rows or self.pipeline.snapshot.chunk_rows

    def _record_start(self, position: SourcePosition) -> None:
        """Record, before reading, a position no later than any the load will tag rows with (including chunks
        kept from an interrupted run), so a relay that starts while the load runs never starts too late."""
        for entry in self.state.tables.values():
            for chunk in entry.chunks_done:
                self.state.record_position(position_from_json(chunk.position))
        self.state.record_position(position)
        self.state.save()

    def _progress(self, name: str, rows: int, total: int) -> None:
        if self.on_progress:
            self.on_progress(name, rows, total)

    # consistent mode ---------------------------------------------------------------------------------------
    def _run_consistent(self, names: list[str]) -> list[TableResult]:
        assert self.connection is not None
        results = []
        with open_snapshot(self.connection, database=self.database, connections=self.connections) as snapshot:
            self._record_start(snapshot.position)
            ts_ms = int(time.time() * 1000)
            for name in names:
                results.append(self._load_consistent_table(snapshot, name, ts_ms))
        return results

    def _load_consistent_table(self, snapshot: Snapshot, name: str, ts_ms: int) -> TableResult:
        started = time.monotonic()
        entry = self.state.table(name)
        entry.status, entry.mode, entry.ranges, entry.chunks_done = "in_progress", "consistent", [], []
        self.state.save()
        conn = snapshot.connections[0]
        shape = self._describe(conn, name)
        with conn.cursor() as cursor, _read_errors(name):
            ranges = plan_ranges(cursor, shape, rows_per_read(shape, cursor, self._chunk_rows(name)))
        total = max(shape.estimated_rows, 1)
        parts: list[ChunkDone] = []
        for part in self._write_in_snapshot(snapshot, shape, ranges, ts_ms):
            parts.append(part)
            rows = sum(p.rows for p in parts)
            self._progress(name, rows, max(total, rows))
        version = self._commit_parts(name, shape, parts, snapshot.position, mode="consistent")
        return self._finish(name, sum(p.rows for p in parts), version, snapshot.position, started)

    def _write_in_snapshot(self, snapshot: Snapshot, shape: TableShape, ranges: list[KeyRange], ts_ms: int
                           ) -> Iterator[ChunkDone]:
        """Each range read on one of the snapshot's connections and written as a Parquet file by the same
        worker thread, so reading, parsing and encoding overlap; a few ranges in flight at most."""
        reader = RangeReader(shape)
        schema = delta_schema(reader.schema)
        uri = self.pipeline.delta.table_uri(shape.name)
        stats_columns = [*shape.key_columns, POS]

        tag = RowTagger(schema, snapshot.position, ts_ms)

        def write(parts: Iterable[pa.Table], chunk_id: str) -> ChunkDone:
            tagged = (tag(part) for part in parts)
            path, size, rows, stats = write_part(uri, schema, tagged, stats_columns=stats_columns,
                                                 storage_options=self.pipeline.delta.storage_options)
            return ChunkDone(chunk_id, path, size, rows, snapshot.position.key(),
                             position_to_json(snapshot.position), stats)

        if not shape.has_key:  # one connection streams it; a file per KEYLESS_FILE_BATCHES batches
            with _read_errors(shape.name):
                batches = reader.stream_all(snapshot.connections[0], KEYLESS_BATCH_ROWS)
                while first := next(batches, None):
                    group = itertools.chain([first], itertools.islice(batches, KEYLESS_FILE_BATCHES - 1))
                    yield write(group, "all")
            return
        cursors: queue.Queue[Any] = queue.Queue()
        for conn in snapshot.connections:
            cursors.put(conn.cursor())

        @contextmanager
        def borrow() -> Iterator[Any]:
            cursor = cursors.get()
            try:
                yield cursor
            finally:
                cursors.put(cursor)

        def read_and_write(key_range: KeyRange) -> ChunkDone:
            with _read_errors(shape.name):
                table = reader.read_range_with(borrow, key_range)
            return write([table], key_range.chunk_id)

        # A thread holds its cursor only while the server answers, so with more threads than connections
        # the server formats the next range while the last one is parsed and encoded.
        workers = READ_THREADS_PER_CONNECTION * len(snapshot.connections)
        with ThreadPoolExecutor(workers, thread_name_prefix="lakesync-read") as pool:
            inflight: list[Future[ChunkDone]] = []
            try:
                for key_range in ranges:
                    inflight.append(pool.submit(read_and_write, key_range))
                    if len(inflight) > workers:
                        yield inflight.pop(0).result()
                while inflight:
                    yield inflight.pop(0).result()
            finally:
                for future in inflight:
                    future.cancel()

    def _commit_parts(self, name: str, shape: TableShape, parts: Sequence[ChunkDone], position: SourcePosition,
                      *, mode: str) -> int:
        """All of a table's files in one Delta commit that replaces whatever the table held.

        The commit carries the sink's snapshot app transaction (``snapshot_transaction(P)``), from which the
        stream's MERGE drops changes at or before P up front; afterwards the table's tombstones are cleared,
        as ``DeltaSink.write_snapshot`` does (old ones are covered by P or belong to an older position space).
        """
        uri = self.pipeline.delta.table_uri(name)
        now_ms = int(time.time() * 1000)
        actions = [AddAction(part.path, part.size, {}, now_ms, True, part.stats) for part in parts]
        storage_options = self.pipeline.delta.storage_options or None
        commit = CommitProperties(
            app_transactions=[snapshot_transaction(position)],
            custom_metadata=commit_metadata(position, table=name, mode=mode, ts_ms=now_ms),
        )
        try:
            create_table_with_add_actions(
                uri, Schema.from_arrow(delta_schema(shape.arrow_schema())), actions, mode="overwrite",
                configuration=TABLE_CONFIGURATION, storage_options=storage_options, commit_properties=commit,
            )
            version = DeltaTable(uri, storage_options=storage_options).version()
        except Exception as exc:
            raise SinkError(f"committing the {len(parts)} files of {name} to {uri} failed: {exc}",
                            hint="nothing was committed; run the load again") from exc
        semantics = self.pipeline.tables.settings_for(name).semantics or (
            "exactly_once" if shape.has_key else "append_log")
        DeltaSink(uri, key_columns=list(shape.key_columns), semantics=semantics,
                  storage_options=storage_options).tombstones.clear()
        # The stream merges by this key; the state file is where it reads it (delta-rs refuses custom properties).
        self.state.table(name).key_columns = list(shape.key_columns) if shape.has_key else []
        return version

    def _finish(self, name: str, rows: int, version: int | None, position: SourcePosition, started: float
                ) -> TableResult:
        seconds = time.monotonic() - started
        entry = self.state.table(name)
        entry.status, entry.rows, entry.delta_version = "done", rows, version
        entry.position_key, entry.position = position.key(), position_to_json(position)
        entry.seconds = round(seconds, 3)
        self.state.record_position(position)
        self.state.save()
        log.info("loaded %s: %d rows in %.1f s, Delta version %s, position %s", name, rows, seconds, version, position)
        return TableResult(name, rows, seconds, version, position, entry.mode or "")

    # chunked mode ------------------------------------------------------------------------------------------
    def _run_chunked(self, names: list[str]) -> list[TableResult]:
        assert self.connection is not None
        runner = self.chunk_runner or ThreadChunkRunner(self.connections)
        conn = connect(self.connection, database=self.database)
        try:
            self._record_start(current_position(conn))
        finally:
            conn.close()
        results = []
        for name in names:
            started = time.monotonic()
            entry = self.state.table(name)
            if entry.mode != "chunked":
                entry.ranges, entry.chunks_done = [], []
            entry.status, entry.mode = "in_progress", "chunked"
            conn = connect(self.connection, database=self.database)
            try:
                shape = self._describe(conn, name)
                if not entry.ranges:  # a resumed table keeps the ranges of its first attempt
                    with conn.cursor() as cursor, _read_errors(name):
                        planned = plan_ranges(cursor, shape, rows_per_read(shape, cursor, self._chunk_rows(name)))
                    entry.ranges = [_range_to_json(r) for r in planned]
            finally:
                conn.close()
            self.state.save()
            ranges = [_range_from_json(r) for r in entry.ranges]
            done = entry.chunk_ids()
            total = max(shape.estimated_rows, 1)
            ts_ms = int(time.time() * 1000)
            tasks = [ChunkTask(self.connection, shape, r, self.pipeline.delta.table_uri(name), ts_ms,
                               dict(self.pipeline.delta.storage_options))
                     for r in ranges if r.chunk_id not in done]

            def on_done(chunk: ChunkDone, name: str = name, total: int = total) -> None:
                entry = self.state.table(name)
                entry.chunks_done.append(chunk)
                self.state.save()
                rows = sum(c.rows for c in entry.chunks_done)
                self._progress(name, rows, max(total, rows))

            runner.run(tasks, on_done)
            results.append(self._commit_chunks(name, shape, started))
        return results

    def _commit_chunks(self, name: str, shape: TableShape, started: float) -> TableResult:
        chunks = self.state.table(name).chunks_done
        position = min(position_from_json(chunk.position) for chunk in chunks)
        version = self._commit_parts(name, shape, chunks, position, mode="chunked")
        return self._finish(name, sum(chunk.rows for chunk in chunks), version, position, started)


def _range_to_json(key_range: KeyRange) -> dict[str, Any]:
    return {"chunk_id": key_range.chunk_id, "lower": _key_to_json(key_range.lower),
            "upper": _key_to_json(key_range.upper)}


def _range_from_json(document: dict[str, Any]) -> KeyRange:
    return KeyRange(document["chunk_id"], _key_from_json(document["lower"]), _key_from_json(document["upper"]))


def _key_to_json(values: tuple[Any, ...] | None) -> list[Any] | None:
    """Key values as JSON: ints and strings as they are, anything else as its SQL literal text, which the
    server compares the same way (dates, decimals); bytes as hex."""
    if values is None:
        return None
    return [v if isinstance(v, int | str) else {"hex": v.hex()} if isinstance(v, bytes) else {"text": str(v)}
            for v in values]


def _key_from_json(values: list[Any] | None) -> tuple[Any, ...] | None:
    if values is None:
        return None
    return tuple(bytes.fromhex(v["hex"]) if isinstance(v, dict) and "hex" in v
                 else v["text"] if isinstance(v, dict) else v for v in values)


@contextmanager
def _read_errors(table: str) -> Iterator[None]:
    """Turns server errors met while reading a table into :class:`LakesyncError` s that name the table."""
    try:
        yield
    except pymysql.MySQLError as exc:
        code = exc.args[0] if exc.args else None
        message = exc.args[-1] if exc.args else str(exc)
        if code in (1142, 1143):
            raise SourceError(
                f"the lakesync user may not read table {table}: {message}",
                hint=f"GRANT SELECT ON <database>.{table} (or the whole database) TO the lakesync user",
            ) from exc
        if code in (1146, 1412, 1054):
            raise SchemaChangeError(
                f"table {table} was dropped or altered while it was being loaded: {message}",
                hint=f"nothing of {table} was committed; run the load again (add --tables {table})",
            ) from exc
        raise SourceError(f"reading table {table} failed: {message}",
                          hint="nothing of this table was committed; run the load again to resume") from exc
