"""Things that happen to a running pipeline: TRUNCATE, a dropped table, a primary-key change, DDL lakesync
can't read, another writer changing a Delta table, and the table's topic deleted under the stream.

A table the stream can't follow stops at the statement, with the re-snapshot command, and holds exactly the
rows up to it; the other tables go on. The relay refuses DDL it can't read and keeps its progress at the
last transaction before it.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from lakesync.core.errors import GapError, LakesyncError, ValidationMismatch
from lakesync.monitoring.status import pipeline_status
from lakesync.source.server_checks import current_position
from lakesync.stream.progress import StreamProgress
from lakesync.validation.validate import validate_pipeline
from tests.bad_input.badkit import Lab, delta_state
from tests.deltakit import delta_rows

pytestmark = [pytest.mark.bad_input, pytest.mark.integration]

TABLES = ("t_trunc", "t_pk", "t_drop", "t_keep")


@pytest.fixture
def lab(stack, monkeypatch, tmp_path, fresh_database) -> Lab:
    lab = Lab(stack, monkeypatch, tmp_path, fresh_database)
    for table in TABLES:
        lab.root_sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, note VARCHAR(20) NOT NULL)",
                     f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    return lab


def _ids(lab: Lab, table: str) -> list[int]:
    return [row["id"] for row in delta_rows(lab.delta_root / table, ["id"])]


def test_truncate_drop_and_primary_key_change_stop_their_tables_and_the_others_go_on(lab, spark):
    pipeline = lab.pipeline(stream={"reload_on_schema_change": False})  # the stop path, not the re-load
    lab.full_load(pipeline)
    lab.root_sql(
        "INSERT INTO t_trunc VALUES (3, 'c')", "TRUNCATE TABLE t_trunc", "INSERT INTO t_trunc VALUES (9, 'z')",
        "INSERT INTO t_pk VALUES (3, 'c')", "ALTER TABLE t_pk DROP PRIMARY KEY, ADD PRIMARY KEY (id, note)",
        "INSERT INTO t_pk VALUES (1, 'again')",
        "INSERT INTO t_drop VALUES (3, 'c')", "DROP TABLE t_drop",
        "INSERT INTO t_keep VALUES (3, 'c')",
    )
    lab.relay(pipeline)
    lab.stream(pipeline, spark)

    stopped = {name: p.stopped_reason for name, p in StreamProgress.load(pipeline.pipeline_state_dir).tables.items()}
    assert "truncate on the source" in stopped["t_trunc"]
    assert "the primary key was changed" in stopped["t_pk"]
    assert "drop table on the source" in stopped["t_drop"]
    for table in ("t_trunc", "t_pk", "t_drop"):
        assert f"lakesync snapshot --pipeline {pipeline.name} --tables {table}" in stopped[table]
        assert _ids(lab, table) == [1, 2, 3], f"{table} holds exactly the rows before the statement"
    assert stopped.get("t_keep") is None and _ids(lab, "t_keep") == [1, 2, 3]
    shown = {t["table"]: t["stream"] for t in pipeline_status(pipeline, relay=False)["tables"]}
    assert "truncate" in shown["t_trunc"]["stopped_reason"] and shown["t_keep"]["stopped_reason"] is None


def test_ddl_the_relay_cannot_read_stops_only_that_table_never_the_relay(lab, spark):
    pipeline = lab.pipeline(stream={"reload_on_schema_change": False})
    lab.full_load(pipeline)
    lab.root_sql("INSERT INTO t_keep VALUES (4, 'd')")
    lab.root_sql("ALTER TABLE t_keep ADD COLUMN (a INT NULL, b INT NULL)")
    after = current_position(lab.stack.mariadb.connect())
    lab.root_sql("INSERT INTO t_keep VALUES (5, 'e', 1, 2)")
    lab.relay(pipeline)  # no error: the relay goes on past the statement
    stored = lab.relay_position(pipeline)
    assert stored is not None and stored > after
    lab.stream(pipeline, spark)
    reason = StreamProgress.load(pipeline.pipeline_state_dir).tables["t_keep"].stopped_reason
    assert "cannot interpret" in reason and "ADD COLUMN (a INT NULL" in reason
    assert f"lakesync snapshot --pipeline {pipeline.name} --tables t_keep" in reason
    assert _ids(lab, "t_keep") == [1, 2, 4], "changes before the statement are applied, none after it"


def test_another_writer_is_caught_by_validate_and_a_deleted_topic_by_the_stream(lab, spark):
    pipeline = lab.pipeline()
    lab.full_load(pipeline)
    lab.root_sql("INSERT INTO t_keep VALUES (3, 'c')")
    lab.relay(pipeline)
    lab.stream(pipeline, spark)

    other = DeltaTable(str(lab.delta_root / "t_keep"))
    other.delete("id = 1")
    other.update(updates={"note": "'edited'"}, predicate="id = 2")
    truth = lab.compare(pipeline, "t_keep")
    assert truth.missing_in_delta == [(1,)] and set(truth.differing) == {(2,)}, truth.describe()
    report = validate_pipeline(pipeline, tables=["t_keep"], settle_timeout_s=5, rounds=2, store=False)
    (result,) = report.tables
    assert result.status == "mismatch" and result.mismatched_keys == 2
    assert [k["id"] for k in result.missing_in_delta] == [1] and [k["id"] for k in result.different] == [2]
    assert {(k["id"],) for k in [*result.missing_in_delta, *result.different]} == truth.differing_keys()
    with pytest.raises(ValidationMismatch) as caught:
        report.raise_for_mismatch()
    assert "t_keep" in str(caught.value) and caught.value.exit_code == 3

    admin = AdminClient({"bootstrap.servers": lab.stack.broker.bootstrap})
    admin.delete_topics([pipeline.topic("t_keep")], operation_timeout=10)[pipeline.topic("t_keep")].result(15)
    lab.root_sql("INSERT INTO t_keep VALUES (4, 'd')", "INSERT INTO t_keep VALUES (5, 'e')")
    # The relay recreates the topic; its new log (2 records) reaches past the stream's checkpoint (offset 1),
    # so offsets alone would let the stream resume at offset 1 and silently skip row 4.
    lab.relay(pipeline)
    before = delta_state(lab.delta_root)
    with pytest.raises(LakesyncError) as caught:
        lab.stream(pipeline, spark)
    text = str(caught.value)
    assert isinstance(caught.value, GapError), text
    assert pipeline.topic("t_keep") in text and f"lakesync recover --pipeline {pipeline.name}" in text, text
    assert delta_state(lab.delta_root) == before, "nothing applied from a log that lost data"
