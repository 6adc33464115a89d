"""spark-submit entry point for the stream (what Airflow's stream tasks run).

    spark-submit spark_apps/stream.py --pipeline demo [--once] [--tables a,b]

``--once`` processes what is in Kafka when it starts (Trigger.AvailableNow) and exits: that is how the
Airflow DAG schedules it. Without it the stream runs continuously with the pipeline's trigger interval.
Prints one JSON summary line and exits non-zero with the error's message on failure.
"""

from __future__ import annotations

import argparse
import json
import sys

from lakesync.config import load_pipeline
from lakesync.errors import LakesyncError
from lakesync.spark_session import build_spark_session
from lakesync.stream.app import run_stream


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="lakesync stream (Spark Structured Streaming, Kafka -> Delta)")
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--pipelines-dir")
    parser.add_argument("--tables", help="comma-separated table names (default: every fully loaded table)")
    parser.add_argument("--once", action="store_true", help="process what is there now and exit (availableNow)")
    args = parser.parse_args(argv)
    spark = build_spark_session(f"lakesync-stream-{args.pipeline}")
    try:
        pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
        tables = [name.strip() for name in args.tables.split(",") if name.strip()] if args.tables else None
        summary = run_stream(pipeline, once=args.once, tables=tables, spark=spark)
        print(json.dumps({"batches": summary.batches, "changes": summary.changes, "tables": summary.tables}))
    except LakesyncError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
