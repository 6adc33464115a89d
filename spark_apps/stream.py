"""spark-submit entry point for the stream (what Airflow's stream tasks run).

    spark-submit spark_apps/stream.py --pipeline demo [--once] [--tables a,b]

``--once`` processes what is in Kafka when it starts (Trigger.AvailableNow) and exits: that is how the
Airflow DAG schedules it. Without it the stream runs continuously with the pipeline's trigger interval.
Prints one JSON summary line and exits non-zero with the error's message on failure.
"""

from __future__ import annotations

import argparse
import sys

from lakesync.cli.arguments import add_pipeline_arguments, table_list
from lakesync.core.config import load_pipeline
from lakesync.spark.session import run_spark_app
from lakesync.stream.app import run_stream


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="lakesync stream (Spark Structured Streaming, Kafka -> Delta)")
    add_pipeline_arguments(parser)
    parser.add_argument("--tables", type=table_list, help="comma-separated table names (default: every fully loaded table)")
    parser.add_argument("--once", action="store_true", help="process what is there now and exit (availableNow)")
    args = parser.parse_args(argv)

    def work(spark):
        pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
        summary = run_stream(pipeline, once=args.once, tables=args.tables, spark=spark)
        yield {"batches": summary.batches, "changes": summary.changes, "tables": summary.tables}

    return run_spark_app(f"lakesync-stream-{args.pipeline}", work)


if __name__ == "__main__":
    sys.exit(main())
