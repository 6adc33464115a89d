"""Shared fixtures: one embedded stack (real MariaDB, real broker) per test session, and a local Spark.

The stack lives in a temporary state folder and is torn down at the end of the session. Tests create their
own databases (``fresh_database``) so they never see each other's tables.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from lakesync_devkit.dev.stack import DevStack

pytest_plugins = ("tests.tier_budgets", "tests.parallel_workers")

REPO_ROOT = Path(__file__).resolve().parent.parent
# Spark's Python workers must run the venv's interpreter, or they won't find lakesync and its packages.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# Hypothesis budgets, chosen by LAKESYNC_HYPOTHESIS_PROFILE: "ci" (the default) runs few examples, derandomized
# so every run tries the same ones; "thorough" runs many random ones. A failure prints the falsifying example
# and, with print_blob, the line that reproduces it (@reproduce_failure).
settings.register_profile("ci", max_examples=12, stateful_step_count=30, derandomize=True, deadline=None,
                          print_blob=True)
settings.register_profile("thorough", max_examples=300, stateful_step_count=60, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("LAKESYNC_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """The embedded MariaDB and broker, started once for the session and stopped afterwards."""
    dev_stack = DevStack(tmp_path_factory.mktemp("stack"))
    dev_stack.up()
    yield dev_stack
    dev_stack.down()


@pytest.fixture(scope="session")
def mariadb(stack: DevStack):
    return stack.mariadb


@pytest.fixture(scope="session")
def broker(stack: DevStack):
    return stack.broker


@pytest.fixture
def fresh_database(mariadb) -> Iterator[str]:
    """A new, empty database on the embedded server, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    yield name
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="session")
def spark():
    """A local Spark session (2 cores), shared by the session's Spark tests."""
    from lakesync.spark.session import build_spark_session

    session = build_spark_session("lakesync-tests")
    yield session
    session.stop()


@pytest.fixture(params=["delta_rs", "delta_spark"])
def writer(request):
    """The sink class of each ``delta.writer``: delta-rs's, and delta-spark's (in the shared Spark session)."""
    from lakesync.sink import DeltaSink
    from lakesync.sink.spark_writes import SparkDeltaSink

    if request.param == "delta_spark":
        request.getfixturevalue("spark")  # the sink opens a session of the running one
        return SparkDeltaSink
    return DeltaSink


# -- exit guard ---------------------------------------------------------------------------------------------
# At interpreter shutdown, Arrow C++ tears down its thread pools; a pool thread still inside Python (reading
# a Delta table through pyarrow's Python filesystem, as deltalake's to_pyarrow_table does) makes libstdc++
# abort with "terminate called without an active exception" (exit 134) after every test has passed
# (apache/arrow#36980, delta-io/delta-rs#2184; docs/sink.md). lakesync's own code reads with
# DeltaTable.scan(), but the guard makes sure such an abort can never change pytest's verdict: once pytest
# has decided its exit status, the process leaves with exactly that status, skipping interpreter teardown.
_exit_status: list[int] = []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(session.exitstatus))  # as the other hooks left it (tests/tier_budgets.py may fail it)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _exit_status and os.environ.get("LAKESYNC_PYTEST_EXIT_GUARD", "1") == "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[0])
