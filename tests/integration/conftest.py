"""Fixtures of the full-load tests (``test_full_load.py``, ``test_full_load_delta_spark.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from lakesync_devkit.dev.stack import MYSQL_CONN_ID

from lakesync.core.config import Pipeline, parse_pipeline


@pytest.fixture
def make_pipeline(stack, fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                  ) -> Callable[..., Pipeline]:
    """A pipeline over ``fresh_database`` read by the least-privilege lakesync user, state in ``tmp_path``."""
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)

    def build(**overrides: Any) -> Pipeline:
        document = {
            "name": "t", "source": {"conn_id": MYSQL_CONN_ID, "database": fresh_database},
            "kafka": {"bootstrap_servers": "127.0.0.1:9", "topic_prefix": "t"},
            "delta": {"root": str(tmp_path / "delta")}, "state_dir": str(tmp_path / "state"),
            **overrides,
        }
        return parse_pipeline(document, source_name="t.yaml")

    return build


@pytest.fixture
def db(mariadb, fresh_database: str) -> Iterator[pymysql.cursors.Cursor]:
    """A root cursor (autocommit) in the fresh database."""
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        yield cur
