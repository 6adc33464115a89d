"""A small lab for the bad-input and security suites: one pipeline on a fresh database of the embedded stack.

Each case writes a pipeline file, drives the real full load / relay / stream against it, and afterwards
proves that nothing was written half-way: :func:`delta_state` captures every Delta table's version and rows
(so "unchanged" is one equality), :func:`done_tables` what ``full_load.json`` claims, and
:meth:`Lab.relay_position` how far the relay's stored progress goes.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import yaml
from deltalake import DeltaTable
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.core.positions import SourcePosition
from lakesync.full_load.state import LoadState
from tests.deltakit import delta_table
from tests.oracle import Comparison, assert_tables_match, compare_table

Rows = list[tuple[Any, ...]]

STREAM_DEADLINE_SECONDS = 600


def base_document(name: str, database: str, root: Path) -> dict[str, Any]:
    """A valid pipeline document on the embedded stack, its state under ``root``."""
    server_id = random.randrange(5_000, 60_000)
    return {
        "name": name,
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"bad{server_id}"},
        "delta": {"root": str(root / "delta")},
        "state_dir": str(root / "state"),
    }


def write_pipeline(folder: Path, document: dict[str, Any], *, file_name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{file_name or document['name']}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return path


def delta_state(root: str | Path) -> dict[str, tuple[int, Rows]]:
    """Every Delta table under ``root``: (version, sorted rows). Equal before and after = nothing written."""
    state: dict[str, tuple[int, Rows]] = {}
    folder = Path(root)
    if not folder.exists():
        return state
    for table_dir in sorted(p for p in folder.iterdir() if (p / "_delta_log").is_dir()):
        rows = sorted(tuple(map(repr, row.values())) for row in delta_table(table_dir).to_pylist())
        state[table_dir.name] = (DeltaTable(str(table_dir)).version(), rows)
    return state


def done_tables(pipeline: Pipeline) -> set[str]:
    """Tables ``full_load.json`` claims are loaded."""
    state = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    return {name for name, entry in state.tables.items() if entry.status == "done"}


class Lab:
    """One pipeline (``name``) over ``database``; files live in ``root``."""

    def __init__(self, stack: Any, monkeypatch: Any, root: Path, database: str, *, name: str = "bad") -> None:
        for variable, value in stack.connection_env().items():
            monkeypatch.setenv(variable, value)
        self.stack, self.root, self.database, self.name = stack, root, database, name
        self.pipelines_dir = root / "pipelines"
        self.document = base_document(name, database, root)

    def pipeline(self, **changes: Any) -> Pipeline:
        """Write the document (``changes`` merged into its top level) and load it the way the CLI does."""
        self.document.update(changes)
        write_pipeline(self.pipelines_dir, self.document)
        return load_pipeline(self.name, self.pipelines_dir)

    @property
    def delta_root(self) -> Path:
        return Path(self.document["delta"]["root"])

    def root_sql(self, *statements: str, database: str | None = None) -> None:
        with self.stack.mariadb.connect(database=database or self.database) as conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def compare(self, pipeline: Pipeline, table: str) -> Comparison:
        """The oracle's verdict (tests/oracle.py) on one table: never lakesync's own validate."""
        with self.stack.mariadb.connect(database=self.database) as conn:
            return compare_table(conn, self.database, table, pipeline.delta.table_uri(table))

    def assert_matches(self, pipeline: Pipeline, *tables: str) -> None:
        """The oracle finds each Delta table exactly its source table."""
        with self.stack.mariadb.connect(database=self.database) as conn:
            assert_tables_match(conn, self.database, {t: pipeline.delta.table_uri(t) for t in tables})

    def full_load(self, pipeline: Pipeline, **kwargs: Any) -> Any:
        from lakesync.full_load.load import FullLoad

        return FullLoad(pipeline, **kwargs).run()

    def relay(self, pipeline: Pipeline, **kwargs: Any) -> Any:
        """Relay what the binlog holds now, then stop (non-blocking: no waiting for new events)."""
        from lakesync.relay import Relay

        return Relay(pipeline, heartbeat_seconds=0.3, blocking=False).run(stop_when_idle_seconds=1.0, **kwargs)

    def relay_position(self, pipeline: Pipeline) -> SourcePosition | None:
        from lakesync.relay.offsets import ProgressStore

        stored = ProgressStore.for_pipeline(pipeline).load(timeout=5.0)
        return stored.position if stored else None

    def stream(self, pipeline: Pipeline, spark: Any, **kwargs: Any) -> Any:
        """Stream what Kafka holds now (``--once``). The deadline only ends a hung run, and generously (a loaded
        2-core CI machine streams the 50 MB BLOBs slowly): a run that reached it was stopped part-way, and
        run_stream returns what it applied by then, so that fails here, saying so, not in a later check."""
        from lakesync.stream.app import run_stream

        began = time.monotonic()
        summary = run_stream(pipeline, once=True, spark=spark, timeout_seconds=STREAM_DEADLINE_SECONDS, **kwargs)
        assert time.monotonic() - began < STREAM_DEADLINE_SECONDS, (
            f"the --once stream did not reach the end of Kafka within {STREAM_DEADLINE_SECONDS} s: it was stopped "
            f"part-way ({summary})")
        return summary
