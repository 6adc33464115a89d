"""``lakesync demo run``: the whole data path on the embedded stack, start to finish, with a report.

1. start the embedded stack (MariaDB, broker, Airflow home) and recreate the demo bank database;
2. start the relay (binlog -> broker) as its own process, as it runs in production;
3. full load: Airflow's ``lakesync_demo_full_load`` DAG (source check, spark-submit full load, handoff,
   stream, wait until caught up, validation) -- or, with ``airflow=False``, the same library calls in-process;
4. a burst of inserts, updates and deletes on the source while the relay runs;
5. the stream: Airflow's ``lakesync_demo_stream`` DAG (spark-submit, availableNow) merges it all into Delta;
6. validation: every Delta table compared with its source table, row for row; the run is recorded.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.core.errors import LakesyncError
from lakesync.validation.report import TableComparison
from lakesync_devkit.cli.dev import ensure_demo_database
from lakesync_devkit.demo.database import create_demo_database, seed_demo_data
from lakesync_devkit.demo.load import run_load
from lakesync_devkit.dev.stack import DevStack

DEMO_PIPELINE = "demo"
CATCH_UP_TIMEOUT_S = 120


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

    def run(self, title: str, work: Callable[[], str | None]) -> None:
        started = time.monotonic()
        with self.console.status(f"{title}..."):
            detail = work() or ""
        seconds = time.monotonic() - started
        self.report.steps.append((title, seconds, detail))
        self.console.print(f"[green]✓[/green] {title} [dim]({seconds:.1f}s)[/dim] {detail}")


def reset_demo(stack: DevStack, pipeline: Pipeline) -> None:
    """A clean slate: demo database recreated, the pipeline's Delta tables and state removed."""
    for folder in (pipeline.pipeline_state_dir, Path(pipeline.delta.root)):
        shutil.rmtree(folder, ignore_errors=True)
    with stack.mariadb.connect() as conn:
        create_demo_database(conn, stack.settings.demo_database, replace=True)
        seed_demo_data(conn, stack.settings.demo_database)


class RelayProcess:
    """``lakesync relay --pipeline demo`` in the background, its output in the state folder."""

    def __init__(self, stack: DevStack, log_file: Path) -> None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file = log_file
        with open(log_file, "ab") as log:
            self.process = subprocess.Popen(  # argv is ours, never a shell
                [sys.executable, "-m", "lakesync.cli.main", "relay", "--pipeline", DEMO_PIPELINE],
                env={**os.environ, **stack.connection_env()}, stdout=log, stderr=subprocess.STDOUT,
            )

    def check(self) -> None:
        if self.process.poll() is not None:
            tail = "\n    ".join(self.log_file.read_text(errors="replace").splitlines()[-10:])
            raise LakesyncError(f"the relay stopped (exit {self.process.returncode}):\n    {tail}",
                                hint=f"its whole log is {self.log_file}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _wait_for_relay(pipeline: Pipeline, stack: DevStack, relay: RelayProcess) -> str:
    from lakesync.relay import covered_range
    from lakesync.source.server_checks import current_position

    with stack.mariadb.connect() as conn:
        target = current_position(conn)
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while (covered := covered_range(pipeline)) is None or covered[1] < target.key():
        relay.check()
        if time.monotonic() > deadline:
            raise LakesyncError(f"the relay did not reach {target} within {CATCH_UP_TIMEOUT_S}s (it covers {covered})",
                                hint=f"see {relay.log_file}")
        time.sleep(0.5)
    return f"published up to {target}"


class _Airflow:
    """DAG runs through Airflow (``dag.test()`` in a child process with the stack's Airflow home)."""

    def __init__(self, stack: DevStack) -> None:
        from lakesync_devkit.dev.airflow_runner import AirflowRunner

        self.logs = stack.state_dir / "logs"
        self.runner = AirflowRunner(stack.airflow_home, connections=stack.connection_env(),
                                    pipelines_dir=Path(os.environ.get("LAKESYNC_PIPELINES_DIR", "include/pipelines")),
                                    api_port=stack.settings.airflow_port)

    def run_dag(self, dag_id: str) -> str:
        logical_date = datetime.now(UTC).isoformat()
        log_file = self.logs / f"{dag_id}.log"
        (run,) = self.runner.dag_test(dag_id, logical_date, log_file=log_file)
        tasks = run["tasks"]
        if run["state"] != "success":
            failed = [task for task, state in tasks.items() if state != "success"]
            raise LakesyncError(f"DAG run {dag_id} ended {run['state']}: tasks {failed} did not succeed",
                                hint=f"Airflow's log of the run: {log_file}")
        return f"DAG {dag_id}: all {len(tasks)} tasks succeeded ({', '.join(sorted(tasks))})"


def run_demo(state_dir: str | None = None, *, rate: float = 200, seconds: float = 5, fresh: bool = True,
             airflow: bool = True, console: Console | None = None, log_stderr: bool = False) -> DemoReport:
    """Run the demo end to end; lakesync's log lines go to ``<state dir>/logs/demo.log`` (and to stderr too
    with ``log_stderr``), so they don't interleave with the report."""
    stack = DevStack(state_dir)
    with log_to_file(stack.state_dir / "logs" / "demo.log", keep_stderr=log_stderr):
        return _run_demo(stack, rate=rate, seconds=seconds, fresh=fresh, airflow=airflow, console=console)


@contextmanager
def log_to_file(path: Path, *, keep_stderr: bool) -> Iterator[None]:
    """Send the root logger's records to ``path`` (instead of, or besides, its handlers) while inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    saved = list(root.handlers)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.handlers = [*saved, handler] if keep_stderr else [handler]
    try:
        yield
    finally:
        root.handlers = saved
        handler.close()


def _run_demo(stack: DevStack, *, rate: float, seconds: float, fresh: bool, airflow: bool,
              console: Console | None) -> DemoReport:
    from lakesync.full_load.load import FullLoad
    from lakesync.stream.app import run_stream
    from lakesync.validation.validate import validate_pipeline

    console = console or Console(stderr=True)
    report = DemoReport()
    steps = _Steps(console, report)
    steps.run("embedded stack up (MariaDB, broker, Airflow home)", lambda: stack.up() or f"state in {stack.state_dir}")
    os.environ.update(stack.connection_env())
    pipeline = load_pipeline(DEMO_PIPELINE)
    database = stack.settings.demo_database
    orchestrator = _Airflow(stack) if airflow else None

    def prepare() -> str:
        if fresh:
            reset_demo(stack, pipeline)
        else:
            ensure_demo_database(stack)
        return f"database {database!r}"

    steps.run("demo bank database", prepare)
    relay = RelayProcess(stack, stack.state_dir / "logs" / "relay.log")
    try:
        steps.run("relay started (binlog -> broker)", lambda: f"pid {relay.process.pid}, log {relay.log_file}")

        def full_load() -> str:
            if orchestrator:
                return orchestrator.run_dag(f"lakesync_{DEMO_PIPELINE}_full_load")
            results = FullLoad(pipeline=pipeline).run()
            return f"{len(results)} tables, {sum(r.rows for r in results)} rows"

        steps.run("full load (consistent snapshot -> Delta), handoff to the stream", full_load)

        def burst() -> str:
            with stack.mariadb.connect(autocommit=False) as conn:
                return run_load(conn, database, rate=rate, seconds=seconds).summary()

        steps.run(f"burst of changes on the source (target {rate:.0f} transactions/s for {seconds:.0f}s)", burst)
        steps.run("relay caught up", lambda: _wait_for_relay(pipeline, stack, relay))

        def stream() -> str:
            if orchestrator:
                return orchestrator.run_dag(f"lakesync_{DEMO_PIPELINE}_stream")
            return f"{run_stream(pipeline, once=True).changes} changes applied"

        steps.run("stream (broker -> Delta MERGE, availableNow)", stream)
    finally:
        relay.stop()

    def validate() -> str:
        validation = validate_pipeline(pipeline)
        report.comparisons = validation.tables
        return f"run {validation.run_id}: " + ("identical" if report.matches else "DIFFERENCES FOUND")

    steps.run("validation (source vs Delta, row by row)", validate)
    print_report(report, Console(), stack)
    return report


def print_report(report: DemoReport, console: Console, stack: DevStack) -> None:
    table = Table(title="demo pipeline: source vs Delta")
    for column in ("table", "source rows", "Delta rows", "result"):
        table.add_column(column, justify="right" if "rows" in column else "left")
    for comparison in report.comparisons:
        style = "green" if comparison.matches else "red"
        if not comparison.comparable:
            style = "yellow"
        table.add_row(comparison.table, str(comparison.source_rows), str(comparison.delta_rows),
                      f"[{style}]{comparison.describe()}[/{style}]")
    console.print(table)
    total = sum(seconds for _, seconds, _ in report.steps)
    verdict = "[green]Delta matches the source.[/green]" if report.matches else "[red]Delta differs from the source.[/red]"
    console.print(f"{verdict} Whole run: {total:.1f}s. Delta tables: {stack.delta_root / DEMO_PIPELINE}")
    console.print(f"Log: {stack.state_dir / 'logs' / 'demo.log'}")
    console.print(f"Next: [bold]source {stack.env_file}[/bold], then `lakesync status --pipeline demo`, or "
                  f"`airflow standalone` and open http://127.0.0.1:{stack.settings.airflow_port} (DAGs and the "
                  "lakesync status view).")
