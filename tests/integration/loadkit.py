"""Helpers of the full-load tests (``test_full_load.py``, ``test_full_load_delta_spark.py``)."""

from __future__ import annotations

import pymysql
import pytest

from lakesync.core.config import Pipeline
from lakesync.full_load.load import FullLoad


def make_numbers(cur: pymysql.cursors.Cursor, table: str, rows: int) -> None:
    """``table`` (id INT key, v INT NOT NULL) holding ``rows`` rows."""
    cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)")
    cur.execute(f"INSERT INTO {table} SELECT seq, seq * 10 FROM seq_1_to_{rows}")


def load_killed_after_commit(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the load and kill it after each table's Delta commit, before its state file records the table."""
    def killed(self: FullLoad, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(FullLoad, "_finish", killed)
        with pytest.raises(KeyboardInterrupt):
            FullLoad(pipeline).run()
