"""``lakesync status``: per table, the full load, the stream's progress and lag, and the last validation."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from lakesync.cli.arguments import add_pipeline_arguments

DESCRIPTION = """\
Show a pipeline's state per table: semantics and key, the full load (rows, position), the stream (applied
position, lag, rows in the last batch, why it stopped), the Delta table (version, files) and the last
validation result; plus the relay's stored position and the range of the binlog it has covered.

Reads state files, Delta transaction logs and the relay's offsets topic only: it never scans a table and
never connects to the source database.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="what a pipeline is doing, table by table",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    parser.add_argument("--no-relay", action="store_true", help="don't read the relay's progress from the broker")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lakesync.core.config import load_pipeline
    from lakesync.monitoring.status import pipeline_status

    status = pipeline_status(load_pipeline(args.pipeline, args.pipelines_dir), relay=not args.no_relay)
    if args.json:
        json.dump(status, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    console = Console()
    console.print(status_table(status))
    relay = status.get("relay")
    if relay is not None:
        if relay.get("error"):
            console.print(f"relay: [red]{relay['error']}[/]")
        else:
            console.print(f"relay: position {relay.get('position_token') or '-'}, covering "
                          f"{relay.get('covered_from') or '-'} .. {relay.get('position') or '-'}")
        pressure = relay.get("backpressure")
        if pressure and pressure.get("throttling"):
            console.print(f"relay: [yellow]throttled[/]: the stream is {pressure['lag_records']} records behind "
                          f"(bound {pressure['max_lag']}); the relay waits, nothing is dropped")
    return 0


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def status_table(status: dict[str, Any]) -> Table:
    table = Table(title=f"pipeline {status['pipeline']} ({status['database']} -> {status['delta_root']})")
    table.add_column("table", no_wrap=True)
    for column in ("semantics", "key", "loaded rows", "applied position", "lag s", "last batch", "stopped",
                   "last validation"):
        table.add_column(column)
    for entry in status["tables"]:
        load, stream, check = entry["full_load"] or {}, entry["stream"] or {}, entry["last_validation"] or {}
        lag = stream.get("lag_seconds")
        lag_text = "-" if lag is None else f"{lag:.1f}"
        if entry["lagging"]:
            lag_text = f"[bold red]{lag_text}[/]"
        validation = f"{check['status']} at {check['finished_at']}" if check else "-"
        table.add_row(entry["table"], _text(entry["semantics"]), ", ".join(entry["key_columns"] or []) or "-",
                      _text(load.get("rows")), _text(stream.get("applied_position")), lag_text,
                      _text(stream.get("last_batch_rows")), _text(stream.get("stopped_reason")), validation)
    return table
