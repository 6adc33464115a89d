"""``lakesync relay``: run a pipeline's relay (binlog -> Kafka) in the foreground."""

from __future__ import annotations

import argparse
import logging
import signal
from types import FrameType

from lakesync.cli.arguments import add_pipeline_arguments
from lakesync.core.config import load_pipeline
from lakesync.core.positions import SourcePosition

log = logging.getLogger("lakesync.relay")

DESCRIPTION = """\
Stream the pipeline's selected tables from the source's binlog to Kafka, one topic per table
(<prefix>.<db>.<table>, Debezium envelope, key = primary key; DDL on <prefix>.<db>._schema).

Where it starts, first found wins: --from-position, the relay's stored progress (topic
<prefix>._lakesync_offsets), the position of the last full load, the server's current position.
Progress is stored at transaction ends once the broker acknowledged everything before them, so a
restart after a crash resumes without losing anything (re-sent events are harmless).

It logs its start position and, every --log-every seconds, events/s and lag. Ctrl-C or SIGTERM stop it
cleanly at the next event, after storing progress.
"""


def _run(args: argparse.Namespace) -> int:
    from lakesync.relay import Relay  # heavy imports only when the command runs

    pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
    start = SourcePosition.parse(args.from_position) if args.from_position else None
    relay = Relay(pipeline, log_every_seconds=args.log_every)

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: stopping after the current event", signal.Signals(signum).name)
        relay.stop()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        stats = relay.run(from_position=start, stop_when_idle_seconds=args.stop_when_idle)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"relayed {stats.events} changes ({stats.events_per_second:.0f}/s) and {stats.schema_changes} schema "
          f"changes from {stats.start} to {stats.position}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "relay", help="stream binlog changes to Kafka (the pipeline's relay)",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pipeline_arguments(parser)
    parser.add_argument("--from-position", metavar="FILE:POS",
                        help="start here instead of the stored progress, e.g. binlog.000003:1542 (a transaction "
                        "boundary, as SHOW MASTER STATUS prints it)")
    parser.add_argument("--stop-when-idle", type=float, metavar="SECONDS",
                        help="stop after this many seconds without changes (tests, catch-up runs); default: run "
                        "until stopped")
    parser.add_argument("--log-every", type=float, default=10.0, metavar="SECONDS",
                        help="seconds between progress lines with events/s and lag (default 10)")
    parser.set_defaults(func=_run)
