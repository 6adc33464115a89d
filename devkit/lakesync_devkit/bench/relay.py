"""``lakesync bench relay``: the relay's throughput against python-mysql-replication's own decode speed.

One run, two workloads over their own databases: ``batched`` (N row changes, inserts, updates and deletes in
transactions of 500 rows) and ``autocommit`` (single-row transactions, each statement its own commit). Over
exactly the binlog events of each, interleaved and repeated (best round kept), it measures (a) a bare
``BinLogStreamReader`` loop that decodes every row and does nothing else, the ceiling for any Python relay,
(b) the relay with its shipped defaults (Kafka transactions on: each transaction holds whole source
transactions and the relay's progress) and (c) the relay with ``kafka.transactions: false``. Printed: the
changes/s of each, the ratio (b)/(a) (target >= 1.3 on both workloads: the relay decodes row images with its
own decoder, faster than the library's), the transactions' overhead (b)/(c), Kafka transactions committed per
second and the commit time p50/p99, and the relay's peak RSS.
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
from lakesync.core.positions import SourcePosition
from lakesync.relay.publisher import PRODUCER_DEFAULTS, PRODUCER_REQUIRED
from lakesync.relay.worker import Relay
from lakesync.source.server_checks import current_position
from lakesync_devkit.bench.harness import bench_stack, peak_rss_mb
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID, DevStack

log = logging.getLogger(__name__)
DEFAULT_CHANGES = 200_000
DEFAULT_AUTOCOMMIT_CHANGES = 30_000
_BATCH = 500
_TABLE_SQL = """CREATE TABLE bench_changes (
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


@dataclass
class RelayBenchResult:
    batched: WorkloadResult
    autocommit: WorkloadResult
    relay_changes_per_s: float
    raw_decode_changes_per_s: float
    ratio_vs_raw_decode: float
    peak_rss_mb: float
    settings: dict[str, Any]


def generate_changes(conn: Any, database: str, changes: int) -> int:
    """Write ``changes`` row changes: 60% inserts, 30% updates, 10% deletes, 500 rows per transaction."""
    inserts = int(changes * 0.6)
    updates = int(changes * 0.3)
    deletes = changes - inserts - updates
    rng = random.Random(7)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"USE `{database}`")
        cur.execute(_TABLE_SQL)
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
    return inserts + updates + deletes


def generate_autocommit_changes(conn: Any, database: str, changes: int) -> int:
    """Write ``changes`` single-row transactions (60% inserts, 30% updates, 10% deletes), each its own commit."""
    inserts = int(changes * 0.6)
    updates = int(changes * 0.3)
    deletes = changes - inserts - updates
    rng = random.Random(11)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"USE `{database}`")
        cur.execute(_TABLE_SQL)
        conn.autocommit(True)
        for i in range(1, inserts + 1):
            cur.execute("INSERT INTO bench_changes VALUES (%s,%s,%s,%s,%s,%s,%s)",
                        (i, rng.randrange(1, 10_000), f"{rng.uniform(-5000, 5000):.2f}", "EUR", "transfer",
                         f"2026-01-{1 + i % 28:02d} 12:00:00.{i % 1_000_000:06d}", None))
        for i in range(1, updates + 1):
            cur.execute("UPDATE bench_changes SET amount = amount + 1 WHERE id = %s", (i,))
        for i in range(1, deletes + 1):
            cur.execute("DELETE FROM bench_changes WHERE id = %s", (inserts - i + 1,))
    return inserts + updates + deletes


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


def bench_pipeline(database: str, server_id: int, state_dir: Path, *, transactions: bool = True) -> Pipeline:
    return parse_pipeline({
        "name": "bench_relay",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"bench{server_id}", "transactions": transactions},
        "delta": {"root": str(state_dir / "delta")},
        "state_dir": str(state_dir / "pipelines"),
    }, source_name="bench")


def _percentile_ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 2) if values else float("nan")


def _measure(stack: DevStack, workload: str, generate: Callable[[Any, str, int], int], changes: int, rounds: int,
             server_id: int) -> WorkloadResult:
    """One workload: generate it once, then raw decode and the relay with and without transactions, ``rounds``
    times each, interleaved, keeping each side's best round (the machine is shared: MariaDB, the broker,
    other work; the best round is the one least disturbed by it)."""
    database = f"bench_relay_{workload}_{int(time.time())}"
    with stack.mariadb.connect() as root:
        start = current_position(root)
        log.info("generating %d %s changes in %s", changes, workload, database)
        generated = generate(root, database, changes)
        end = current_position(root)
    raw_seconds = transactional_seconds = plain_seconds = float("inf")
    best_commits: list[float] = []
    source_transactions = 0
    try:
        for round_no in range(rounds):
            for transactions in (True, False):
                pipeline = bench_pipeline(database, server_id + 4 * round_no + int(transactions), stack.state_dir,
                                          transactions=transactions)
                if transactions:
                    connection = mysql_connection(pipeline).pymysql_kwargs()
                    raw_seconds = min(raw_seconds, raw_decode(connection, database, start, generated, server_id + 3))
                relay = Relay(pipeline, log_every_seconds=3600)
                stats = relay.run(from_position=start, max_events=generated)
                if stats.events < generated:
                    log.warning("the relay published %d of %d changes", stats.events, generated)
                seconds = stats.elapsed_seconds * generated / max(stats.events, 1)
                if transactions and seconds < transactional_seconds:
                    transactional_seconds, best_commits = seconds, relay.commit_seconds[1:]  # [0]: the start
                    source_transactions = stats.transactions
                elif not transactions:
                    plain_seconds = min(plain_seconds, seconds)
    finally:
        with stack.mariadb.connect() as root, root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    log.info("%s: source %s..%s", workload, start, end)
    raw_rate, relay_rate, plain_rate = (generated / raw_seconds, generated / transactional_seconds,
                                        generated / plain_seconds)
    return WorkloadResult(
        changes=generated,
        source_transactions=source_transactions,
        raw_decode_changes_per_s=round(raw_rate, 1),
        relay_changes_per_s=round(relay_rate, 1),
        relay_vs_raw_decode=round(relay_rate / raw_rate, 3),
        relay_without_transactions_changes_per_s=round(plain_rate, 1),
        transaction_overhead=round(plain_rate / relay_rate, 3),
        kafka_transactions=len(best_commits),
        kafka_transactions_per_s=round(len(best_commits) / transactional_seconds, 1),
        commit_p50_ms=_percentile_ms(best_commits, 50),
        commit_p99_ms=_percentile_ms(best_commits, 99),
    )


def run_bench(stack: DevStack, changes: int, *, autocommit_changes: int, rounds: int = 2) -> RelayBenchResult:
    os.environ.update(stack.connection_env())
    server_id = random.randrange(20_000, 30_000)
    batched = _measure(stack, "batched", generate_changes, changes, rounds, server_id)
    single = _measure(stack, "autocommit", generate_autocommit_changes, autocommit_changes, rounds, server_id + 100)
    defaults = Pipeline.model_fields["relay"].default_factory()  # type: ignore[misc]
    return RelayBenchResult(
        batched=batched,
        autocommit=single,
        relay_changes_per_s=batched.relay_changes_per_s,
        raw_decode_changes_per_s=batched.raw_decode_changes_per_s,
        ratio_vs_raw_decode=batched.relay_vs_raw_decode,
        peak_rss_mb=round(peak_rss_mb(), 1),
        settings={"producer": {k: v for k, v in PRODUCER_DEFAULTS.items()} | {k: str(v) for k, v in
                               PRODUCER_REQUIRED.items()},
                  "relay": defaults.model_dump()},
    )


def _print_workload(name: str, result: WorkloadResult) -> None:
    print(f"{name}: {result.changes} changes in {result.source_transactions} source transactions")
    print(f"  raw decode (pymysqlrepl):      {result.raw_decode_changes_per_s:>10,.0f} changes/s")
    print(f"  relay, Kafka transactions:     {result.relay_changes_per_s:>10,.0f} changes/s "
          f"= {result.relay_vs_raw_decode:.2f} x raw decode (target >= 1.3)")
    print(f"  relay, no transactions:        {result.relay_without_transactions_changes_per_s:>10,.0f} changes/s "
          f"(transactions cost x{result.transaction_overhead:.2f})")
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
        print(f"peak RSS of the bench process: {result.peak_rss_mb:.0f} MB")
        print(f"settings: {json.dumps(result.settings)}")
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "relay", help="relay throughput vs a bare python-mysql-replication decode loop",
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
