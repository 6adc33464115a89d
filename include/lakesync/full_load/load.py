"""The full load: every selected table into Delta, each in one commit, tagged with the binlog position P.

Two modes (``snapshot.mode`` in the pipeline, ``--mode`` on the command line):

* **consistent** (default): one snapshot for all tables (:mod:`lakesync.source.snapshot`), read on a few
  connections that share it, so every table is exactly as of P. The snapshot lives in this process, so the
  reading happens here (the Spark app runs it on the driver). An interrupted table is read again from a
  new snapshot (its rows must all come from one snapshot); tables already done are not read again.
* **chunked**: each key range is read in its own statement, on its own connection, tagged with the
  position read *before* its SELECT, and written as a Parquet file by whoever runs the chunks
  (:mod:`lakesync.full_load.chunk_runners`: a thread pool, or Spark tasks in ``spark_apps/full_load.py``). The table's files are committed in one Delta
  transaction when all its chunks are written, and the table is recorded at its smallest chunk position:
  the stream replays from there and repairs whatever moved during the read (the sink keeps the larger
  position per key). No lock, and an interrupted table keeps the chunks it wrote.

Either way a table becomes visible in one commit: files written but not committed are invisible to
readers (``VACUUM`` removes them), and progress is kept in ``full_load.json`` (:mod:`lakesync.full_load.state`),
which the relay reads to know where the stream must start.
"""

from __future__ import annotations

import itertools
import logging
import queue
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pymysql
from deltalake import DeltaTable, Schema
from deltalake.transaction import AddAction, create_table_with_add_actions

from lakesync.core.config import Pipeline
from lakesync.core.connections import MySQLConnection, mysql_connection
from lakesync.core.errors import ConfigError, SinkError, SourceError
from lakesync.core.positions import SourcePosition
from lakesync.core.table_layout import POS, with_lakesync_columns
from lakesync.full_load.chunk_runners import KEYLESS_BATCH_ROWS, ChunkRunner, ChunkTask, ThreadChunkRunner
from lakesync.full_load.key_ranges import range_from_json, range_to_json
from lakesync.full_load.layout import RowTagger
from lakesync.full_load.parquet_writer import write_part
from lakesync.full_load.source_errors import read_errors
from lakesync.full_load.state import ChunkDone, LoadState, position_from_json, position_to_json, utc_now
from lakesync.sink.snapshot import snapshot_commit
from lakesync.sink.tombstones import tombstone_store
from lakesync.sink.writer import TABLE_PROPERTIES, commit_with_retry, with_attempt
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
from lakesync.stream.progress import stopped_since_load

log = logging.getLogger(__name__)

#: Batches per file when a table without a key is streamed whole (consistent mode).
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


# -- the load -------------------------------------------------------------------------------------------------
def _holding_exactly(uri: str, paths: set[str], storage_options: dict[str, str] | None) -> int | None:
    """The table's version when its files are exactly ``paths``: the load's commit landed already (a load killed
    between its Delta commit and its state file, then resumed; or a retried commit whose first attempt had
    landed). Committing the same files again would add and remove each of them in one commit, which leaves
    the table empty."""
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError:
        return None
    active = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    return table.version() if set(active) == paths and len(active) == len(paths) else None


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
    #: tables this run loads again because the stream stopped them after their last load (name -> reason)
    stopped_reloaded: dict[str, str] = field(init=False, default_factory=dict)

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
            selected, tables = self._select_tables(control)
        finally:
            control.close()
        if self.restart:  # also the entries of tables no longer selected (dropped, excluded): their old
            # positions would hold the load's position back, at a binlog the server may have purged
            self.state.forget(tables + [name for name in self.state.tables if name not in selected])
        done = {name: self.state.tables[name].position_key for name in tables if self.state.is_done(name)}
        self.stopped_reloaded = stopped_since_load(self.pipeline.pipeline_state_dir, done, tables)
        if self.stopped_reloaded:  # a table the stream stopped is not done: its Delta table lags the source
            log.warning("loading again the tables the stream stopped: %s", ", ".join(self.stopped_reloaded))
            self.state.forget(list(self.stopped_reloaded))
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

    def _select_tables(self, conn: pymysql.connections.Connection) -> tuple[list[str], list[str]]:
        """(every source table the pipeline selects, the tables this run loads: ``tables`` or all of them)."""
        existing = list_tables(conn, self.database)
        selected = [name for name in existing if self.pipeline.tables.selects(name)]
        if not self.tables:
            if not selected:
                raise ConfigError(
                    f"pipeline {self.pipeline.name} selects no tables of database {self.database}",
                    hint=f"tables there: {', '.join(existing) or 'none'}; check tables.include/exclude",
                )
            return selected, selected
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
        return selected, list(dict.fromkeys(self.tables))

    def _skipped(self, name: str) -> TableResult:
        entry = self.state.tables[name]
        position = position_from_json(entry.position) if entry.position else self.state.position
        assert position is not None
        return TableResult(name, entry.rows, entry.seconds or 0.0, entry.delta_version, position,
                           entry.mode or "", skipped=True)

    def _describe(self, conn: pymysql.connections.Connection, name: str) -> TableShape:
        settings = self.pipeline.tables.settings_for(name)
        with read_errors(name):
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

    # a table created in the change log ---------------------------------------------------------------------
    def source_tables(self) -> list[str]:
        """The source database's tables now."""
        assert self.connection is not None
        conn = connect(self.connection, database=self.database)
        try:
            return list_tables(conn, self.database)
        finally:
            conn.close()

    def source_has(self, name: str) -> bool:
        return name in self.source_tables()

    def start_at_creation(self, name: str, created: SourcePosition,
                          same_shape: Callable[[TableShape], bool]) -> TableResult | None:
        """Record ``name``, created at ``created`` after the relay's coverage began, as loaded at that position
        with no row read: its CREATE TABLE and every row event after it are in the change log, so an empty
        Delta table at ``created`` plus the stream is the whole table. A snapshot would not do better, and the
        position of the latest CREATE (not the topic's beginning) keeps the rows of a dropped earlier table
        with the same name out.

        None, with nothing written, when the table is gone from the source or its shape there is no longer the
        one it was created with (``same_shape``): then the stream's events alone can't rebuild it exactly, and
        it needs a real load."""
        assert self.connection is not None
        started = time.monotonic()
        if not self.source_has(name):
            return None
        conn = connect(self.connection, database=self.database)
        try:
            shape = self._describe(conn, name)
        finally:
            conn.close()
        if not same_shape(shape):
            return None
        entry = self.state.table(name)
        entry.status, entry.mode, entry.ranges, entry.chunks_done = "in_progress", "binlog", [], []
        self.state.save()
        version = self._commit_parts(name, shape, [], created, mode="binlog")
        return self._finish(name, 0, version, created, started)

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
        with conn.cursor() as cursor, read_errors(name):
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
        schema = with_lakesync_columns(reader.schema)
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
            with read_errors(shape.name):
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
            with read_errors(shape.name):
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
        """All of a table's files in one Delta commit that replaces whatever the table held: committed as they
        are by delta-rs, or rewritten by Spark in one delta-spark commit (:mod:`lakesync.sink.spark_load`).

        The commit carries the sink's snapshot app transaction (``snapshot_transaction(P)``), from which the
        stream's MERGE drops changes at or before P up front; afterwards the table's tombstones are cleared,
        as ``DeltaSink.write_snapshot`` does (old ones are covered by P or belong to an older position space).
        """
        uri = self.pipeline.delta.table_uri(name)
        now_ms = int(time.time() * 1000)
        storage_options = self.pipeline.delta.storage_options or None
        arrow_schema = with_lakesync_columns(shape.arrow_schema())
        if self.pipeline.delta.writer == "delta_spark":
            from lakesync.sink.spark_load import commit_load_on_delta_spark

            version = commit_load_on_delta_spark(
                uri, arrow_schema, [part.path for part in parts], position, ts_ms=now_ms, table=name, mode=mode,
                properties=TABLE_PROPERTIES, storage_options=storage_options)
        else:
            version = self._commit_parts_on_delta_rs(name, uri, arrow_schema, parts, position, mode=mode,
                                                     now_ms=now_ms)
        tombstone_store(uri, key_columns=list(shape.key_columns), storage_options=storage_options,
                        writer=self.pipeline.delta.writer).clear()
        # The stream merges by this key; the state file is where it reads it (delta-rs refuses custom properties).
        self.state.table(name).key_columns = list(shape.key_columns) if shape.has_key else []
        return version

    def _commit_parts_on_delta_rs(self, name: str, uri: str, arrow_schema: pa.Schema, parts: Sequence[ChunkDone],
                                  position: SourcePosition, *, mode: str, now_ms: int) -> int:
        """The load's own files committed as they are, by delta-rs (``delta.writer: delta_rs``)."""
        actions = [AddAction(part.path, part.size, {}, now_ms, True, part.stats) for part in parts]
        storage_options = self.pipeline.delta.storage_options or None
        commit = snapshot_commit(position, ts_ms=now_ms, table=name, mode=mode)
        schema = Schema.from_arrow(arrow_schema)

        def step(attempt: int) -> int:
            if (landed := _holding_exactly(uri, {part.path for part in parts}, storage_options)) is not None:
                return landed
            create_table_with_add_actions(
                uri, schema, actions, mode="overwrite", configuration=TABLE_PROPERTIES,
                storage_options=storage_options, commit_properties=with_attempt(commit, attempt),
            )
            return DeltaTable(uri, storage_options=storage_options).version()

        try:
            return commit_with_retry(step, what=f"the full load commit of {name}", table_uri=uri)
        except SinkError:
            raise
        except Exception as exc:
            raise SinkError(f"committing the {len(parts)} files of {name} to {uri} failed: {exc}",
                            hint="nothing was committed; run the load again") from exc

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
                    with conn.cursor() as cursor, read_errors(name):
                        planned = plan_ranges(cursor, shape, rows_per_read(shape, cursor, self._chunk_rows(name)))
                    entry.ranges = [range_to_json(r) for r in planned]
            finally:
                conn.close()
            self.state.save()
            ranges = [range_from_json(r) for r in entry.ranges]
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
