"""``lakesync enable-deletion-vectors``: make a pipeline's Delta tables writable by delta-spark
(lakesync.sink.upgrade)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from lakesync.cli.arguments import add_pipeline_arguments, table_list

if TYPE_CHECKING:
    from lakesync.core.config import Pipeline
    from lakesync.sink.upgrade import TableUpgrade

DESCRIPTION = """\
Make a pipeline's Delta tables writable by delta-spark, ahead of `delta.writer: delta_spark`: add the writer
features a delta-rs table's protocol leaves out, and switch deletion vectors on. Without --yes it only shows,
per table, the protocol it has and what would change; nothing changes. (This is not the upgrade of lakesync
itself, which needs no command: docs/operations.md.)

Switching deletion vectors on upgrades the table's protocol to reader 3 / writer 7, which CAN'T BE UNDONE:
readers without deletion-vector support (older Delta readers, delta-rs's to_pyarrow_table()) can no longer
read the table. Check every reader of the tables first. Without this command the first delta-spark write to
each table does the same upgrade (docs/sink.md, "Writing with delta-spark"). Stop the pipeline's stream,
settlement and maintenance while --yes runs: on S3, delta-rs and delta-spark don't share a commit lock.

The tables are the pipeline's selected tables on the source (or --tables, each of which the pipeline must
select); a table with no Delta table yet is listed and skipped. A table whose column names delta-spark can't
write is refused, named, and left as it is; a table whose upgrade fails is named with the error and its state
after it; the other tables are still upgraded, and the exit code is 2.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "enable-deletion-vectors",
        help="make the Delta tables writable by delta-spark (deletion vectors on: can't be undone)",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pipeline_arguments(parser)
    parser.add_argument("--tables", type=table_list,
                        help="comma-separated table names (default: every table the pipeline selects on the source)")
    parser.add_argument("--yes", action="store_true",
                        help="upgrade the tables (without it: show what would change, change nothing)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per table on stdout")
    parser.set_defaults(func=_run)


def _table_names(pipeline: Pipeline, tables: list[str] | None) -> list[str]:
    if tables:
        from lakesync.core.errors import ConfigError

        unselected = [name for name in tables if not pipeline.tables.selects(name)]
        if unselected:
            raise ConfigError(f"pipeline {pipeline.name!r} does not select the tables {', '.join(unselected)}",
                              hint="name tables the pipeline streams or settles (its tables: include/exclude)")
        return tables
    from lakesync.core.connections import mysql_connection
    from lakesync.source.schema import selected_tables

    with mysql_connection(pipeline).connect(conn_id=pipeline.source.conn_id) as conn:
        return selected_tables(conn, pipeline)


def _run(args: argparse.Namespace) -> int:
    from lakesync.core.config import load_pipeline
    from lakesync.core.errors import SinkError
    from lakesync.sink.upgrade import read_table_state, upgrade_table

    pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
    options = pipeline.delta.storage_options or None
    plans = [read_table_state(name, pipeline.delta.table_uri(name), options)
             for name in _table_names(pipeline, args.tables)]
    if args.yes and any(plan.steps for plan in plans):
        from lakesync.sink.spark_writes import delta_spark_session

        session = delta_spark_session(options)
        done = []
        for plan in plans:
            if plan.steps:
                print(f"upgrading {plan.table}: {'; '.join(plan.steps)}", file=sys.stderr)
            done.append(upgrade_table(plan, session, options))
        plans = done
    _report(plans, as_json=args.json, applied=args.yes)
    refused = [plan for plan in plans if plan.refused]
    failed = [plan for plan in plans if plan.error is not None]
    if refused or failed:
        existing = sum(plan.exists for plan in plans)
        reasons = [f"{p.table}: delta-spark can't write the columns {', '.join(map(repr, p.refused))}"
                   for p in refused] + [f"{p.table}: {p.error}" for p in failed]
        hints = (["keep delta.writer: delta_rs for this pipeline, or rename those columns at the source and "
                  "re-load the tables"] if refused else []) + (
                 ["fix what the error names and run the command again (it goes on where each table is)"]
                 if failed else [])
        raise SinkError(f"{len(refused) + len(failed)} of {existing} Delta tables are not writable by delta-spark: "
                        + "; ".join(reasons), hint="; ".join(hints))
    return 0


def _report(plans: list[TableUpgrade], *, as_json: bool, applied: bool) -> None:
    if as_json:
        for plan in plans:
            print(json.dumps({"table": plan.table, "uri": plan.uri, "exists": plan.exists,
                              "reader_version": plan.reader_version, "writer_version": plan.writer_version,
                              "deletion_vectors": plan.deletion_vectors, "to_do": plan.steps,
                              "refused_columns": plan.refused, "upgraded": plan.upgraded, "error": plan.error,
                              "changed_before_error": plan.changed_before_error}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Delta tables and delta-spark" + ("" if applied else " (nothing changed: a dry run)"))
    for column in ("table", "protocol", "deletion vectors", "upgrade"):
        table.add_column(column, no_wrap=column == "table")
    for plan in plans:
        protocol = f"reader {plan.reader_version} / writer {plan.writer_version}" if plan.exists else "-"
        table.add_row(plan.table, protocol, ("on" if plan.deletion_vectors else "off") if plan.exists else "-",
                      _upgrade_cell(plan))
    console = Console()
    console.print(table)
    pending = [plan for plan in plans if plan.steps]
    if pending and not applied:
        console.print(f"{len(pending)} table{'s' if len(pending) != 1 else ''} to upgrade: run again with --yes "
                      "(it can't be undone)")


def _upgrade_cell(plan: TableUpgrade) -> str:
    if plan.error:
        state = "after changing the table (see its protocol)" if plan.changed_before_error else "nothing changed"
        return f"failed, {state}: {plan.error}"
    if not plan.exists:
        return "no Delta table yet: skipped"
    if plan.refused:
        return f"refused: delta-spark can't write the columns {', '.join(map(repr, plan.refused))}"
    if plan.upgraded:
        return "upgraded"
    return "; ".join(plan.steps) or "nothing to do"
