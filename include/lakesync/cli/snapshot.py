"""``lakesync snapshot``: the full load of a pipeline's tables into Delta, with progress and a summary."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from lakesync.cli.arguments import add_pipeline_arguments, table_list
from lakesync.core.config import load_pipeline

if TYPE_CHECKING:
    from lakesync.full_load.load import TableResult

DESCRIPTION = """\
Load the pipeline's tables into Delta: each table in one Delta commit, every row tagged with the binlog
position P of the load, which is recorded in <state dir>/<pipeline>/full_load.json for the relay and the
stream (they start at or before P).

Modes:
  consistent  one snapshot for all tables and its exact binlog position (MariaDB: no lock; MySQL 8: a brief
              FLUSH TABLES WITH READ LOCK, which needs RELOAD). An interrupted table is read again.
  chunked     key ranges read in parallel without any lock, each tagged with the position read before it;
              the stream's replay from the smallest position repairs what moved. An interrupted table
              keeps the chunks it already wrote.

Running it again resumes: tables already done are skipped (use --restart to load everything again).
A table the stream stopped (a schema change it could not follow) is not done: it is loaded again, and the
stream resumes it from this load's position.
"""


class _RowsPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} rows/s" if speed else "", style="progress.data.speed")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "snapshot", help="full load: the pipeline's tables into Delta, with their binlog position",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pipeline_arguments(parser)
    parser.add_argument("--tables", type=table_list, help="comma-separated tables to load (default: all the pipeline selects)")
    parser.add_argument("--mode", choices=("consistent", "chunked"),
                        help="snapshot mode (default: snapshot.mode of the pipeline)")
    parser.add_argument("--connections", type=int, default=2,
                        help="parallel connections / chunk workers (default 2)")
    parser.add_argument("--restart", action="store_true",
                        help="forget earlier progress and load every table again")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from lakesync.full_load.load import FullLoad  # heavy (pyarrow, Spark glue): only when the command runs

    pipeline = load_pipeline(args.pipeline, args.pipelines_dir)
    tables = args.tables
    console = Console(stderr=True)
    progress = Progress(TextColumn("{task.description:<24}"), BarColumn(), TextColumn("{task.completed:>12,} rows"),
                        _RowsPerSecond(), TimeRemainingColumn(), console=console, transient=False)
    tasks: dict[str, TaskID] = {}

    def on_progress(table: str, rows: int, total: int) -> None:
        if table not in tasks:
            tasks[table] = progress.add_task(table, total=total)
        progress.update(tasks[table], completed=rows, total=total)

    load = FullLoad(pipeline, tables=tables, mode=args.mode, connections=args.connections, restart=args.restart,
                    on_progress=on_progress)
    with progress:
        results = load.run()
        for result in results:
            if result.table in tasks:
                progress.update(tasks[result.table], completed=result.rows, total=result.rows)
    for name, reason in load.stopped_reloaded.items():
        console.print(f"[yellow]{name}[/]: loaded again, as the stream had stopped it ({reason[:300]}); the "
                      "stream resumes it from this load")
    Console().print(summary_table(results, mode=load.mode or ""))
    position = load.state.position
    console.print(f"load position: {position}  (recorded in {load.state.path})")
    return 0


def summary_table(results: list[TableResult], *, mode: str) -> Table:
    table = Table(title=f"full load ({mode})")
    for column, justify in (("table", "left"), ("rows", "right"), ("seconds", "right"), ("rows/s", "right"),
                            ("Delta version", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    table.add_column("position", no_wrap=True)
    for result in results:
        table.add_row(
            result.table + (" (done earlier)" if result.skipped else ""), f"{result.rows:,}",
            f"{result.seconds:.2f}", f"{result.rows_per_second:,.0f}",
            "" if result.delta_version is None else str(result.delta_version), result.position.token(),
        )
    return table
