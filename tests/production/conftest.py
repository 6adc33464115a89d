"""The production shape, started once per test session: a Spark standalone cluster, Airflow's four services on
PostgreSQL with the LocalExecutor, the demo pipeline's Delta tables on an S3 endpoint (moto), and the relay.

The tests drive it as a team would: DAG runs through Airflow's REST API, backfills through the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from lakesync_devkit.cli.dev import ensure_demo_database
from lakesync_devkit.dev.production import ProductionStack

from tests.oracle import Comparison, compare_table

#: The demo tables merged by key; ``audit_log`` has no key and is an append-only change log by design.
KEYED_TABLES = ("customers", "accounts", "transactions", "daily_balances")


@pytest.fixture(scope="session")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProductionStack]:
    stack = ProductionStack(tmp_path_factory.mktemp("production"))
    started = time.monotonic()
    try:
        stack.up()
        ensure_demo_database(stack)
        stack.start_relay()
        print(f"production shape up in {time.monotonic() - started:.1f}s")
        yield stack
    finally:
        stack.down()


def airflow_cli(stack: ProductionStack, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """An ``airflow`` command with the shape's environment (the CLI a team uses beside the UI)."""
    return subprocess.run([sys.executable, "-m", "airflow", *args], env={**os.environ, **stack.airflow_env()},
                          capture_output=True, text=True, timeout=timeout, check=False)


def lakesync_cli(stack: ProductionStack, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **stack.airflow_env()}
    return subprocess.run([sys.executable, "-m", "lakesync.cli.main", *args, "--pipelines-dir",
                           str(stack.pipelines_dir)], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def compare_keyed_tables(stack: ProductionStack) -> list[Comparison]:
    """The independent oracle over every keyed demo table, reading Delta from the object store."""
    with stack.mariadb.connect() as conn:
        return [compare_table(conn, stack.settings.demo_database, table, f"{stack.delta_root}/{table}",
                              storage_options=stack.storage_options()) for table in KEYED_TABLES]


def assert_delta_equals_source(stack: ProductionStack) -> None:
    differing = [c.describe() for c in compare_keyed_tables(stack) if not c.identical]
    assert not differing, "\n".join(differing)


def run_dag(stack: ProductionStack, dag_id: str, *, conf: dict | None = None, timeout: float = 600) -> dict[str, str]:
    """Trigger ``dag_id`` through the REST API (the UI's trigger button) and wait; returns the task states."""
    api = stack.airflow.api
    api.wait_for_dag(dag_id)
    api.unpause(dag_id)
    run_id = api.trigger(dag_id, conf=conf)
    state = api.wait_for_run(dag_id, run_id, timeout=timeout)
    tasks = api.task_states(dag_id, run_id)
    assert state == "success", f"{dag_id} run {run_id} ended {state}: {tasks}"
    return tasks


def pipeline_env(stack: ProductionStack) -> dict[str, str]:
    """The variables the demo pipeline file refers to (connections, S3 settings, state folder)."""
    return {**stack.connection_env(), **stack.s3_env()}


def wait_for_relay(stack: ProductionStack, *, timeout: float = 120) -> None:
    """Until the relay has published everything the source has written so far."""
    from lakesync.core.config import load_pipeline_file
    from lakesync.relay import covered_range
    from lakesync.source.server_checks import current_position

    saved = dict(os.environ)
    os.environ.update(pipeline_env(stack))
    try:
        pipeline = load_pipeline_file(stack.pipelines_dir / "demo.yaml")
        with stack.mariadb.connect() as conn:
            target = current_position(conn).key()
        deadline = time.monotonic() + timeout
        while (covered := covered_range(pipeline)) is None or covered[1] < target:
            assert stack.relay.is_running(), stack.relay.log_file.read_text()[-2000:]
            assert time.monotonic() < deadline, f"the relay did not reach {target} (it covers {covered})"
            time.sleep(0.5)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def loaded(production: ProductionStack) -> ProductionStack:
    """The demo tables fully loaded (by the full-load DAG, unless an earlier test already ran it)."""
    import json

    state_file = production.home / "pipelines" / "demo" / "full_load.json"
    finished = state_file.exists() and json.loads(state_file.read_text()).get("finished_at")
    if not finished:
        run_dag(production, "lakesync_demo_full_load", conf={"mode": "chunked"}, timeout=900)
    return production
