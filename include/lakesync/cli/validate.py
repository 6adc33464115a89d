"""``lakesync validate``: compare each table of a pipeline with its Delta table (exit code 3 on a mismatch)."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from lakesync.cli.arguments import add_pipeline_arguments, table_list
from lakesync.cli.status import VALIDATION_STYLES
from lakesync.validation.report import ValidationReport
from lakesync.validation.validate import DEFAULT_ROUNDS, DEFAULT_SETTLE_TIMEOUT_S

DESCRIPTION = """\
Compare every selected table of a pipeline with its Delta table: row counts, checksums of row fingerprints
over chunks (key ranges or key buckets), and, for chunks that differ, the keys: missing in Delta, extra in
Delta, or different. A row's fingerprint covers every value of the row exactly (every byte of a string: NUL,
emoji, trailing spaces; NULL apart from empty) and nothing else (docs/operations.md).

The source is read in a consistent snapshot at a known binlog position. Keys that differ are re-checked in
later rounds after waiting (bounded) for the stream to apply the source up to a new snapshot, and a Delta
row newer than the snapshot counts as in flight, not as a difference, so a busy source is not reported as
broken. Tables with an append-only change log (no key) are reported as not comparable row for row.

Each run is recorded in the Delta table <delta root>/_lakesync/validation_runs (shown by `lakesync status`).
Exit code: 0 when every table matches, 3 when a table differs or could not be compared.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("validate", help="compare source and Delta table by table",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_arguments(parser)
    parser.add_argument("--tables", type=table_list, help="comma-separated table names (default: every table the pipeline selects)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--settle-timeout", type=float, default=DEFAULT_SETTLE_TIMEOUT_S, metavar="SECONDS",
                        help="how long, per table, to wait in all for the stream to catch up before re-checking "
                             f"keys that differ (default {DEFAULT_SETTLE_TIMEOUT_S:g})")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"comparisons of differing keys before they count as a mismatch (default {DEFAULT_ROUNDS})")
    parser.add_argument("--chunk-rows", type=int, help="rows per checksum chunk (default: min(100000, snapshot.chunk_rows))")
    parser.add_argument("--fast-read", action="store_true",
                        help="read the source with the full load's fast reader (about 3x faster, but not "
                             "independent of the code that loaded the data)")
    parser.add_argument("--no-store", action="store_true", help="don't record the run in the validation-runs table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lakesync.core.config import load_pipeline
    from lakesync.validation.validate import validate_pipeline

    pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
    tables = args.tables
    console = Console(stderr=True)
    with console.status("validating...") as status:
        report = validate_pipeline(
            pipeline, tables=tables, settle_timeout_s=args.settle_timeout, rounds=args.rounds,
            chunk_rows=args.chunk_rows, fast_read=args.fast_read, store=not args.no_store,
            progress=lambda table, what: status.update(f"validate {table}: {what}"),
        )
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        Console().print(report_table(report))
    report.raise_for_mismatch()
    return 0




def report_table(report: ValidationReport) -> Table:
    table = Table(title=f"validation of {report.pipeline} (run {report.run_id[:12]})")
    for column, justify in (("table", "left"), ("source rows", "right"), ("Delta rows", "right"),
                            ("chunks", "right"), ("rounds", "right"), ("result", "left"), ("detail", "left")):
        table.add_column(column, justify=justify, no_wrap=column == "table")  # type: ignore[arg-type]
    for result in report.tables:
        chunks = f"{result.chunks_mismatched}/{result.chunks}" if result.chunks_mismatched else str(result.chunks)
        detail = result.describe().split(": ", 1)[-1] if result.status != "equal" else ""
        if result.in_flight_keys:
            detail = f"{detail} ({result.in_flight_keys} keys changed while checking)".strip()
        table.add_row(result.table, str(result.source_rows), str(result.delta_rows), chunks, str(result.rounds),
                      f"[{VALIDATION_STYLES[result.status]}]{result.status}[/]", detail)
    return table
