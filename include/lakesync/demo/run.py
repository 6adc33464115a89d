"""``lakesync demo run``: the whole data path on the embedded stack, start to finish, with a report.

1. start the embedded stack and (re)create the demo bank database;
2. full load: every table read from one consistent snapshot, one Delta commit each, position P recorded;
3. relay: binlog -> broker, from P;
4. a burst of inserts, updates and deletes on the source while the relay runs;
5. the stream (availableNow) merges everything the relay published into Delta;
6. validation: each Delta table compared with its source table, row for row.

Every step calls the same library code the Airflow DAGs and the CLI use.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from lakesync.cli.dev import ensure_demo_database
from lakesync.config import Pipeline, load_pipeline
from lakesync.demo.database import create_demo_database, seed_demo_data
from lakesync.demo.load import run_load
from lakesync.dev.stack import DevStack
from lakesync.errors import LakesyncError
from lakesync.validate import TableComparison

DEMO_PIPELINE = "demo"


@dataclass
class DemoReport:
    steps: list[tuple[str, float, str]] = field(default_factory=list)
    comparisons: list[TableComparison] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        """Every table with a key is identical to its source (and at least one was compared)."""
        compared = [c for c in self.comparisons if c.comparable]
        return bool(compared) and all(c.matches for c in compared)


class _Steps:
    """Times each step and prints it as it finishes."""

    def __init__(self, console: Console, report: DemoReport) -> None:
        self.console, self.report = console, report

    def run(self, title: str, work):
        started = time.monotonic()
        with self.console.status(f"{title}..."):
            detail = work()
        seconds = time.monotonic() - started
        self.report.steps.append((title, seconds, detail or ""))
        self.console.print(f"[green]✓[/green] {title} [dim]({seconds:.1f}s)[/dim] {detail or ''}")


def reset_demo(stack: DevStack, pipeline: Pipeline) -> None:
    """A clean slate: demo database recreated, the pipeline's Delta tables and state removed."""
    for folder in (pipeline.pipeline_state_dir, stack.delta_root / DEMO_PIPELINE):
        shutil.rmtree(folder, ignore_errors=True)
    with stack.mariadb.connect() as conn:
        create_demo_database(conn, stack.settings.demo_database, replace=True)
        seed_demo_data(conn, stack.settings.demo_database)


def run_demo(state_dir: str | None = None, *, rate: float = 200, seconds: float = 5, fresh: bool = True,
             console: Console | None = None) -> DemoReport:
    from lakesync.full_load import FullLoad
    from lakesync.relay import Relay, covered_range
    from lakesync.source.server_checks import current_position
    from lakesync.stream.app import run_stream
    from lakesync.validate import compare_tables, read_delta_table, read_source_table

    console = console or Console(stderr=True)
    report = DemoReport()
    steps = _Steps(console, report)
    stack = DevStack(state_dir)
    steps.run("embedded stack up (MariaDB, broker)", lambda: stack.up() or f"state in {stack.state_dir}")
    os.environ.update(stack.connection_env())
    pipeline = load_pipeline(DEMO_PIPELINE)
    database = stack.settings.demo_database

    def prepare() -> str:
        if fresh:
            reset_demo(stack, pipeline)
        else:
            ensure_demo_database(stack)
        return f"database {database!r}"

    steps.run("demo bank database", prepare)

    def full_load() -> str:
        results = FullLoad(pipeline=pipeline).run()
        rows = sum(r.rows for r in results)
        return f"{len(results)} tables, {rows} rows, position {results[0].position}" if results else "nothing to load"

    steps.run("full load (consistent snapshot -> Delta)", full_load)

    relay = Relay(pipeline)
    relay_errors: list[BaseException] = []

    def relay_main() -> None:
        try:
            relay.run()
        except BaseException as exc:  # reported below, after the thread is joined
            relay_errors.append(exc)

    relay_thread = threading.Thread(target=relay_main, name="lakesync-relay", daemon=True)
    relay_thread.start()
    try:
        def burst() -> str:
            with stack.mariadb.connect(autocommit=False) as conn:
                return run_load(conn, database, rate=rate, seconds=seconds).summary()

        steps.run(f"burst of changes on the source ({rate:.0f}/s for {seconds:.0f}s)", burst)

        def relay_catch_up() -> str:
            with stack.mariadb.connect() as conn:
                target = current_position(conn)
            deadline = time.monotonic() + 120
            while (covered := covered_range(pipeline)) is None or covered[1] < target.key():
                if relay_errors:
                    raise relay_errors[0]
                if time.monotonic() > deadline:
                    raise LakesyncError(f"the relay did not reach {target} within 120s (it covers {covered})")
                time.sleep(0.5)
            return f"published up to {target}"

        steps.run("relay caught up (binlog -> broker)", relay_catch_up)
        steps.run("stream (broker -> Delta MERGE, availableNow)",
                  lambda: f"{run_stream(pipeline, once=True).changes} changes applied")
    finally:
        relay.stop()
        relay_thread.join(timeout=30)

    def validate() -> str:
        from lakesync.stream.app import streamed_tables

        with stack.mariadb.connect() as conn:
            for table in streamed_tables(pipeline):
                source = read_source_table(conn, database, table.name)
                delta = read_delta_table(table.uri)
                key = table.key_columns if table.semantics == "exactly_once" else []
                report.comparisons.append(compare_tables(table.name, source, delta, key))
        return "identical" if report.matches else "DIFFERENCES FOUND"

    steps.run("validation (source vs Delta, row by row)", validate)
    print_report(report, Console())
    return report


def print_report(report: DemoReport, console: Console) -> None:
    table = Table(title="demo pipeline: source vs Delta")
    for column in ("table", "source rows", "Delta rows", "result"):
        table.add_column(column, justify="right" if "rows" in column else "left")
    for comparison in report.comparisons:
        style = "green" if comparison.matches else "red"
        table.add_row(comparison.table, str(comparison.source_rows), str(comparison.delta_rows),
                      f"[{style}]{comparison.describe()}[/{style}]")
    console.print(table)
    total = sum(seconds for _, seconds, _ in report.steps)
    verdict = "[green]Delta matches the source.[/green]" if report.matches else "[red]Delta differs from the source.[/red]"
    console.print(f"{verdict} Whole run: {total:.1f}s.")
