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

from lakesync.dev.stack import DevStack

REPO_ROOT = Path(__file__).resolve().parent.parent
# Spark's Python workers must run the venv's interpreter, or they won't find lakesync and its packages.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


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
    from lakesync.spark_session import build_spark_session

    session = build_spark_session("lakesync-tests")
    yield session
    session.stop()
