"""``lakesync recover``: Kafka lost records the stream needs; replay them from the binlog (lakesync.recovery)."""

from __future__ import annotations

import argparse

from lakesync.cli.arguments import add_pipeline_arguments
from lakesync.core.config import load_pipeline

DESCRIPTION = """\
Recover a pipeline whose Kafka topics lost records the stream still needs (a lost broker or disk, a deleted
topic, retention that ran while the stream was down): the stream stops with "were deleted from Kafka" or
"gone or were recreated" and names this command.

Each table is replayed from the binlog from its consumed-through mark (every change before it is in Delta)
or its load position, when the source server still has that binlog; only the tables it can't cover are
re-loaded (and tables the stream stopped, whose re-load is their recovery). Then the pipeline's topics are
emptied (other consumers of them lose those records too), the relay's progress is set to the earliest start,
and the stream's checkpoint is moved aside. Keyed tables are exact; append_log tables are exact with one
partition per topic (else re-loaded). Pipelines on Debezium's topics are refused.

Stop the relay and the stream first: it is refused while the relay's heartbeats are fresh, and without Kafka
transactions unless the relay recorded a clean stop (SIGTERM or Ctrl-C). Afterwards start the relay, then the
stream. Safe to run again if it stopped half-way. --dry-run shows the plan and changes nothing.
"""


def _run(args: argparse.Namespace) -> int:
    from lakesync.recovery.replay import Recovery

    pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
    recovery = Recovery(pipeline)
    plan = recovery.plan()
    for table in plan.tables:
        print(f"  {table.table}: {'re-load' if table.reload else 'replay'}: {table.why}")
    if args.dry_run:
        return 0
    result = recovery.run(plan)
    assert result.relay_from is not None
    print(f"recovered pipeline {pipeline.name}: {len(plan.tables) - len(plan.reloaded)} tables replayed, "
          f"{len(plan.reloaded)} re-loaded; the relay replays from {result.relay_from.token()}"
          + (f"; the old stream checkpoint is in {result.checkpoint_moved_to}" if result.checkpoint_moved_to else ""))
    print(f"next: start the relay (`lakesync relay --pipeline {pipeline.name}` or its Airflow task), then the stream")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "recover", help="replay from the binlog what Kafka lost (re-load only what the binlog can't cover)",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pipeline_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="show each table's plan; change nothing")
    parser.set_defaults(func=_run)
