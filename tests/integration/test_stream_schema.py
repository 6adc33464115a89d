"""Schema changes and per-table semantics through the whole stream: MariaDB -> relay -> broker -> Spark -> Delta.

One scenario, run once for the module (Spark and the relay are the expensive parts), with one table per
behaviour: ``evolving`` gets an ADD COLUMN mid-stream; ``truncated`` and ``retyped`` get DDL Delta can't
follow; ``steady`` only gets row changes and must go on regardless; ``events_log`` has no key.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from deltalake import DeltaTable
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.full_load.load import FullLoad
from lakesync.relay import Relay
from lakesync.sink import DeltaSink
from lakesync.stream.app import run_stream
from lakesync.stream.progress import StreamProgress
from tests.deltakit import delta_table, source_arrow
from tests.oracle import compare_table

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TABLES = [
    "CREATE TABLE evolving (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL)",
    "CREATE TABLE truncated (id INT PRIMARY KEY, v INT NOT NULL)",
    "CREATE TABLE retyped (id INT PRIMARY KEY, amount DECIMAL(10,2) NOT NULL)",
    "CREATE TABLE steady (id INT PRIMARY KEY, v INT NOT NULL)",
    "CREATE TABLE events_log (msg VARCHAR(20) NOT NULL, n INT NOT NULL)",
]
SEED = [f"INSERT INTO {t} VALUES (1, {v}), (2, {v})" for t, v in
        [("evolving", "'one'"), ("truncated", "10"), ("retyped", "1.50"), ("steady", "100")]]
SEED.append("INSERT INTO events_log VALUES ('loaded', 0)")

BEFORE_DDL = [
    "INSERT INTO evolving VALUES (3, 'before ddl')",
    "UPDATE steady SET v = 101 WHERE id = 1",
    "INSERT INTO events_log VALUES ('a', 1)",
    "UPDATE events_log SET n = 2 WHERE msg = 'a'",
]
WITH_DDL = [
    "UPDATE truncated SET v = 11 WHERE id = 1",          # before the TRUNCATE, in the same batch: applied
    "ALTER TABLE evolving ADD COLUMN note VARCHAR(30) NULL",
    "INSERT INTO evolving VALUES (4, 'after ddl', 'a note')",
    "UPDATE evolving SET note = 'noted later' WHERE id = 1",
    "TRUNCATE TABLE truncated",
    "INSERT INTO truncated VALUES (5, 50)",                # after the TRUNCATE: never applied
    "ALTER TABLE retyped MODIFY COLUMN amount VARCHAR(20) NOT NULL",
    "UPDATE retyped SET amount = 'n/a' WHERE id = 1",
    "INSERT INTO steady VALUES (3, 300)",
    "DELETE FROM events_log WHERE msg = 'loaded'",
]
AFTER_STOP = [
    "INSERT INTO steady VALUES (4, 400)",
    "INSERT INTO truncated VALUES (6, 60)",
    "INSERT INTO evolving VALUES (5, 'later', 'still going')",
]


@dataclass
class Scenario:
    pipeline: Pipeline
    mariadb: Any
    progress: StreamProgress

    def source(self, table: str):
        with self.mariadb.connect() as conn:
            return source_arrow(conn, self.pipeline.source.database, table)

    def delta(self, table: str):
        return delta_table(self.pipeline.delta.table_uri(table), lakesync_columns=False)

    def compare(self, table: str):
        """The oracle's verdict (tests/oracle.py) on one table."""
        with self.mariadb.connect() as conn:
            return compare_table(conn, self.pipeline.source.database, table, self.pipeline.delta.table_uri(table))

    def rows(self, table: str) -> list[dict[str, Any]]:
        sink = DeltaSink(self.pipeline.delta.table_uri(table), key_columns=[], semantics="append_log")
        return sink.scan().read_all().to_pylist()


def _execute(conn, statements: list[str]) -> None:
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


@pytest.fixture(scope="module")
def scenario(stack, mariadb, spark, tmp_path_factory) -> Iterator[Scenario]:
    """The DDL scenario, streamed with the default decode (Spark SQL): a DDL in the middle of a batch sends the
    records it can't type with the old schema the Python way, as the Python decode always did."""
    folder = tmp_path_factory.mktemp("stream_schema")
    database = f"t_{uuid.uuid4().hex[:10]}"
    server_id = random.randrange(5_000, 60_000)
    document = {
        "name": "evolving",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "tables": {"overrides": {"events_log": {"semantics": "append_log"}}},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"ss{server_id}{uuid.uuid4().hex[:6]}"},
        "delta": {"root": str(folder / "delta")},
        "state_dir": str(folder / "state"),
        # the stop path; test_stream_ddl_matrix.py has the re-loads
        "stream": {"reload_on_schema_change": False},
    }
    (folder / "evolving.yaml").write_text(yaml.safe_dump(document))
    with pytest.MonkeyPatch.context() as patch, mariadb.connect() as conn:
        for name, value in stack.connection_env().items():
            patch.setenv(name, value)
        _execute(conn, [f"CREATE DATABASE `{database}`", f"USE `{database}`", *TABLES, *SEED])
        pipeline = load_pipeline("evolving", folder)
        FullLoad(pipeline=pipeline).run()
        try:
            for statements in (BEFORE_DDL, WITH_DDL, AFTER_STOP):
                _execute(conn, statements)
                Relay(pipeline, heartbeat_seconds=0.3).run(stop_when_idle_seconds=1.0)
                run_stream(pipeline, once=True, spark=spark)
            yield Scenario(pipeline, mariadb, StreamProgress.load(pipeline.pipeline_state_dir))
        finally:
            _execute(conn, [f"DROP DATABASE IF EXISTS `{database}`"])


def test_add_column_mid_stream_lands_with_values_for_rows_after_the_ddl(scenario):
    delta = scenario.delta("evolving")
    assert "note" in delta.column_names
    comparison = scenario.compare("evolving")
    assert comparison.identical, comparison.describe()
    notes = {row["id"]: row["note"] for row in delta.to_pylist()}
    assert notes == {1: "noted later", 2: None, 3: None, 4: "a note", 5: "still going"}


@pytest.mark.parametrize(("table", "says"), [("truncated", "truncate"), ("retyped", "changed type")])
def test_ddl_delta_cannot_follow_stops_only_that_table_and_says_what_to_do(scenario, table, says):
    reason = scenario.progress.tables[table].stopped_reason
    assert reason and says in reason and "re-run the full load" in reason and table in reason
    ids = sorted(row["id"] for row in scenario.delta(table).to_pylist())
    assert ids == [1, 2], "nothing after the DDL may be applied"
    if table == "truncated":
        rows = {row["id"]: row for row in scenario.delta(table).to_pylist()}
        assert rows[1] == {"id": 1, "v": 11}, "changes before the DDL are applied"
    for going_on in ("steady", "evolving"):
        assert scenario.progress.tables[going_on].stopped_reason is None
    comparison = scenario.compare("steady")
    assert comparison.identical, comparison.describe()
    assert scenario.source("steady").num_rows == 4, "the last insert on steady came after the other table stopped"


def test_keyless_table_gets_one_change_log_row_per_change_with_op_and_position(scenario):
    log = sorted(scenario.rows("events_log"), key=lambda row: row["_lakesync_pos"])
    assert [(row["msg"], row["n"], row["_lakesync_op"]) for row in log] == [
        ("loaded", 0, "r"), ("a", 1, "c"), ("a", 2, "u"), ("loaded", 0, "d")]
    positions = [row["_lakesync_pos"] for row in log]
    assert len(set(positions)) == len(positions), "every change has its own position"
    assert DeltaTable(scenario.pipeline.delta.table_uri("events_log")).version() >= 1
