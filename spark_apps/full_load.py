"""spark-submit entry point for the full load (what Airflow's SparkSubmitOperator runs).

    spark-submit spark_apps/full_load.py --pipeline demo [--tables a,b] [--mode consistent|chunked] [--restart]

In chunked mode the key ranges are read and written as Parquet by Spark tasks on the executors and the
driver commits each table in one Delta transaction. In consistent mode the snapshot's connections live in
the driver (a snapshot can't be shared across processes), so the driver reads, on several connections.
Prints one JSON line per table and exits non-zero with the error's message on failure.
"""

from __future__ import annotations

import argparse
import sys

from lakesync.cli.arguments import add_pipeline_arguments, table_list
from lakesync.core.config import load_pipeline
from lakesync.full_load.chunk_runners import SparkChunkRunner
from lakesync.full_load.load import FullLoad
from lakesync.spark.session import run_spark_app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="lakesync full load (Spark)")
    add_pipeline_arguments(parser)
    parser.add_argument("--tables", type=table_list, help="comma-separated table names")
    parser.add_argument("--mode", choices=("consistent", "chunked"))
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--restart", action="store_true")
    args = parser.parse_args(argv)

    def work(spark):
        pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
        load = FullLoad(pipeline, tables=args.tables, mode=args.mode, connections=args.connections,
                        restart=args.restart, chunk_runner=SparkChunkRunner(spark))
        for result in load.run():
            yield {"table": result.table, "rows": result.rows, "seconds": round(result.seconds, 3),
                   "delta_version": result.delta_version, "position": result.position.token(),
                   "mode": result.mode, "skipped": result.skipped}

    return run_spark_app(f"lakesync-full-load-{args.pipeline}", work)


if __name__ == "__main__":
    sys.exit(main())
