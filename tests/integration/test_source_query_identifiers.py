"""Settlement and validation read tables whose names hold ``%``, backticks and quotes.

PyMySQL formats a statement run with parameters with Python's ``%`` operator, so a ``%`` in a quoted name of
SQL text run with parameters must be doubled, and one in SQL run without must not: the source SELECTs are
built by :mod:`lakesync.source.queries` for exactly that. Delta's verdict comes from the oracle
(``tests/oracle.py``); ``validate`` is what is under test in the second half.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import write_deltalake

from lakesync.core.config import parse_pipeline
from lakesync.settlement.sync import settle_table, validate_interval
from lakesync.validation.validate import validate_pipeline
from tests.deltakit import delta_table
from tests.oracle import compare_table
from tests.oracle import quote_identifier as q

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)
NOV_20 = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
#: ``%s`` takes a parameter's place and ``%d``/``%(`` fail outright if PyMySQL formats the text unescaped.
PERCENT = "fee%s 100%d"
QUOTES = "le`dger 'q\" %("
ID, AMOUNT, NOTE, STAMP, WATERMARK = "id %s", "amount %d", "no`te 'q\"", "stamp%(x)s", "upd%ated `at'"


@pytest.fixture
def pipeline(stack, fresh_database, tmp_path, monkeypatch, mariadb):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    with mariadb.connect() as conn, conn.cursor() as cur:
        for table in (PERCENT, QUOTES):
            cur.execute(
                f"CREATE TABLE {q(fresh_database)}.{q(table)} ({q(ID)} BIGINT PRIMARY KEY, {q(AMOUNT)} DECIMAL(18,2),"
                f" {q(NOTE)} VARCHAR(40), {q(STAMP)} TIMESTAMP(6) NULL, ratio FLOAT, {q(WATERMARK)} DATETIME(6))"
            )
            cur.executemany(
                # the test's own statement with parameters doubles the name's % (the rule under test)
                f"INSERT INTO {q(fresh_database)}.{q(table).replace('%', '%%')} VALUES (%s, %s, %s, %s, %s, %s)",
                [(i, f"{i}.05", f"100% 'n' \"{i}\" `", "2026-11-19 12:00:00.000001", i / 3,
                  f"2026-11-19 {2 + i % 9:02d}:00:00.{i:06d}") for i in range(1, 41)],
            )
    overrides = {table: {"watermark": {"column": WATERMARK}} for table in (PERCENT, QUOTES)}
    return parse_pipeline(
        {
            "name": "names",
            "source": {"conn_id": "lakesync_demo_mysql", "database": fresh_database},
            "tables": {"overrides": overrides},
            "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "t"},
            # delta-rs: column names with a space or a backtick are delta_rs's (delta-spark refuses them, with
            # that hint: test_delta_sink.py); the source-side quoting under test is the same for both writers
            "delta": {"root": str(tmp_path / "delta"), "writer": "delta_rs"},
            "snapshot": {"chunk_rows": 10},
            "settlement": {"safety_window_seconds": 60},
            "state_dir": str(tmp_path / "state"),
        },
        source_name="names.yaml",
    )


@pytest.mark.parametrize("table", [PERCENT, QUOTES], ids=["percent", "backtick-quote"])
def test_settlement_and_validate_read_tables_with_percent_backtick_and_quote_in_names(
        pipeline, mariadb, fresh_database, table):
    result = settle_table(pipeline, table, interval_start=NOV_20 - DAY, interval_end=NOV_20)
    assert result.source_rows == result.inserted == 40
    with mariadb.connect() as conn:
        comparison = compare_table(conn, fresh_database, table, pipeline.delta.table_uri(table))
        assert comparison.identical, comparison.describe()
        with conn.cursor() as cur:  # a moved row and a deleted one: the re-run reads them back by key
            cur.execute(f"UPDATE {q(fresh_database)}.{q(table)} SET {q(WATERMARK)} = '2026-11-25 00:00:00',"
                        f" {q(AMOUNT)} = 7 WHERE {q(ID)} = 3")
            cur.execute(f"DELETE FROM {q(fresh_database)}.{q(table)} WHERE {q(ID)} = 4")
    repair = settle_table(pipeline, table, interval_start=NOV_20 - DAY, interval_end=NOV_20)
    assert (repair.updated, repair.deleted) == (1, 1)
    assert validate_interval(pipeline, table, interval_start=NOV_20 - DAY, interval_end=NOV_20)["differing"] == 0
    with mariadb.connect() as conn:
        comparison = compare_table(conn, fresh_database, table, pipeline.delta.table_uri(table))
        assert comparison.identical, comparison.describe()

    for fast in (False, True):
        report = validate_pipeline(pipeline, tables=[table], settle_timeout_s=0.5, fast_read=fast)
        assert [t.status for t in report.tables] == ["equal"], report.tables
    rows = delta_table(pipeline.delta.table_uri(table))
    amounts = pc.if_else(pc.equal(rows[ID], 17), pa.scalar(99, rows.schema.field(AMOUNT).type), rows[AMOUNT])
    write_deltalake(pipeline.delta.table_uri(table),
                    rows.set_column(rows.schema.get_field_index(AMOUNT), AMOUNT, amounts), mode="overwrite")
    report = validate_pipeline(pipeline, tables=[table], settle_timeout_s=0.5, rounds=1)
    (checked,) = report.tables
    assert checked.status == "mismatch" and checked.different == [{ID: 17}]
