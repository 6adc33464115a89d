"""Range reads of the full load: the fast text form keeps NULLs in every kind of column."""

from __future__ import annotations

import pytest

from lakesync.source.table_reader import RangeReader, describe_table, plan_ranges

pytestmark = pytest.mark.integration


def test_nulls_in_binary_and_blob_columns_survive_the_fast_form(mariadb, fresh_database):
    with mariadb.connect(fresh_database) as conn:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, b BLOB, v VARBINARY(10), f BINARY(2), j JSON)")
            cur.execute("INSERT INTO t VALUES (1, NULL, NULL, NULL, NULL), (2, 'x', 'y', 'zz', '[1]')")
        shape = describe_table(conn, fresh_database, "t")
        reader = RangeReader(shape)
        with conn.cursor() as cur:
            rows = [row for key_range in plan_ranges(cur, shape, 1000)
                    for row in reader.read_range(cur, key_range).to_pylist()]
    assert sorted(rows, key=lambda row: row["id"]) == [
        {"id": 1, "b": None, "v": None, "f": None, "j": None},
        {"id": 2, "b": b"x", "v": b"y", "f": b"zz", "j": "[1]"},
    ]


def test_null_in_a_decimal_wider_than_38_digits_stays_null_in_the_fast_form(mariadb, fresh_database):
    """Found by the type-map property test: such a DECIMAL is stored as text, and its NULL came out as 'NULL'."""
    with mariadb.connect(fresh_database) as conn:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, d DECIMAL(65,30), n DECIMAL(65,0) NOT NULL)")
            cur.execute("INSERT INTO t VALUES (1, NULL, 0), (2, -0.5, -1)")
        shape = describe_table(conn, fresh_database, "t")
        reader = RangeReader(shape)
        with conn.cursor() as cur:
            rows = [row for key_range in plan_ranges(cur, shape, 1000)
                    for row in reader.read_range(cur, key_range).to_pylist()]
    assert sorted(rows, key=lambda row: row["id"]) == [
        {"id": 1, "d": None, "n": "0"},
        {"id": 2, "d": "-0.500000000000000000000000000000", "n": "-1"},
    ]
