"""``lakesync stream``: Kafka -> Delta for a pipeline's fully loaded tables, exactly once."""

from __future__ import annotations

import argparse

from lakesync.cli.arguments import add_pipeline_arguments, table_list

DESCRIPTION = """\
Read the pipeline's table topics with Spark Structured Streaming and MERGE each change into its Delta
table: a change applies only when its source position is newer than the row's, deletes leave tombstones,
and each micro-batch commits with an app transaction so a replayed batch is skipped.

A new stream starts at the offsets that cover each table's full-load position, after checking that the
relay's change log reaches back that far (else it stops: "gap between the full load and the change log").
An existing stream resumes from its checkpoint (<state dir>/pipelines/<name>/checkpoints/stream).

--once processes what is in Kafka now and exits (what Airflow schedules); without it the stream runs
continuously with the pipeline's stream.trigger_seconds until Ctrl-C.
"""


def _run(args: argparse.Namespace) -> int:
    from lakesync.core.config import load_pipeline
    from lakesync.stream.app import run_stream

    pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
    tables = args.tables
    summary = run_stream(pipeline, once=args.once, tables=tables, timeout_seconds=args.timeout)
    per_table = ", ".join(f"{name} {count}" for name, count in sorted(summary.tables.items())) or "no changes"
    print(f"applied {summary.changes} changes in {summary.batches} batches ({per_table})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stream", help="merge the Kafka change log into Delta (Spark)",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_arguments(parser)
    parser.add_argument("--tables", type=table_list, metavar="A,B", help="only these tables (default: every fully loaded table)")
    parser.add_argument("--once", action="store_true", help="process what is in Kafka now, then exit")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="continuous mode: stop after this many seconds (default: run until Ctrl-C)")
    parser.set_defaults(func=_run)
