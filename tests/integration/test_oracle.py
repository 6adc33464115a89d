"""The oracle itself must be able to fail: it sees a changed value, a missing, an extra and a duplicated row,
a value that differs only after a NUL character, and agrees on a table that is the same."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.oracle import compare_table

pytestmark = pytest.mark.integration

ROWS = [
    (1, "a\x00b", Decimal("12.50"), dt.datetime(2024, 1, 2, 3, 4, 5, 600000), "😀𝔸", b"\x00\x01"),
    (2, "", Decimal("-0.01"), None, "x", b""),
    (3, "plain", None, dt.datetime(1970, 1, 1, 0, 0, 1), "", None),
]
SCHEMA = pa.schema([
    pa.field("id", pa.int32(), nullable=False), ("name", pa.string()), ("amount", pa.decimal128(10, 2)),
    ("at", pa.timestamp("us", tz="UTC")), ("note", pa.string()), ("raw", pa.binary()),
    ("_lakesync_pos", pa.string()),
])


def _delta(path, rows) -> str:
    columns = list(zip(*[(*row, "p") for row in rows], strict=True)) if rows else [[] for _ in SCHEMA]
    write_deltalake(str(path), pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, SCHEMA, strict=True)],
                                                    schema=SCHEMA), mode="overwrite")
    return str(path)


@pytest.fixture
def source(mariadb, fresh_database):
    with mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(10,2), at TIMESTAMP(6) NULL, "
                    "note VARCHAR(20) CHARACTER SET utf8mb4, raw VARBINARY(10))")
        cur.execute("SET time_zone = '+00:00'")
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s)", ROWS)
        conn.commit()
    with mariadb.connect(fresh_database) as conn:
        yield conn, fresh_database


def test_identical_tables_compare_equal(source, tmp_path):
    conn, database = source
    result = compare_table(conn, database, "t", _delta(tmp_path / "t", ROWS))
    assert result.identical, result.describe()
    assert result.source_rows == result.delta_rows == 3


def test_a_value_differing_after_a_nul_names_exactly_that_key(source, tmp_path):
    conn, database = source
    rows = [(1, "a\x00c", *ROWS[0][2:]), *ROWS[1:]]
    result = compare_table(conn, database, "t", _delta(tmp_path / "t", rows))
    assert result.differing_keys() == {(1,)}
    assert result.differing[(1,)] == {"name": ("a\x00b", "a\x00c")}


def test_missing_extra_and_duplicated_rows_are_named(source, tmp_path):
    conn, database = source
    rows = [ROWS[0], ROWS[0], (4, "new", None, None, None, None)]
    result = compare_table(conn, database, "t", _delta(tmp_path / "t", rows))
    assert set(result.missing_in_delta) == {(2,), (3,)}
    assert result.extra_in_delta == [(4,)]
    assert result.duplicate_keys_in_delta == [(1,)]


def test_a_null_where_the_source_has_a_value_is_a_difference(source, tmp_path):
    conn, database = source
    rows = [ROWS[0], (2, "", Decimal("-0.01"), None, "x", None), ROWS[2]]
    result = compare_table(conn, database, "t", _delta(tmp_path / "t", rows))
    assert result.differing == {(2,): {"raw": (b"", None)}}
