"""``lakesync bench relay``: the relay's throughput against python-mysql-replication's own decode speed.

One run: generate N row changes (inserts, updates, deletes in transactions of 500 rows) in a fresh
database, then measure over exactly those binlog events (a) a bare ``BinLogStreamReader`` loop that
decodes every row and does nothing else, the ceiling for any Python relay, and (b) the relay publishing
them to the broker with acknowledgements and progress. The ratio (b)/(a) is what the relay's own work
(envelope, JSON, producing, progress) costs; the target is >= 0.8.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from lakesync.core.config import Pipeline, parse_pipeline
from lakesync.core.connections import mysql_connection
from lakesync.core.positions import SourcePosition
from lakesync.relay.worker import Relay
from lakesync.source.server_checks import current_position
from lakesync_devkit.bench.harness import bench_stack, peak_rss_mb
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID, DevStack

log = logging.getLogger(__name__)
DEFAULT_CHANGES = 200_000
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
class RelayBenchResult:
    changes: int
    relay_changes_per_s: float
    raw_decode_changes_per_s: float
    ratio_vs_raw_decode: float
    peak_rss_mb: float
    relay_seconds: float
    raw_decode_seconds: float


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


def bench_pipeline(database: str, server_id: int, state_dir: Path) -> Pipeline:
    return parse_pipeline({
        "name": "bench_relay",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"bench{server_id}"},
        "delta": {"root": str(state_dir / "delta")},
        "state_dir": str(state_dir / "pipelines"),
    }, source_name="bench")


def run_bench(stack: DevStack, changes: int, *, rounds: int = 2) -> RelayBenchResult:
    """Generate the changes once, then measure raw decode and the relay ``rounds`` times each, interleaved,
    and keep each side's best round: the machine is shared (MariaDB, the broker, other work), and the best
    round is the one least disturbed by it."""
    os.environ.update(stack.connection_env())
    database = f"bench_relay_{int(time.time())}"
    server_id = random.randrange(20_000, 30_000)
    with stack.mariadb.connect() as root:
        start = current_position(root)
        log.info("generating %d changes in %s", changes, database)
        generated = generate_changes(root, database, changes)
    raw_seconds, relay_seconds, relayed = float("inf"), float("inf"), 0
    try:
        for round_no in range(rounds):
            pipeline = bench_pipeline(database, server_id + 2 * round_no, stack.state_dir)
            connection = mysql_connection(pipeline).pymysql_kwargs()
            raw_seconds = min(raw_seconds, raw_decode(connection, database, start, generated, server_id + 1))
            stats = Relay(pipeline, log_every_seconds=3600).run(from_position=start, max_events=generated)
            if stats.events < generated:
                log.warning("the relay published %d of %d changes", stats.events, generated)
            if stats.elapsed_seconds < relay_seconds:
                relay_seconds, relayed = stats.elapsed_seconds, stats.events
    finally:
        with stack.mariadb.connect() as root, root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    raw_rate = generated / raw_seconds
    relay_rate = relayed / relay_seconds
    return RelayBenchResult(
        changes=generated,
        relay_changes_per_s=round(relay_rate, 1),
        raw_decode_changes_per_s=round(raw_rate, 1),
        ratio_vs_raw_decode=round(relay_rate / raw_rate, 3),
        peak_rss_mb=round(peak_rss_mb(), 1),
        relay_seconds=round(relay_seconds, 3),
        raw_decode_seconds=round(raw_seconds, 3),
    )


def _run(args: argparse.Namespace) -> int:
    with bench_stack(args.stack, prefix="lakesync-bench-relay-") as stack:
        result = run_bench(stack, args.changes, rounds=args.rounds)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(f"changes:                  {result.changes}")
        print(f"raw decode (pymysqlrepl): {result.raw_decode_changes_per_s:,.0f} changes/s "
              f"({result.raw_decode_seconds:.2f} s)")
        print(f"relay -> broker:          {result.relay_changes_per_s:,.0f} changes/s ({result.relay_seconds:.2f} s)")
        print(f"ratio relay / raw decode: {result.ratio_vs_raw_decode:.2f} (target >= 0.8)")
        print(f"peak RSS:                 {result.peak_rss_mb:.0f} MB")
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "relay", help="relay throughput vs a bare python-mysql-replication decode loop",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--changes", type=int, default=DEFAULT_CHANGES,
                        help=f"row changes to generate and relay (default {DEFAULT_CHANGES:,})")
    parser.add_argument("--stack", metavar="DIR",
                        help="state folder of a running embedded stack (default: start one in a temp folder)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="measure each side this many times, interleaved, and keep the best (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=_run)
