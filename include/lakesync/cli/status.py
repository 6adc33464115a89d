"""``lakesync status``: what needs attention first, in words; then per table its state, lag and last check.

Lag is how far the oldest change the stream has not applied is behind now (0 when nothing is pending, however
quiet the source); a relay that stops showing life (its heartbeats) is an alert of its own.

The default layout fits an 80-column terminal: the table's name, state and lag are never cut (the other
columns fold or are left for ``--wide``); ``--wide`` adds semantics, key, applied position, last batch and
the stop message; ``--json`` prints everything.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from lakesync.cli.arguments import add_pipeline_arguments

DESCRIPTION = """\
Show a pipeline's state per table: first what needs attention (a binlog the relay needs that the source
purged, or may soon expire, stopped tables, each with the one command that recovers them, a relay that
can't be read or has been silent past lag_alert_seconds, tables lagging past it, failed validations), then
a table of state, lag, loaded rows and the last validation. Lag is how far the oldest change the stream has
not applied yet is behind now: 0 when it has applied everything in Kafka, however long the source has been
quiet. --wide adds semantics, key, pending offsets, applied position, last batch and the stop message;
--json gives all of it (plus the relay's position and covered range).

Reads state files, Delta transaction logs, the broker (the relay's offsets topic, the table topics' log ends
and first unapplied records) and the source's binlog list (SHOW BINARY LOGS and the expiry settings): it
never scans a table. Positions show as FILE:OFFSET[:ROW], the form --from-position takes.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="what a pipeline is doing, table by table",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    parser.add_argument("--wide", action="store_true", help="every column (for terminals wider than 80)")
    parser.add_argument("--no-relay", action="store_true",
                        help="don't read the broker (the relay's progress, the stream's backlog: lag is not "
                        "shown) nor check the binlog the relay needs")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lakesync.core.config import load_pipeline
    from lakesync.monitoring.status import pipeline_status

    pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
    status = pipeline_status(pipeline, relay=not args.no_relay)
    if args.json:
        json.dump(status, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    print_status(Console(), status, lag_alert_seconds=pipeline.stream.lag_alert_seconds, wide=args.wide)
    return 0


def print_status(console: Console, status: dict[str, Any], *, lag_alert_seconds: float, wide: bool = False
                 ) -> None:
    from lakesync.monitoring.attention import attention
    from lakesync.monitoring.display import position_text, status_file_stem

    console.print(f"[bold]pipeline {status['pipeline']}[/] ({status['database']} -> {status['delta_root']})",
                  overflow="fold")
    items = attention(status, lag_alert_seconds=lag_alert_seconds)
    if items:
        console.print(f"[bold red]{len(items)} thing(s) need attention:[/]")
        for item in items:
            console.print(f"  {item.describe()}", overflow="fold", markup=False, emoji=False,
                          highlight=False)
    else:
        console.print(f"[green]nothing needs attention[/] ({len(status['tables'])} tables)")
    console.print(wide_table(status) if wide else narrow_table(status))
    relay = status.get("relay")
    if relay is not None and not relay.get("error"):
        stem = status_file_stem(status)
        silent = relay.get("silent_seconds")
        heard = f", last heard {silent:,.0f} s ago" if silent is not None else ""
        console.print(f"relay: at {position_text(relay.get('position'), stem)}, covering "
                      f"{position_text(relay.get('covered_from'), stem)} onwards{heard}", overflow="fold",
                      markup=False, emoji=False, highlight=False)


_STATE_STYLE = {"stopped": "bold red", "lagging": "bold red", "streaming": "green", "loaded": "cyan",
                "not synced": "yellow"}
#: a validation result's colour; an append-only table's "not_comparable" is information (it has no key to
#: compare row for row), never a warning or error colour
VALIDATION_STYLES = {"equal": "green", "mismatch": "bold red", "error": "bold red", "not_comparable": "blue"}


def _text(value: Any) -> Text:
    """A cell taken literally: no markup, no emoji codes (``binlog.000003:1234:2`` holds one)."""
    return Text("-" if value is None else str(value))


def _lag(entry: dict[str, Any]) -> str:
    lag = (entry.get("stream") or {}).get("lag_seconds")
    if lag is None:
        return "-"
    return f"{lag:.1f} s" if lag < 600 else f"{lag / 60:,.0f} min"


def _validation(entry: dict[str, Any], *, short: bool) -> str:
    check = entry.get("last_validation") or {}
    if not check:
        return "-"
    when = str(check.get("finished_at") or "")
    result = check["status"]
    text = f"{result} {when[5:16].replace('T', ' ')}" if short else f"{result} at {when}"
    return f"[{VALIDATION_STYLES[result]}]{text}[/]" if result in VALIDATION_STYLES else text


def _row_start(entry: dict[str, Any]) -> list[str]:
    from lakesync.monitoring.attention import table_state

    state = table_state(entry)
    style = _STATE_STYLE.get(state)
    return [entry["table"], f"[{style}]{state}[/]" if style else state, _lag(entry)]


def narrow_table(status: dict[str, Any]) -> Table:
    """Name, state and lag never cut (their columns take their full width first); the rest folds."""
    names = [entry["table"] for entry in status["tables"]]
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("table", no_wrap=True, min_width=max([5, *map(len, names)]))
    table.add_column("state", no_wrap=True, min_width=9)
    table.add_column("lag", no_wrap=True, justify="right", min_width=7)
    table.add_column("loaded rows", justify="right", overflow="fold")
    table.add_column("last validation", overflow="fold")
    for entry in status["tables"]:
        table.add_row(*_row_start(entry), _text((entry.get("full_load") or {}).get("rows")),
                      _validation(entry, short=True))
    return table


def wide_table(status: dict[str, Any]) -> Table:
    from lakesync.monitoring.attention import without_command
    from lakesync.monitoring.display import position_text, status_file_stem

    stem = status_file_stem(status)
    table = Table(header_style="bold")
    table.add_column("table", no_wrap=True)
    for column in ("state", "lag", "pending", "semantics", "key", "loaded rows", "applied position", "last batch",
                   "stopped", "last validation"):
        table.add_column(column, overflow="fold")
    for entry in status["tables"]:
        load, stream = entry.get("full_load") or {}, entry.get("stream") or {}
        table.add_row(*_row_start(entry), _text(stream.get("pending")), _text(entry["semantics"]),
                      ", ".join(entry["key_columns"] or []) or "-",
                      _text(load.get("rows")), _text(position_text(entry.get("applied_position"), stem)),
                      _text(stream.get("last_batch_rows")),
                      _text(stream.get("stopped_reason") and without_command(stream["stopped_reason"])),
                      _validation(entry, short=False))
    return table
