"""``lakesync bench stream``: the change path (relay, Spark stream, Delta MERGE) against its baselines.

One run on one embedded stack (docs/stream.md, "Benchmark", lists every key and its target):

1. a ``transactions`` table with 1,000,000 rows is fully loaded to Delta (every later phase starts from a
   copy of this state);
2. N row changes are written (50% updates, 30% inserts, 20% deletes, 500 rows per transaction);
3. baselines: a bare python-mysql-replication loop decodes exactly those changes; the relay alone
   publishes them to its own topics;
4. the stream alone over those topics: ``lakesync stream --once`` in its own process for the peak RSS of
   its process tree, then in-process on ``local[2]`` and ``local[1]`` for throughput and scaling, and on
   each the executors' tasks alone over the same topics (read, decode, reduce: the part that scales out);
   then every figure of this step again with ``stream.decode: python`` (the former default decode);
5. backpressure: the relay with a lag bound, the stream stopped, then running;
6. end to end: the relay (thread) and the stream (``availableNow``, repeated) together, from the relay's
   start to the last Delta commit; then freshness under a steady 2,000 changes/s with the stream in
   continuous mode (0.5 s trigger), per change from its COMMIT to the first Delta version holding it;
   all with the shipped defaults (``delta.writer: delta_spark``); then the baseline ``delta_rs_writer``: the
   stream alone on ``local[2]`` and freshness again with ``delta.writer: delta_rs`` (delta-rs's MERGE on the
   driver, the former default);
7. with ``--merge-rows``: ``merge_cost_growth`` of the sink alone (:mod:`lakesync_devkit.bench.merge_cost`);
8. ``concurrent_merge``: five tables' MERGEs at once over one by one (:mod:`lakesync_devkit.bench.concurrent_merge`).
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
from lakesync_devkit.bench.concurrent_merge import concurrent_merge_ratio
from lakesync_devkit.bench.harness import bench_stack, peak_rss_mb, spark_on_cpus
from lakesync_devkit.bench.merge_cost import merge_cost_growth
from lakesync_devkit.bench.relay import raw_decode
from lakesync_devkit.bench.stream_phases import (
    backpressure,
    copy_pipeline,
    executor_tasks_rate,
    relay_only,
    stream_only,
)
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
#: the stream process's driver JVM heap in the peak-RSS phase: what docs/stream.md recommends for the
#: default batch bound (the work is on the executors; the driver only collects reduced rows)
STREAM_DRIVER_MEMORY = "1g"
#: records per batch while warming a Spark session up before a stream-only measurement
WARM_UP_BATCH = 2_000


@dataclass
class StreamBenchResult:
    changes: int
    end_to_end_changes_per_s: float
    raw_decode_changes_per_s: float
    ratio_vs_raw_decode: float
    freshness_p50_s: float
    freshness_p99_s: float
    peak_rss_mb: float
    peak_pss_mb: float
    peak_rss_stream_seconds: float
    end_to_end_seconds: float
    raw_decode_seconds: float
    stream_runs: int
    freshness_changes: int
    freshness_load_changes_per_s: float
    driver_peak_rss_mb: float
    delta_rows_match_source: bool
    relay_only_changes_per_s: float
    stream_only_changes_per_s: float
    stream_vs_relay: float
    stream_only_1_core_changes_per_s: float
    executor_scaling: float
    #: the executors' part alone (read, decode, reduce; no driver, no Delta) on local[2], and over local[1]
    executor_tasks_changes_per_s: float
    executor_tasks_scaling: float
    stream_only_batches: int
    batch_bound: int | None
    backpressure: dict[str, Any]
    merge_cost_growth: dict[str, Any] | None
    load_average: list[float]
    #: the embedded Apache Kafka broker's peak RSS over the whole bench
    broker_peak_rss_mb: float
    #: five tables changed in one micro-batch: their MERGEs at once (stream.merge_threads) over one by one
    concurrent_merge: dict[str, Any]
    #: ``stream.decode: python`` (the former default: a Python worker decodes beside each task) on the same
    #: topics: the stream-only, scaling, executor-tasks and peak-RSS figures above measured again with it, and
    #: the default's (Spark SQL's) rates over its
    python_decode: dict[str, float]
    #: the baseline ``delta.writer: delta_rs`` (the former default) on the same topics and tables: the stream alone
    #: on local[2], freshness after the default writer's freshness run, and ``concurrent_merge`` with it; and the
    #: default's (delta-spark's) figures of this run over these
    delta_rs_writer: dict[str, float]


class RssSampler(threading.Thread):
    """Samples the memory of a process (this one by default) and its children, Spark's JVM and Python workers
    included (not the embedded servers), twice a second: the sum of their RSS (what the issue's target is
    set on; it counts the shared libraries every Python process maps, pyarrow's among them, once per
    process) and the sum of their PSS (shared pages divided among the processes that share them: what the
    tree really takes from the machine)."""

    #: the embedded servers (children of a bench that started its own stack), never counted as the stream's
    _SERVERS = ("mariadbd", "mysqld", "kafka.Kafka")

    def __init__(self, pid: int | None = None) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.peak_bytes = 0
        self.peak_pss_bytes = 0
        self.peak_parts: list[str] = []
        self.pid = pid
        self._halt = threading.Event()

    @staticmethod
    def role(process: Any) -> str:
        """What a process of the tree is, from its command line (Spark's daemon, a Python worker, the JVM)."""
        line = " ".join(process.cmdline())
        if "pyspark.daemon" in line and "pyspark.daemon" in " ".join(process.parent().cmdline()):
            return "python-worker"  # forked by a daemon: it keeps the daemon's command line
        for marker, role in (("pyspark.daemon", "python-daemon"), ("pyspark.worker", "python-worker"),
                             ("pyspark.sql.", "python-planner"), ("java", "jvm"), ("lakesync", "driver")):
            if marker in line:
                return role
        return process.name()

    def run(self) -> None:
        import psutil

        me = psutil.Process(self.pid)
        while not self._halt.wait(0.5):
            total, pss, parts = 0, 0, []
            for process in [me, *me.children(recursive=True)]:
                try:
                    if not any(server in " ".join(process.cmdline()) for server in self._SERVERS):
                        memory = process.memory_full_info()
                        total += memory.rss
                        pss += memory.pss
                        parts.append(f"{self.role(process)} {memory.rss / 2**20:.0f}/{memory.pss / 2**20:.0f}")
                except psutil.Error:
                    continue
            if total > self.peak_bytes:
                self.peak_bytes, self.peak_parts = total, parts
            self.peak_pss_bytes = max(self.peak_pss_bytes, pss)

    def reset(self) -> float:
        """The peak so far (MB); sampling goes on from zero."""
        peak, self.peak_bytes = self.peak_bytes, 0
        return peak / 2**20

    def stop(self) -> float:
        self._halt.set()
        self.join(5)
        return self.peak_bytes / 2**20


class ProcessPeak(threading.Thread):
    """The peak RSS of one process (the broker), sampled twice a second until stopped."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(name="process-peak", daemon=True)
        self.pid, self.peak_bytes = pid, 0
        self._halt = threading.Event()

    def run(self) -> None:
        import psutil

        if self.pid is None:
            return
        process = psutil.Process(self.pid)
        while not self._halt.wait(0.5):
            try:
                self.peak_bytes = max(self.peak_bytes, process.memory_info().rss)
            except psutil.Error:
                return

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


#: the decodes whose executor tasks every stream-only session measures, alternating (``stream.decode``)
DECODES = ("spark_sql", "python")


def _stream_only_on(master: str, pipeline: Pipeline, warm_up: Pipeline, changes: int, *,
                    tasks_for: tuple[str, ...] = DECODES) -> tuple[float, int, dict[str, float]]:
    """Stream-only throughput (and batches, and the executors' part alone) in a Spark session with ``master`` (its
    own session: the core count is fixed when the SparkContext starts), on as many CPUs as it has cores
    (:func:`spark_on_cpus`: the scaling keys compare cores, not task slots). A few small continuous-mode batches on a copy (``warm_up``) first, so
    the figure is the stream's rate, not the JVM's and the Python workers' start-up. The warm-up batches
    are small so that stopping it leaves no cancelled task's Python worker still busy in the timed run.

    The executors' part is measured for each decode of ``tasks_for`` in the same session, twice, in turn
    (A B B A), keeping each one's best: measured one after the other, whichever ran later came out ahead
    (the broker's and the JVM's warm-up), up to 1.3x."""
    from lakesync.spark.session import build_spark_session
    from lakesync.stream.app import run_stream

    spark = build_spark_session(f"lakesync-bench-stream-{master}", master=master)
    cores = spark.sparkContext.defaultParallelism
    try:
        with spark_on_cpus(spark, cores) as cpus:
            if cpus < cores:
                log.warning("%s runs on the %d CPUs this process has", master, cpus)
            run_stream(warm_up, once=False, spark=spark, timeout_seconds=10)
            rate, batches = stream_only(pipeline, spark, changes)
            tasks: dict[str, float] = {}
            for decode in (*tasks_for, *reversed(tasks_for)):
                decoded = pipeline.model_copy(update={"stream": pipeline.stream.model_copy(update={"decode": decode})})
                tasks[decode] = max(tasks.get(decode, 0.0), executor_tasks_rate(decoded, spark, changes))
            return rate, batches, tasks
    finally:
        spark.stop()


def _stream_process_peak_rss(pipeline: Pipeline, changes: int) -> tuple[float, float, float]:
    """Peak RSS and peak PSS (MB) of ``lakesync stream --once`` in its own process tree (its JVM and Python
    workers included) while it works off the backlog, and its wall time (start-up included); driver heap
    :data:`STREAM_DRIVER_MEMORY`."""
    import subprocess
    import sys

    import yaml

    folder = Path(pipeline.state_dir).parent / "pipeline-files"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{pipeline.name}.yaml").write_text(yaml.safe_dump(pipeline.model_dump(mode="json")))
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "lakesync.cli.main", "stream", "--pipeline", pipeline.name,
                                "--pipelines-dir", str(folder), "--once"],
                               env={**os.environ, "LAKESYNC_SPARK_DRIVER_MEMORY": STREAM_DRIVER_MEMORY},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = RssSampler(process.pid)
    sampler.start()
    code = process.wait()
    peak = sampler.stop()
    log.info("stream process tree at its peak (MB, RSS/PSS): %s", ", ".join(sampler.peak_parts))
    if code:
        raise LakesyncError(f"`lakesync stream --once` exited with {code} in the peak-RSS phase")
    return peak, sampler.peak_pss_bytes / 2**20, time.perf_counter() - began


def run_bench(stack: DevStack, changes: int, *, freshness_seconds: float = 20, merge_rows: tuple[int, int] | None = None,
              backpressure_bound: int | None = None) -> StreamBenchResult:
    from lakesync.full_load.load import FullLoad
    from lakesync.relay import Relay
    from lakesync.spark.session import build_spark_session

    os.environ.update(stack.connection_env())
    database = f"bench_stream_{int(time.time())}"
    server_id = random.randrange(30_000, 40_000)
    work = Path(tempfile.mkdtemp(prefix="bench-stream-", dir=stack.state_dir))
    base = bench_pipeline(database, server_id, work / "base")

    def phase(name: str, **stream: Any) -> Pipeline:
        offset = {"relay": 2, "bp": 3}.get(name, 2)
        prefix = {"e2e": base.kafka.topic_prefix, "bp": f"benchb{server_id}"}.get(name, f"benchr{server_id}")
        return copy_pipeline(base, work / "base", work / name, topic_prefix=prefix,
                             server_id=server_id if name == "e2e" else server_id + offset, **stream)

    def rows_match(pipeline: Pipeline) -> bool:
        with stack.mariadb.connect() as root, root.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {quote_identifier(database)}.{TABLE}")
            return int(cur.fetchone()[0]) == _delta_row_count(pipeline.delta.table_uri(TABLE))

    broker = ProcessPeak(stack.broker.pid())
    broker.start()
    try:
        with stack.mariadb.connect() as root:
            create_demo_database(root, database)
            log.info("seeding %d rows", TABLE_ROWS)
            seed_transactions(root, database, rows=TABLE_ROWS)
        FullLoad(pipeline=base, tables=[TABLE]).run()
        with stack.mariadb.connect() as root:
            start = current_position(root)
            log.info("generating %d changes", changes)
            generated = generate_changes(root, database, changes)
        raw_seconds = raw_decode(mysql_connection(base).pymysql_kwargs(), database, start, generated,
                                 server_id + 1)
        relay_rate = relay_only(phase("relay"), generated)
        log.info("relay alone: %.0f changes/s", relay_rate)
        stream_peak, stream_peak_pss, rss_seconds = _stream_process_peak_rss(phase("rss"), generated)
        log.info("stream process alone: peak RSS %.0f MB (PSS %.0f MB) over %.1f s", stream_peak, stream_peak_pss,
                 rss_seconds)
        warm = {"max_offsets_per_trigger": WARM_UP_BATCH}
        stream_rate, stream_batches, tasks = _stream_only_on("local[2]", phase("stream2"), phase("warm2", **warm),
                                                             generated)
        tasks_rate, py_tasks = tasks["spark_sql"], tasks["python"]
        log.info("stream alone, 2 cores: %.0f changes/s (executor tasks alone %.0f/s)", stream_rate, tasks_rate)
        stream_rate_1, _, tasks_1 = _stream_only_on("local[1]", phase("stream1"), phase("warm1", **warm), generated)
        tasks_rate_1, py_tasks_1 = tasks_1["spark_sql"], tasks_1["python"]
        log.info("stream alone, 1 core: %.0f changes/s (executor tasks alone %.0f/s)", stream_rate_1, tasks_rate_1)
        python = {"decode": "python"}
        py_peak, _, _ = _stream_process_peak_rss(phase("rss-python", **python), generated)
        py_rate, _, _ = _stream_only_on("local[2]", phase("stream2-python", **python),
                                        phase("warm2-python", **python, **warm), generated, tasks_for=())
        py_rate_1, _, _ = _stream_only_on("local[1]", phase("stream1-python", **python),
                                          phase("warm1-python", **python, **warm), generated, tasks_for=())
        python_decode = {
            "stream_only_changes_per_s": round(py_rate, 1), "stream_vs_relay": round(py_rate / relay_rate, 3),
            "stream_only_1_core_changes_per_s": round(py_rate_1, 1),
            "executor_scaling": round(py_rate / py_rate_1, 3),
            "executor_tasks_changes_per_s": round(py_tasks, 1),
            "executor_tasks_scaling": round(py_tasks / py_tasks_1, 3), "peak_rss_mb": round(py_peak, 1),
            "spark_sql_vs_python_stream_only": round(stream_rate / py_rate, 3),
            "spark_sql_vs_python_executor_tasks": round(tasks_rate / py_tasks, 3),
        }
        log.info("with stream.decode python: %s", python_decode)
        by_rs = {"writer": "delta_rs"}
        rs_writer_rate, _, _ = _stream_only_on("local[2]", phase("stream2-delta-rs", **by_rs),
                                               phase("warm2-delta-rs", **by_rs, **warm), generated, tasks_for=())
        log.info("stream alone with delta.writer delta_rs (baseline), 2 cores: %.0f changes/s", rs_writer_rate)
        spark = build_spark_session("lakesync-bench-stream", master="local[2]")
        bound = backpressure_bound or max(1_000, generated // 5)
        pressure = backpressure(phase("bp", backpressure_max_lag=bound, backpressure_check_seconds=0.5), spark,
                                generated, stopped_seconds=10, relay_rate=relay_rate, rows_match=rows_match)
        log.info("backpressure: %s", pressure)
        pipeline = phase("e2e")
        relay = Relay(pipeline, log_every_seconds=3600)
        relay_thread = Background("bench-relay", relay.run)
        try:
            e2e_seconds, runs = end_to_end(pipeline, spark, generated, relay_thread)
            e2e_rows_match = rows_match(pipeline)
            delays, made, load_rate = measure_freshness(stack, pipeline, spark, freshness_seconds)
            written_by_rs = pipeline.model_copy(update={"delta": pipeline.delta.model_copy(update=by_rs)})
            rs_delays, rs_made, _ = measure_freshness(stack, written_by_rs, spark, freshness_seconds)
        finally:
            relay.stop()
            relay_thread.join(30)
        spark.stop()
        merge = merge_cost_growth(work / "merge", merge_rows) if merge_rows else None
        build_spark_session("lakesync-bench-merge", master="local[2]")
        concurrent = concurrent_merge_ratio(work / "concurrent", threads=base.stream.merge_threads,
                                            writer=base.delta.writer)
        log.info("five tables' MERGEs at once over one by one: %s", concurrent)
        rs_concurrent = concurrent_merge_ratio(work / "concurrent-delta-rs", threads=base.stream.merge_threads,
                                               writer="delta_rs")
        log.info("the same with delta.writer delta_rs (baseline): %s", rs_concurrent)
    finally:
        with stack.mariadb.connect() as root, root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_identifier(database)}")
        shutil.rmtree(work, ignore_errors=True)
    raw_rate = generated / raw_seconds
    e2e_rate = generated / e2e_seconds
    delta_rs_writer = {
        "stream_only_changes_per_s": round(rs_writer_rate, 1),
        "stream_vs_relay": round(rs_writer_rate / relay_rate, 3),
        "default_vs_delta_rs_stream_only": round(stream_rate / rs_writer_rate, 3),
        "freshness_p50_s": _percentile(rs_delays, 50), "freshness_p99_s": _percentile(rs_delays, 99),
        "freshness_changes": rs_made,
        "concurrent_merge_ratio": rs_concurrent["ratio"],
        "concurrent_merge_one_by_one_s": rs_concurrent["one_by_one_s"],
        "concurrent_merge_at_once_s": rs_concurrent["at_once_s"],
    }
    return StreamBenchResult(
        changes=generated,
        end_to_end_changes_per_s=round(e2e_rate, 1),
        raw_decode_changes_per_s=round(raw_rate, 1),
        ratio_vs_raw_decode=round(e2e_rate / raw_rate, 3),
        freshness_p50_s=_percentile(delays, 50),
        freshness_p99_s=_percentile(delays, 99),
        peak_rss_mb=round(stream_peak, 1),
        peak_pss_mb=round(stream_peak_pss, 1),
        peak_rss_stream_seconds=round(rss_seconds, 1),
        end_to_end_seconds=round(e2e_seconds, 3),
        raw_decode_seconds=round(raw_seconds, 3),
        stream_runs=runs,
        freshness_changes=made,
        freshness_load_changes_per_s=round(load_rate, 1),
        driver_peak_rss_mb=round(peak_rss_mb(), 1),
        delta_rows_match_source=e2e_rows_match,
        relay_only_changes_per_s=round(relay_rate, 1),
        stream_only_changes_per_s=round(stream_rate, 1),
        stream_vs_relay=round(stream_rate / relay_rate, 3),
        stream_only_1_core_changes_per_s=round(stream_rate_1, 1),
        executor_scaling=round(stream_rate / stream_rate_1, 3),
        executor_tasks_changes_per_s=round(tasks_rate, 1),
        executor_tasks_scaling=round(tasks_rate / tasks_rate_1, 3),
        stream_only_batches=stream_batches,
        batch_bound=base.stream.max_offsets_per_trigger,
        backpressure=asdict(pressure),
        merge_cost_growth=merge,
        load_average=[round(x, 2) for x in os.getloadavg()],
        broker_peak_rss_mb=round(broker.stop(), 1),
        concurrent_merge=concurrent,
        python_decode=python_decode,
        delta_rs_writer=delta_rs_writer,
    )


def _percentile(delays: np.ndarray, q: float) -> float:
    return round(float(np.percentile(delays, q)), 3) if delays.size else float("nan")


def _run(args: argparse.Namespace) -> int:
    with bench_stack(args.stack, prefix="lakesync-bench-stream-") as stack:
        result = run_bench(stack, args.changes, freshness_seconds=args.freshness_seconds,
                           merge_rows=tuple(args.merge_rows) if args.merge_rows else None,
                           backpressure_bound=args.backpressure_bound)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(f"changes:                  {result.changes} on a {TABLE_ROWS:,}-row table")
        print(f"raw decode (pymysqlrepl): {result.raw_decode_changes_per_s:,.0f} changes/s "
              f"({result.raw_decode_seconds:.2f} s)")
        print(f"relay + stream -> Delta:  {result.end_to_end_changes_per_s:,.0f} changes/s "
              f"({result.end_to_end_seconds:.2f} s, {result.stream_runs} availableNow runs)")
        print(f"ratio e2e / raw decode:   {result.ratio_vs_raw_decode:.2f} (target >= 0.8)")
        print(f"relay alone:              {result.relay_only_changes_per_s:,.0f} changes/s")
        print(f"stream alone (local[2]):  {result.stream_only_changes_per_s:,.0f} changes/s in "
              f"{result.stream_only_batches} batches of <= {result.batch_bound}; "
              f"{result.stream_vs_relay:.2f}x the relay (target >= 1.0)")
        print(f"executor scaling:         {result.executor_scaling:.2f} (local[2] / local[1], target >= 1.5)")
        print(f"executor tasks alone:     {result.executor_tasks_changes_per_s:,.0f} changes/s on local[2], "
              f"{result.executor_tasks_scaling:.2f} x local[1] (read, decode, reduce; no driver, no Delta)")
        py = result.python_decode
        print(f"decode in Python:         stream alone {py['stream_only_changes_per_s']:,.0f} changes/s "
              f"(Spark SQL's {py['spark_sql_vs_python_stream_only']:.2f}x that), scaling {py['executor_scaling']:.2f}; "
              f"executor tasks {py['executor_tasks_changes_per_s']:,.0f}/s (Spark SQL's "
              f"{py['spark_sql_vs_python_executor_tasks']:.2f}x), scaling {py['executor_tasks_scaling']:.2f}; "
              f"peak RSS {py['peak_rss_mb']:.0f} MB")
        by_rs = result.delta_rs_writer
        print(f"baseline writer delta_rs: stream alone {by_rs['stream_only_changes_per_s']:,.0f} changes/s "
              f"(the default's {by_rs['default_vs_delta_rs_stream_only']:.2f}x that, {by_rs['stream_vs_relay']:.2f}x "
              f"the relay); freshness p50 {by_rs['freshness_p50_s']:.2f} s, p99 {by_rs['freshness_p99_s']:.2f} s; "
              f"five tables' MERGEs at once {by_rs['concurrent_merge_ratio']:.2f} of one by one")
        print(f"backpressure:             {result.backpressure}")
        print(f"merge cost growth:        {result.merge_cost_growth}")
        print(f"concurrent MERGEs:        {result.concurrent_merge['ratio']:.2f} of one by one for "
              f"{result.concurrent_merge['tables']} tables (target <= 0.6)")
        print(f"load average:             {result.load_average}")
        print(f"freshness at {result.freshness_load_changes_per_s:,.0f} changes/s: p50 {result.freshness_p50_s:.2f} s, "
              f"p99 {result.freshness_p99_s:.2f} s (target p99 <= 5 s)")
        print(f"peak RSS, stream process: {result.peak_rss_mb:.0f} MB over {result.peak_rss_stream_seconds:.0f} s "
              f"(PSS {result.peak_pss_mb:.0f} MB; target <= 1500; the bench process itself {result.driver_peak_rss_mb:.0f} MB)")
        print(f"peak RSS, Kafka broker:   {result.broker_peak_rss_mb:.0f} MB (heap -Xmx512m)")
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
    parser.add_argument("--merge-rows", type=int, nargs=2, metavar=("SMALL", "LARGE"),
                        help="also measure merge_cost_growth: MERGE changes/s into a LARGE-row over a SMALL-row "
                             "Delta table (the issue's case: 1000000 10000000; slow)")
    parser.add_argument("--backpressure-bound", type=int,
                        help="the relay's lag bound in the backpressure phase (default: a fifth of --changes)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=_run)
