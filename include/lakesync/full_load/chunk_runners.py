"""Chunked mode's workers: one key range read in one statement, tagged with the position read just before
it, and written as a Parquet file; run on a local thread pool or as Spark tasks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pymysql

from lakesync.core.connections import MySQLConnection
from lakesync.core.table_layout import POS, with_lakesync_columns
from lakesync.full_load.layout import RowTagger
from lakesync.full_load.parquet_writer import write_part
from lakesync.full_load.source_errors import read_errors
from lakesync.full_load.state import ChunkDone, position_to_json
from lakesync.source.server_checks import current_position
from lakesync.source.snapshot import connect
from lakesync.source.table_reader import KeyRange, RangeReader, TableShape

#: Rows per batch when a table without a key is streamed whole.
KEYLESS_BATCH_ROWS = 100_000


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


def load_chunk(task: ChunkTask) -> ChunkDone:
    """Read one key range in one statement, tagged with the position read just before it; write it as a
    Parquet file in the table folder (invisible until the driver commits it)."""
    reader = RangeReader(task.shape)
    schema = with_lakesync_columns(reader.schema)
    conn = connect(task.connection, database=task.shape.database)
    try:
        position = current_position(conn)
        with read_errors(task.shape.name):
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
            done: ChunkDone = context.parallelize([task], 1).map(load_chunk).collect()[0]
            return done

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
