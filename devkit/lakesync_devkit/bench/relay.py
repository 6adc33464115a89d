"""``lakesync bench relay``: the relay's throughput against python-mysql-replication's own decode speed, and
against Debezium's MariaDB connector over the same binlog events.

One run, two workloads over their own databases: ``batched`` (N row changes, inserts, updates and deletes in
transactions of 500 rows) and ``autocommit`` (single-row transactions, each statement its own commit). Over
exactly the binlog events of each, interleaved and repeated (best round kept), it measures (a) a bare
``BinLogStreamReader`` loop that decodes every row and does nothing else, the ceiling for any Python relay,
(b) the relay with its shipped defaults (Kafka transactions on: each transaction holds whole source
transactions and the relay's progress), (c) the relay with ``kafka.transactions: false`` and (d) Debezium
3.5's MariaDB connector in Kafka Connect standalone (JSON converter with schemas, the dev kit's settings).

The relay runs in a process of its own, Debezium in its JVM; (b), (c) and (d) are timed by the broker: each
writes a topic created with ``message.timestamp.type=LogAppendTime``, and a side's time is its first record's
append to its last, so process and JVM start-up stay outside it (they are reported apart, from the launch to
the first record). Debezium is primed before the workload is written (``snapshot.mode=no_data``, then stopped:
its offsets hold the position) and every Debezium run restarts from a copy of that position; the relay is given
the same position as ``from_position``. The relay and Debezium take turns going first from round to round.
Producer settings are matched: Connect's producer gets the relay's linger (20 ms), batch size (1,000,000 bytes),
compression (lz4), idempotence and acks=all.

Printed: the changes/s of each, the ratio (b)/(a) (target >= 1.3 on both workloads: the relay decodes row
images with its own decoder, faster than the library's), (b)/(d) (target >= 1.3), the transactions' overhead
(b)/(c), Kafka transactions committed per second and the commit time p50/p99, each side's peak RSS (the relay's
process; the Connect JVM's, heap -Xmx512m), and the key + value bytes each writes per change (Debezium's
tombstone after each delete included) with the header bytes apart.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from lakesync.core.config import Pipeline, parse_pipeline
from lakesync.core.connections import mysql_connection
from lakesync.core.errors import StackError
from lakesync.core.positions import SourcePosition
from lakesync.relay.publisher import PRODUCER_DEFAULTS, PRODUCER_REQUIRED
from lakesync.source.server_checks import current_position
from lakesync_devkit.bench.append_times import TopicWindow, create_log_append_topic, read_window
from lakesync_devkit.bench.debezium_runs import DebeziumRun, DebeziumRuns
from lakesync_devkit.bench.harness import bench_stack
from lakesync_devkit.bench.relay_process import RelayRun, run_relay_process
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID, DevStack

log = logging.getLogger(__name__)
DEFAULT_CHANGES = 200_000
DEFAULT_AUTOCOMMIT_CHANGES = 30_000
_BATCH = 500
TABLE = "bench_changes"
_TABLE_SQL = f"""CREATE TABLE {TABLE} (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  account_id INT UNSIGNED NOT NULL,
  amount DECIMAL(14,2) NOT NULL,
  currency CHAR(3) NOT NULL,
  kind VARCHAR(16) NOT NULL,
  booked_at DATETIME(6) NOT NULL,
  note VARCHAR(64) NULL
)"""


@dataclass
class WorkloadResult:
    """One workload's figures (see the module docstring)."""

    changes: int
    source_transactions: int
    raw_decode_changes_per_s: float
    relay_changes_per_s: float
    relay_vs_raw_decode: float
    relay_without_transactions_changes_per_s: float
    transaction_overhead: float
    kafka_transactions: int
    kafka_transactions_per_s: float
    commit_p50_ms: float
    commit_p99_ms: float
    debezium_changes_per_s: float
    relay_vs_debezium: float
    #: process launch (relay) or JVM launch (Debezium) to the first record's append, best round
    relay_start_s: float
    debezium_jvm_start_s: float
    relay_peak_rss_mb: float
    debezium_peak_rss_mb: float
    relay_bytes_per_change: float
    debezium_bytes_per_change: float
    relay_header_bytes_per_change: float
    debezium_header_bytes_per_change: float
    #: records Debezium wrote: a change each, and a tombstone after each delete
    debezium_records: int


@dataclass
class RelayBenchResult:
    batched: WorkloadResult
    autocommit: WorkloadResult
    relay_changes_per_s: float
    raw_decode_changes_per_s: float
    ratio_vs_raw_decode: float
    debezium_changes_per_s: float
    relay_vs_debezium: float
    #: the relay process's peak RSS (largest over its runs)
    peak_rss_mb: float
    debezium_peak_rss_mb: float
    settings: dict[str, Any]


@dataclass
class Workload:
    """The row changes a generator wrote."""

    inserts: int
    updates: int
    deletes: int

    @property
    def changes(self) -> int:
        return self.inserts + self.updates + self.deletes


def create_bench_table(conn: Any, database: str) -> None:
    """The workload's database and its empty table (created before any side is started on it)."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"USE `{database}`")
        cur.execute(_TABLE_SQL)


def generate_changes(conn: Any, database: str, changes: int) -> Workload:
    """Write ``changes`` row changes: 60% inserts, 30% updates, 10% deletes, 500 rows per transaction."""
    inserts = int(changes * 0.6)
    updates = int(changes * 0.3)
    deletes = changes - inserts - updates
    rng = random.Random(7)
    with conn.cursor() as cur:
        cur.execute(f"USE `{database}`")
        conn.autocommit(False)
        for start in range(0, inserts, _BATCH):
            rows = [
                (i, rng.randrange(1, 10_000), f"{rng.uniform(-5000, 5000):.2f}", "EUR", "transfer",
                 f"2026-01-{1 + i % 28:02d} 12:00:00.{i % 1_000_000:06d}", None if i % 3 else f"note {i}")
                for i in range(start + 1, min(start + _BATCH, inserts) + 1)
            ]
            cur.executemany("INSERT INTO bench_changes VALUES (%s,%s,%s,%s,%s,%s,%s)", rows)
            conn.commit()
        for start in range(0, updates, _BATCH):
            last = min(start + _BATCH, updates)
            cur.execute("UPDATE bench_changes SET amount = amount + 1, kind = 'adjusted' WHERE id BETWEEN %s AND %s",
                        (start % inserts + 1, (last - 1) % inserts + 1))
            conn.commit()
        for start in range(0, deletes, _BATCH):
            last = min(start + _BATCH, deletes)
            cur.execute("DELETE FROM bench_changes WHERE id BETWEEN %s AND %s", (inserts - last + 1, inserts - start))
            conn.commit()
        conn.autocommit(True)
    return Workload(inserts, updates, deletes)


def generate_autocommit_changes(conn: Any, database: str, changes: int) -> Workload:
    """Write ``changes`` single-row transactions (60% inserts, 30% updates, 10% deletes), each its own commit."""
    inserts = int(changes * 0.6)
    updates = int(changes * 0.3)
    deletes = changes - inserts - updates
    rng = random.Random(11)
    with conn.cursor() as cur:
        cur.execute(f"USE `{database}`")
        conn.autocommit(True)
        for i in range(1, inserts + 1):
            cur.execute("INSERT INTO bench_changes VALUES (%s,%s,%s,%s,%s,%s,%s)",
                        (i, rng.randrange(1, 10_000), f"{rng.uniform(-5000, 5000):.2f}", "EUR", "transfer",
                         f"2026-01-{1 + i % 28:02d} 12:00:00.{i % 1_000_000:06d}", None))
        for i in range(1, updates + 1):
            cur.execute("UPDATE bench_changes SET amount = amount + 1 WHERE id = %s", (i,))
        for i in range(1, deletes + 1):
            cur.execute("DELETE FROM bench_changes WHERE id = %s", (inserts - i + 1,))
    return Workload(inserts, updates, deletes)


def raw_decode(connection: dict[str, Any], database: str, start: SourcePosition, changes: int,
               server_id: int) -> float:
    """Seconds for a bare python-mysql-replication loop to decode ``changes`` rows from ``start``."""
    reader = BinLogStreamReader(
        connection_settings=dict(connection), server_id=server_id, log_file=start.file, log_pos=start.offset,
        resume_stream=True, blocking=False, only_schemas=[database],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], enable_logging=False,
    )
    seen = 0
    began = time.perf_counter()
    try:
        for event in reader:
            seen += len(event.rows)
            if seen >= changes:
                break
    finally:
        reader.close()
    return time.perf_counter() - began


def bench_document(database: str, server_id: int, state_dir: Path, *, transactions: bool = True) -> dict[str, Any]:
    """The benchmark relay's pipeline, as the document a pipeline file would hold."""
    return {
        "name": "bench_relay",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"bench{server_id}", "transactions": transactions},
        "delta": {"root": str(state_dir / "delta")},
        "state_dir": str(state_dir / "pipelines"),
    }


def bench_pipeline(database: str, server_id: int, state_dir: Path, *, transactions: bool = True) -> Pipeline:
    return parse_pipeline(bench_document(database, server_id, state_dir, transactions=transactions),
                          source_name="bench")


def relay_run(stack: DevStack, database: str, server_id: int, start: SourcePosition, changes: int, *,
              transactions: bool) -> tuple[RelayRun, TopicWindow]:
    """The relay in its own process from ``start`` through ``changes`` changes, into a fresh topic stamped by
    the broker; the run and what its topic holds."""
    document = bench_document(database, server_id, stack.state_dir, transactions=transactions)
    topic = parse_pipeline(document, source_name="bench").topic(TABLE)
    create_log_append_topic(stack.broker.bootstrap, topic)
    run = run_relay_process(document, start, changes)
    if run.events < changes:
        log.warning("the relay published %d of %d changes", run.events, changes)
    return run, read_window(stack.broker.bootstrap, topic, 0)


def _percentile_ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 2) if values else float("nan")


def _measure(stack: DevStack, workload: str, generate: Callable[[Any, str, int], Workload], changes: int,
             rounds: int, server_id: int) -> tuple[WorkloadResult, dict[str, str]]:
    """One workload: prime Debezium on its empty table, generate it once, then raw decode, the relay with
    transactions and Debezium (taking turns going first), and the relay without transactions, ``rounds``
    times each, keeping each side's best round (the machine is shared: MariaDB, the broker, other work; the
    best round is the one least disturbed by it). Also returns the settings Debezium's worker ran with."""
    database = f"bench_relay_{workload}_{int(time.time())}"
    with stack.mariadb.connect() as root:
        create_bench_table(root, database)
    debezium = DebeziumRuns(stack, database, TABLE, server_id=server_id + 50,
                            home=stack.state_dir / f"debezium-bench-{workload}")
    primed = debezium.prime()
    with stack.mariadb.connect() as root:
        start = current_position(root)
        if start != primed:
            raise StackError(f"Debezium was primed at {primed}, but the server is at {start} before the workload: "
                             "something wrote to the binlog in between, so the two would not read the same events",
                             hint="run the benchmark on a stack nothing else writes to (the default temporary one)")
        log.info("generating %d %s changes in %s", changes, workload, database)
        written = generate(root, database, changes)
        end = current_position(root)
    generated = written.changes
    raw_seconds = plain_seconds = float("inf")
    best: tuple[RelayRun, TopicWindow] | None = None
    best_debezium: DebeziumRun | None = None
    relay_peak = debezium_peak = 0.0
    try:
        for round_no in range(rounds):
            connection = mysql_connection(bench_pipeline(database, server_id, stack.state_dir)).pymysql_kwargs()
            raw_seconds = min(raw_seconds, raw_decode(connection, database, start, generated, server_id + 3))
            for side in ("relay", "debezium") if round_no % 2 == 0 else ("debezium", "relay"):
                if side == "relay":
                    run, window = relay_run(stack, database, server_id + 4 * round_no + 1, start, generated,
                                            transactions=True)
                    relay_peak = max(relay_peak, run.peak_rss_mb)
                    if best is None or window.seconds < best[1].seconds:
                        best = run, window
                else:
                    measured = debezium.run(generated + written.deletes)
                    debezium_peak = max(debezium_peak, measured.peak_rss_mb)
                    if measured.window.changes != generated:
                        log.warning("Debezium wrote %d changes, not %d", measured.window.changes, generated)
                    if best_debezium is None or measured.window.seconds < best_debezium.window.seconds:
                        best_debezium = measured
            plain_run, plain = relay_run(stack, database, server_id + 4 * round_no, start, generated,
                                         transactions=False)
            relay_peak = max(relay_peak, plain_run.peak_rss_mb)
            plain_seconds = min(plain_seconds, plain.seconds)
    finally:
        with stack.mariadb.connect() as root, root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    assert best is not None and best_debezium is not None
    log.info("%s: source %s..%s", workload, start, end)
    relay, window = best
    commits = relay.commit_seconds[1:]  # [0]: the start
    raw_rate, relay_rate, plain_rate = (generated / raw_seconds, window.changes_per_s(), generated / plain_seconds)
    debezium_rate = best_debezium.window.changes_per_s()
    return WorkloadResult(
        changes=generated,
        source_transactions=relay.transactions,
        raw_decode_changes_per_s=round(raw_rate, 1),
        relay_changes_per_s=round(relay_rate, 1),
        relay_vs_raw_decode=round(relay_rate / raw_rate, 3),
        relay_without_transactions_changes_per_s=round(plain_rate, 1),
        transaction_overhead=round(plain_rate / relay_rate, 3),
        kafka_transactions=len(commits),
        kafka_transactions_per_s=round(len(commits) / window.seconds, 1),
        commit_p50_ms=_percentile_ms(commits, 50),
        commit_p99_ms=_percentile_ms(commits, 99),
        debezium_changes_per_s=round(debezium_rate, 1),
        relay_vs_debezium=round(relay_rate / debezium_rate, 3),
        relay_start_s=round(window.first_ms / 1000 - relay.launched_at, 2),
        debezium_jvm_start_s=round(best_debezium.start_seconds, 2),
        relay_peak_rss_mb=round(relay_peak, 1),
        debezium_peak_rss_mb=round(debezium_peak, 1),
        relay_bytes_per_change=round(window.bytes_per_change(), 1),
        debezium_bytes_per_change=round(best_debezium.window.bytes_per_change(), 1),
        relay_header_bytes_per_change=round(window.header_bytes_per_change(), 1),
        debezium_header_bytes_per_change=round(best_debezium.window.header_bytes_per_change(), 1),
        debezium_records=best_debezium.window.records,
    ), debezium.settings


def run_bench(stack: DevStack, changes: int, *, autocommit_changes: int, rounds: int = 2) -> RelayBenchResult:
    os.environ.update(stack.connection_env())
    server_id = random.randrange(20_000, 30_000)
    batched, debezium_settings = _measure(stack, "batched", generate_changes, changes, rounds, server_id)
    single, _ = _measure(stack, "autocommit", generate_autocommit_changes, autocommit_changes, rounds,
                         server_id + 100)
    defaults = Pipeline.model_fields["relay"].default_factory()  # type: ignore[misc]
    return RelayBenchResult(
        batched=batched,
        autocommit=single,
        relay_changes_per_s=batched.relay_changes_per_s,
        raw_decode_changes_per_s=batched.raw_decode_changes_per_s,
        ratio_vs_raw_decode=batched.relay_vs_raw_decode,
        debezium_changes_per_s=batched.debezium_changes_per_s,
        relay_vs_debezium=batched.relay_vs_debezium,
        peak_rss_mb=max(batched.relay_peak_rss_mb, single.relay_peak_rss_mb),
        debezium_peak_rss_mb=max(batched.debezium_peak_rss_mb, single.debezium_peak_rss_mb),
        settings={"producer": {k: v for k, v in PRODUCER_DEFAULTS.items()} | {k: str(v) for k, v in
                               PRODUCER_REQUIRED.items()},
                  "relay": defaults.model_dump(),
                  "debezium": debezium_settings},
    )


def _print_workload(name: str, result: WorkloadResult) -> None:
    print(f"{name}: {result.changes} changes in {result.source_transactions} source transactions")
    print(f"  raw decode (pymysqlrepl):      {result.raw_decode_changes_per_s:>10,.0f} changes/s")
    print(f"  relay, Kafka transactions:     {result.relay_changes_per_s:>10,.0f} changes/s "
          f"= {result.relay_vs_raw_decode:.2f} x raw decode (target >= 1.3)")
    print(f"  relay, no transactions:        {result.relay_without_transactions_changes_per_s:>10,.0f} changes/s "
          f"(transactions cost x{result.transaction_overhead:.2f})")
    print(f"  Debezium (Connect standalone): {result.debezium_changes_per_s:>10,.0f} changes/s; relay = "
          f"{result.relay_vs_debezium:.2f} x Debezium (target >= 1.3)")
    print(f"  start to first record:         relay process {result.relay_start_s:.1f} s, Debezium JVM "
          f"{result.debezium_jvm_start_s:.1f} s")
    print(f"  peak RSS:                      relay {result.relay_peak_rss_mb:.0f} MB, Connect JVM "
          f"{result.debezium_peak_rss_mb:.0f} MB")
    print(f"  bytes per change (key+value):  relay {result.relay_bytes_per_change:,.0f}, Debezium "
          f"{result.debezium_bytes_per_change:,.0f} ({result.debezium_records} records with tombstones); headers "
          f"{result.relay_header_bytes_per_change:,.0f} / {result.debezium_header_bytes_per_change:,.0f}")
    print(f"  Kafka transactions:            {result.kafka_transactions} ({result.kafka_transactions_per_s:.1f}/s), "
          f"commit p50 {result.commit_p50_ms:.1f} ms, p99 {result.commit_p99_ms:.1f} ms")


def _run(args: argparse.Namespace) -> int:
    with bench_stack(args.stack, prefix="lakesync-bench-relay-") as stack:
        result = run_bench(stack, args.changes, autocommit_changes=args.autocommit_changes, rounds=args.rounds)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        _print_workload("batched (500-row transactions)", result.batched)
        _print_workload("autocommit (single-row transactions)", result.autocommit)
        print(f"peak RSS: relay process {result.peak_rss_mb:.0f} MB, Connect JVM {result.debezium_peak_rss_mb:.0f} MB")
        print(f"settings: {json.dumps(result.settings)}")
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "relay", help="relay throughput vs a bare python-mysql-replication decode loop and vs Debezium",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--changes", type=int, default=DEFAULT_CHANGES,
                        help=f"row changes of the batched workload (default {DEFAULT_CHANGES:,})")
    parser.add_argument("--autocommit-changes", type=int, default=DEFAULT_AUTOCOMMIT_CHANGES,
                        help=f"single-row transactions of the autocommit workload (default {DEFAULT_AUTOCOMMIT_CHANGES:,})")
    parser.add_argument("--stack", metavar="DIR",
                        help="state folder of a running embedded stack (default: start one in a temp folder)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="measure each side this many times, interleaved, and keep the best (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=_run)
