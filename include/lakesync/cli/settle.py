"""``lakesync settle``: settle data intervals of a pipeline's watermarked tables, outside Airflow.

The same library call the settlement DAG's tasks make, for one interval or every scheduled interval in a
range (what ``airflow backfill create`` does through Airflow).
"""

from __future__ import annotations

import argparse
from datetime import datetime

from rich.console import Console
from rich.table import Table

from lakesync.cli.arguments import add_pipeline_arguments, table_list
from lakesync.core.config import load_pipeline
from lakesync.core.errors import ConfigError
from lakesync.settlement.windows import schedule_intervals

DESCRIPTION = """\
Settle data intervals: for each table with a watermark (tables.overrides.<t>.watermark), read the rows of
[interval start - safety window, interval end - safety window) from the source, compare them with Delta,
and commit the difference in one Delta commit per table and interval (app transaction
settlement:<table>:<interval>, begin/end markers lakesync.settlement.interval_start/end in the commit).
Re-running an interval changes nothing unless the source changed; then it replaces that interval's effect.

Intervals follow settlement.schedule (cron, settlement.timezone): --from/--to settles every scheduled
interval inside the range, like `airflow backfill create --dag-id lakesync_<p>_settlement`.

Example:
  lakesync settle --pipeline demo --from 2026-11-17T02:00Z --to 2026-11-20T02:00Z
"""


def _when(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; write it like 2026-11-20T02:00Z")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "settle", help="settlement sync: data intervals of watermarked tables into Delta, idempotently",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pipeline_arguments(parser)
    parser.add_argument("--from", dest="start", type=_when, required=True,
                        help="range start (ISO 8601 with zone); the first interval starts at or after it")
    parser.add_argument("--to", dest="end", type=_when, required=True,
                        help="range end (ISO 8601 with zone); the last interval ends at or before it")
    parser.add_argument("--tables", type=table_list, help="comma-separated tables (default: every table with a watermark)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from lakesync.settlement.sync import (  # heavy: only when the command runs
        settle_pipeline,
        settlement_tables,
    )

    pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
    wanted = args.tables or list(pipeline.tables.overrides)
    tables = settlement_tables(pipeline, wanted)
    if not tables:
        raise ConfigError(f"pipeline {pipeline.name!r} has no table with a watermark among {', '.join(wanted)}",
                          hint="set tables.overrides.<table>.watermark: {column: updated_at} in the pipeline file")
    intervals = schedule_intervals(pipeline.settlement.schedule, pipeline.settlement.timezone, args.start, args.end)
    if not intervals:
        raise ConfigError(f"no whole interval of schedule {pipeline.settlement.schedule!r} lies in the range",
                          hint="widen --from/--to to cover at least one scheduled interval")
    console, progress = Console(), Console(stderr=True)
    report = Table("interval", "table", "source rows", "inserted", "updated", "deleted", "commit", "run")
    for number, (start, end) in enumerate(intervals, 1):
        with progress.status(f"settling interval {number}/{len(intervals)}: {start:%Y-%m-%d %H:%M} → {end:%Y-%m-%d %H:%M}"):
            results = settle_pipeline(pipeline, tables, interval_start=start, interval_end=end)
        for result in results:
            report.add_row(result.interval, result.table, f"{result.source_rows:,}", str(result.inserted),
                           str(result.updated), str(result.deleted),
                           "—" if result.delta_version is None else f"v{result.delta_version}", str(result.run))
    console.print(report)
    return 0
