"""Entry point for one settlement interval outside Airflow's workers (spark-submit or plain python).

    spark-submit spark_apps/settlement.py --pipeline demo --interval-start 2026-11-19T02:00Z \
        --interval-end 2026-11-20T02:00Z [--tables transactions]

The settlement of an interval is a keyed read of one day's rows and one MERGE: by delta-rs, with no Spark
session, or with ``delta.writer: delta_spark`` by delta-spark in the session this process starts (under
spark-submit, the launcher's); the Airflow DAG runs the same library call in-process. Prints one JSON line per table and
exits non-zero with the error's message on failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from lakesync.cli.arguments import add_pipeline_arguments, table_list
from lakesync.core.config import load_pipeline
from lakesync.core.errors import LakesyncError
from lakesync.settlement.sync import settle_pipeline


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="lakesync settlement of one data interval")
    add_pipeline_arguments(parser)
    parser.add_argument("--interval-start", type=_when, required=True)
    parser.add_argument("--interval-end", type=_when, required=True)
    parser.add_argument("--tables", type=table_list, help="comma-separated tables (default: every table with a watermark)")
    args = parser.parse_args(argv)
    try:
        pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
        tables = args.tables or list(pipeline.tables.overrides)
        for result in settle_pipeline(pipeline, tables, interval_start=args.interval_start,
                                      interval_end=args.interval_end):
            print(json.dumps(result.as_dict(), default=str))
    except LakesyncError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
