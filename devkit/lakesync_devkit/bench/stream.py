"""``lakesync bench stream``: the whole change path (relay + Spark stream + Delta MERGE) against the raw decode.

One run on one embedded stack:

1. a ``transactions`` table with 1,000,000 rows is fully loaded to Delta;
2. N row changes are written (50% updates, 30% inserts, 20% deletes, 500 rows per transaction);
3. (a) a bare python-mysql-replication loop decodes exactly those changes (the relay bench's baseline):
   the ceiling for any Python change path; (b) the relay (in a thread) and the stream (``availableNow``,
   repeated until every change is applied) move them into Delta: ``end_to_end_changes_per_s`` counts from
   the relay's start to the last Delta commit, Spark's query start-ups included;
4. freshness: a steady load of 2,000 changes/s (every 50 ms a transaction of 60 inserts and 40 updates)
   for ~20 s, the relay running and the stream in continuous mode with a 0.5 s trigger. A poller watches
   the Delta table; per change, the time from the source COMMIT returning to the first Delta version
   holding it (measured on the inserted keys, polled every 0.1 s) gives p50 and p99.

``peak_rss_mb`` is the peak of this process plus its Spark children (the JVM and Python workers), sampled;
the embedded MariaDB and broker are not counted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lakesync.core.config import Pipeline, parse_pipeline
from lakesync.core.connections import mysql_connection
from lakesync.core.errors import LakesyncError
from lakesync.core.identifiers import quote_identifier
from lakesync.source.server_checks import current_position
from lakesync_devkit.bench.harness import bench_stack, peak_rss_mb
from lakesync_devkit.bench.relay import raw_decode
from lakesync_devkit.demo.database import create_demo_database, seed_transactions
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID, DevStack

log = logging.getLogger(__name__)
DEFAULT_CHANGES = 200_000
TABLE_ROWS = 1_000_000
TABLE = "transactions"
_BATCH = 500
_FRESHNESS_RATE = 2_000
_TICK_INSERTS, _TICK_UPDATES = 60, 40
_TICK_SECONDS = (_TICK_INSERTS + _TICK_UPDATES) / _FRESHNESS_RATE
_POLL_SECONDS = 0.1


@dataclass
class StreamBenchResult:
    changes: int
    end_to_end_changes_per_s: float
    raw_decode_changes_per_s: float
    ratio_vs_raw_decode: float
    freshness_p50_s: float
    freshness_p99_s: float
    peak_rss_mb: float
    end_to_end_seconds: float
    raw_decode_seconds: float
    stream_runs: int
    freshness_changes: int
    freshness_load_changes_per_s: float
    driver_peak_rss_mb: float
    delta_rows_match_source: bool


class RssSampler(threading.Thread):
    """Samples the RSS of this process and its Spark children (not the embedded servers) twice a second."""

    _SERVERS = ("mariadbd", "mysqld", "tansu")

    def __init__(self) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.peak_bytes = 0
        self._halt = threading.Event()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._halt.wait(0.5):
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    if not any(server in process.name() for server in self._SERVERS):
                        total += process.memory_info().rss
                except psutil.Error:
                    continue
            self.peak_bytes = max(self.peak_bytes, total)

    def stop(self) -> float:
        self._halt.set()
        self.join(5)
        return self.peak_bytes / 2**20


class Background(threading.Thread):
    """Runs ``work`` in a thread; :meth:`result` re-raises what it raised."""

    def __init__(self, name: str, work: Callable[[], Any]) -> None:
        super().__init__(name=name, daemon=True)
        self.work, self.error, self.value = work, None, None

    def run(self) -> None:
        try:
            self.value = self.work()
        except BaseException as exc:  # handed to the caller by result()
            self.error = exc

    def result(self, timeout: float | None = None) -> Any:
        self.join(timeout)
        if self.error:
            raise self.error
        return self.value


def bench_pipeline(database: str, server_id: int, state_dir: Path) -> Pipeline:
    return parse_pipeline({
        "name": "bench_stream",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "tables": {"include": [TABLE]},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"benchs{server_id}"},
        "delta": {"root": str(state_dir / "delta")},
        "stream": {"trigger_seconds": 0.5},
        "state_dir": str(state_dir / "pipelines"),
    }, source_name="bench")


def generate_changes(conn: Any, database: str, changes: int) -> int:
    """``changes`` row changes on ``transactions``: updates of the first rows, inserts after the last id,
    deletes from the middle; 500 rows per transaction, generated on the server."""
    updates = changes // 2
    inserts = int(changes * 0.3)
    deletes = changes - updates - inserts
    with conn.cursor() as cur:
        cur.execute(f"USE {quote_identifier(database)}")
        for first in range(1, updates + 1, _BATCH):
            last = min(first + _BATCH - 1, updates)
            cur.execute(f"UPDATE {TABLE} SET amount = amount + 1, memo = 'bench update' WHERE id BETWEEN %s AND %s",
                        (first, last))
        for first in range(TABLE_ROWS + 1, TABLE_ROWS + inserts + 1, _BATCH):
            _insert_ids(cur, first, min(first + _BATCH - 1, TABLE_ROWS + inserts))
        middle = TABLE_ROWS // 2
        for first in range(middle, middle + deletes, _BATCH):
            cur.execute(f"DELETE FROM {TABLE} WHERE id BETWEEN %s AND %s", (first, min(first + _BATCH, middle + deletes) - 1))
    return updates + inserts + deletes


def _insert_ids(cur: Any, first: int, last: int) -> None:
    cur.execute(
        f"INSERT INTO {TABLE} (id, account_no, amount, kind, reference, memo, booked_at, updated_at) "
        "SELECT seq, CONCAT('DE', LPAD(1 + seq % 200, 10, '0')), ROUND((seq % 100000) / 100, 2), 'deposit', "
        "CONCAT('BENCH-', seq), 'bench insert', NOW(6), NOW(6) "
        f"FROM seq_{first}_to_{last}"
    )


def _delta_row_count(uri: str) -> int:
    from lakesync.sink import DeltaSink

    return sum(batch.num_rows for batch in DeltaSink(uri, key_columns=["id"]).scan(columns=["id"]))


def end_to_end(pipeline: Pipeline, spark: Any, changes: int, relay_thread: Background, *, timeout_s: float = 1800
               ) -> tuple[float, int]:
    """Seconds from the relay's start until the stream applied ``changes`` (and the number of stream runs)."""
    from lakesync.relay import covered_range
    from lakesync.stream.app import run_stream

    began = time.perf_counter()
    relay_thread.start()
    while covered_range(pipeline) is None:  # the stream refuses to start before the relay has published
        if not relay_thread.is_alive():
            relay_thread.result()
        time.sleep(0.1)
    applied, runs = 0, 0
    while applied < changes:
        if time.perf_counter() - began > timeout_s:
            raise LakesyncError(f"the stream applied {applied} of {changes} changes in {timeout_s:.0f} s")
        if not relay_thread.is_alive():
            relay_thread.result()
        summary = run_stream(pipeline, once=True, spark=spark)
        applied += summary.changes
        runs += 1
        log.info("stream run %d: %d changes (%d of %d)", runs, summary.changes, applied, changes)
    return time.perf_counter() - began, runs


class FreshnessLoad:
    """The steady load: every tick one transaction of inserts (new ids) and updates, its COMMIT time kept."""

    def __init__(self, conn: Any, database: str, first_id: int, seconds: float) -> None:
        self.conn, self.database, self.next_id, self.seconds = conn, database, first_id, seconds
        self.ticks: list[tuple[float, int, int]] = []  # (commit wall time, last inserted id, changes)
        self.random = random.Random(11)

    def run(self) -> None:
        started = time.monotonic()
        ticks = int(self.seconds / _TICK_SECONDS)
        with self.conn.cursor() as cur:
            cur.execute(f"USE {quote_identifier(self.database)}")
            self.conn.autocommit(False)
            for index in range(ticks):
                delay = started + index * _TICK_SECONDS - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                last = self.next_id + _TICK_INSERTS - 1
                _insert_ids(cur, self.next_id, last)
                low = self.random.randrange(1, TABLE_ROWS // 2 - _TICK_UPDATES)
                cur.execute(f"UPDATE {TABLE} SET amount = amount + 0.01 WHERE id BETWEEN %s AND %s",
                            (low, low + _TICK_UPDATES - 1))
                updated = cur.rowcount
                self.conn.commit()
                self.ticks.append((time.time(), last, _TICK_INSERTS + updated))
                self.next_id = last + 1
            self.conn.autocommit(True)


class DeltaWatcher(threading.Thread):
    """Polls the Delta table: when a new version appears, the highest inserted id it holds is visible."""

    def __init__(self, uri: str, floor_id: int) -> None:
        super().__init__(name="delta-watcher", daemon=True)
        self.uri, self.seen_max = uri, floor_id
        self.visible: list[tuple[float, int]] = []  # (wall time first seen, highest id visible)
        self._halt = threading.Event()

    def run(self) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc
        from deltalake import DeltaTable

        table = DeltaTable(self.uri)
        version = table.version()
        while not self._halt.wait(_POLL_SECONDS):
            table.update_incremental()
            if table.version() == version:
                continue
            version = table.version()
            seen = time.time()
            newest = pa.RecordBatchReader.from_stream(table.scan(columns=["id"], predicate=f"id > {self.seen_max}"))
            for batch in newest:
                if batch.num_rows:
                    self.seen_max = max(self.seen_max, int(pc.max(batch.column(0)).as_py()))
            self.visible.append((seen, self.seen_max))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def freshness(ticks: list[tuple[float, int, int]], visible: list[tuple[float, int]]) -> np.ndarray:
    """Per change, seconds from its transaction's commit to the first Delta version holding its inserts
    (changes never seen are left out; the caller checks that none are)."""
    seen_times = np.array([t for t, _ in visible])
    seen_ids = np.maximum.accumulate(np.array([i for _, i in visible])) if visible else np.array([])
    delays: list[np.ndarray] = []
    for commit_time, last_id, count in ticks:
        first = np.searchsorted(seen_ids, last_id, side="left")
        if first < len(seen_ids):
            delays.append(np.full(count, max(0.0, seen_times[first] - commit_time)))
    return np.concatenate(delays) if delays else np.array([])


def measure_freshness(stack: DevStack, pipeline: Pipeline, spark: Any, seconds: float) -> tuple[np.ndarray, int, float]:
    """Delays per change under the steady load, how many changes the load made, and its achieved rate."""
    from lakesync.stream.app import run_stream

    uri = pipeline.delta.table_uri(TABLE)
    with stack.mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT MAX(id) FROM `{pipeline.source.database}`.{TABLE}")
        max_id = int(cur.fetchone()[0])
    stream = Background("bench-stream-continuous",
                        lambda: run_stream(pipeline, once=False, spark=spark, timeout_seconds=seconds + 120))
    stream.start()
    time.sleep(5)  # let the continuous query start and run its first (empty) batches
    watcher = DeltaWatcher(uri, max_id)
    watcher.start()
    with stack.mariadb.connect() as conn:
        load = FreshnessLoad(conn, pipeline.source.database, max_id + 1, seconds)
        began = time.monotonic()
        load.run()
        load_seconds = time.monotonic() - began
    deadline = time.monotonic() + 60
    while (watcher.seen_max < load.next_id - 1 and time.monotonic() < deadline and stream.is_alive()
           and watcher.is_alive()):
        time.sleep(0.2)
    watcher.stop()
    for query in spark.streams.active:
        query.stop()
    stream.result(30)
    made = sum(count for _, _, count in load.ticks)
    if watcher.seen_max < load.next_id - 1:
        log.warning("the stream did not apply the whole freshness load within 60 s of its end")
    return freshness(load.ticks, watcher.visible), made, made / load_seconds


def run_bench(stack: DevStack, changes: int, *, freshness_seconds: float = 20) -> StreamBenchResult:
    from lakesync.full_load.load import FullLoad
    from lakesync.relay import Relay
    from lakesync.spark.session import build_spark_session

    os.environ.update(stack.connection_env())
    database = f"bench_stream_{int(time.time())}"
    server_id = random.randrange(30_000, 40_000)
    work = Path(tempfile.mkdtemp(prefix="bench-stream-", dir=stack.state_dir))
    pipeline = bench_pipeline(database, server_id, work)
    sampler = RssSampler()
    sampler.start()
    try:
        with stack.mariadb.connect() as root:
            create_demo_database(root, database)
            log.info("seeding %d rows", TABLE_ROWS)
            seed_transactions(root, database, rows=TABLE_ROWS)
        FullLoad(pipeline=pipeline, tables=[TABLE]).run()
        with stack.mariadb.connect() as root:
            start = current_position(root)
            log.info("generating %d changes", changes)
            generated = generate_changes(root, database, changes)
        raw_seconds = raw_decode(mysql_connection(pipeline).pymysql_kwargs(), database, start, generated,
                                 server_id + 1)
        spark = build_spark_session("lakesync-bench-stream")
        relay = Relay(pipeline, log_every_seconds=3600)
        relay_thread = Background("bench-relay", relay.run)
        try:
            e2e_seconds, runs = end_to_end(pipeline, spark, generated, relay_thread)
            with stack.mariadb.connect() as root, root.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM {quote_identifier(database)}.{TABLE}")
                rows_match = int(cur.fetchone()[0]) == _delta_row_count(pipeline.delta.table_uri(TABLE))
            delays, made, load_rate = measure_freshness(stack, pipeline, spark, freshness_seconds)
        finally:
            relay.stop()
            relay_thread.join(30)
    finally:
        peak = sampler.stop()
        with stack.mariadb.connect() as root, root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_identifier(database)}")
        shutil.rmtree(work, ignore_errors=True)
    raw_rate = generated / raw_seconds
    e2e_rate = generated / e2e_seconds
    return StreamBenchResult(
        changes=generated,
        end_to_end_changes_per_s=round(e2e_rate, 1),
        raw_decode_changes_per_s=round(raw_rate, 1),
        ratio_vs_raw_decode=round(e2e_rate / raw_rate, 3),
        freshness_p50_s=round(float(np.percentile(delays, 50)), 3) if delays.size else float("nan"),
        freshness_p99_s=round(float(np.percentile(delays, 99)), 3) if delays.size else float("nan"),
        peak_rss_mb=round(peak, 1),
        end_to_end_seconds=round(e2e_seconds, 3),
        raw_decode_seconds=round(raw_seconds, 3),
        stream_runs=runs,
        freshness_changes=made,
        freshness_load_changes_per_s=round(load_rate, 1),
        driver_peak_rss_mb=round(peak_rss_mb(), 1),
        delta_rows_match_source=rows_match,
    )


def _run(args: argparse.Namespace) -> int:
    with bench_stack(args.stack, prefix="lakesync-bench-stream-") as stack:
        result = run_bench(stack, args.changes, freshness_seconds=args.freshness_seconds)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(f"changes:                  {result.changes} on a {TABLE_ROWS:,}-row table")
        print(f"raw decode (pymysqlrepl): {result.raw_decode_changes_per_s:,.0f} changes/s "
              f"({result.raw_decode_seconds:.2f} s)")
        print(f"relay + stream -> Delta:  {result.end_to_end_changes_per_s:,.0f} changes/s "
              f"({result.end_to_end_seconds:.2f} s, {result.stream_runs} availableNow runs)")
        print(f"ratio e2e / raw decode:   {result.ratio_vs_raw_decode:.2f} (target >= 0.5)")
        print(f"freshness at {result.freshness_load_changes_per_s:,.0f} changes/s: p50 {result.freshness_p50_s:.2f} s, "
              f"p99 {result.freshness_p99_s:.2f} s (target p99 <= 5 s)")
        print(f"peak RSS:                 {result.peak_rss_mb:.0f} MB (driver {result.driver_peak_rss_mb:.0f} MB)")
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "stream", help="relay + Spark stream + Delta MERGE vs a bare python-mysql-replication decode; freshness",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--changes", type=int, default=DEFAULT_CHANGES,
                        help=f"row changes to generate and stream (default {DEFAULT_CHANGES:,})")
    parser.add_argument("--stack", metavar="DIR",
                        help="state folder of a running embedded stack (default: start one in a temp folder)")
    parser.add_argument("--freshness-seconds", type=float, default=20,
                        help="how long the steady 2,000 changes/s load runs (default 20)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=_run)
