"""The relay's fast row decoder returns exactly what python-mysql-replication returns, type by type."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from lakesync.source.binlog_rows import decode_rows, row_plan
from lakesync.source.server_checks import current_position

pytestmark = pytest.mark.integration

TABLE = """CREATE TABLE all_fast_types (
  id BIGINT NOT NULL PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
  i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  f FLOAT, d DOUBLE,
  d1 DECIMAL(10,2), d2 DECIMAL(65,30), d3 DECIMAL(5,0), d4 DECIMAL(20,19), d5 DECIMAL(18,9),
  c CHAR(3), vc VARCHAR(300), vs VARCHAR(20), l1 VARCHAR(10) CHARACTER SET latin1, ut TEXT, lt LONGTEXT,
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts0 TIMESTAMP NULL, ts2 TIMESTAMP(2) NULL, da DATE, y YEAR,
  e ENUM('small','medium','large'), s SET('a','b','c','d','e','f','g','h','i')
)"""

_EXTREMES = [
    (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808,
     18446744073709551615, -1.5, -2.25e300, "-12345678.99", "-" + "9" * 35 + "." + "9" * 30, "-99999",
     "-0.1234567890123456789", "-123456789.123456789",
     "", "x" * 300, "ünïcode ✓ 😀", "café", "t" * 1000, "long " * 100, b"\x00\x01", b"\xff" * 10, b"\x00blob",
     "1000-01-01 00:00:00", "9999-12-31 23:59:59.999", "2024-02-29 12:34:56.000001", "1970-01-01 00:00:01",
     "2038-01-19 03:14:07.99", "1000-01-01", 1901, "small", "a,i"),
    (2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0, 0.0, 0.0, "0.00",
     "0." + "0" * 30, "0", "0.0000000000000000001", "0.000000001",
     "abc", "", "", "", "", "", b"", b"", b"",
     "2000-01-01 00:00:00", "2000-01-01 00:00:00.5", "2000-01-01 00:00:00.05", "2000-01-01 00:00:00",
     "2000-01-01 00:00:00", "2000-01-01", 2155, "large", ""),
    (3, *([None] * 35)),
]


def _random_row(rng: random.Random, key: int) -> tuple[Any, ...]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.1 else value

    return (
        key, maybe(rng.randint(-128, 127)), maybe(rng.randint(0, 255)), maybe(rng.randint(-32768, 32767)),
        maybe(rng.randint(0, 65535)), maybe(rng.randint(-8388608, 8388607)), maybe(rng.randint(0, 16777215)),
        maybe(rng.randint(-2**31, 2**31 - 1)), maybe(rng.randint(0, 2**32 - 1)), maybe(rng.randint(-2**63, 2**63 - 1)),
        maybe(rng.randint(0, 2**64 - 1)), maybe(rng.uniform(-1e6, 1e6)), maybe(rng.uniform(-1e100, 1e100)),
        maybe(f"{rng.uniform(-1e7, 1e7):.2f}"), maybe(f"{rng.uniform(-1e30, 1e30):.30f}"[:60]),
        maybe(str(rng.randint(-99999, 99999))), maybe(f"{rng.uniform(-9, 9):.19f}"),
        maybe(f"{rng.uniform(-1e8, 1e8):.9f}"),
        maybe(rng.choice(["a", "ab", "abc"])), maybe("v" * rng.randint(0, 300)), maybe("ü" * rng.randint(0, 20)),
        maybe("é" * rng.randint(0, 10)), maybe("t" * rng.randint(0, 60_000)), maybe("L" * rng.randint(0, 300)),
        maybe(rng.randbytes(4)), maybe(rng.randbytes(rng.randint(0, 10))), maybe(rng.randbytes(rng.randint(0, 300))),
        maybe(f"{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} 01:02:03"),
        maybe(f"2020-05-06 07:08:09.{rng.randint(0, 999):03d}"), maybe(f"2020-05-06 07:08:09.{rng.randint(0, 999999):06d}"),
        maybe(f"{rng.randint(1971, 2037)}-03-04 05:06:07"), maybe(f"2001-02-03 04:05:06.{rng.randint(0, 99):02d}"),
        maybe(f"{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"),
        maybe(rng.randint(1901, 2155)), maybe(rng.choice(["small", "medium", "large"])),
        maybe(",".join(sorted(rng.sample("abcdefghi", rng.randint(1, 9))))),
    )


def _rows_both_ways(mariadb, database: str, start) -> tuple[list[Any], list[Any]]:
    settings = {"host": mariadb.host, "port": mariadb.port, "user": "root", "password": mariadb.root_password}

    def read(fast: bool) -> list[Any]:
        reader = BinLogStreamReader(
            connection_settings=dict(settings), server_id=random.randrange(60_000, 70_000),
            log_file=start.file, log_pos=start.offset, resume_stream=True, blocking=False,
            only_schemas=[database], only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
            enable_logging=False,
        )
        out = []
        try:
            for event in reader:
                if fast:
                    plan = row_plan(event.columns)
                    assert plan is not None, "every column type of the test table has a fast reader"
                    rows = decode_rows(event, plan)
                    assert rows is not None
                else:
                    rows = event.rows
                out.extend((type(event).__name__, row) for row in rows)
        finally:
            reader.close()
        return out

    return read(False), read(True)


def test_fast_decoder_matches_the_library_on_every_supported_type(mariadb, fresh_database) -> None:
    rng = random.Random(1234)
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(TABLE)
        start = current_position(conn)
        placeholders = ", ".join(["%s"] * 36)
        cur.executemany(f"INSERT INTO all_fast_types VALUES ({placeholders})", _EXTREMES)
        cur.executemany(f"INSERT INTO all_fast_types VALUES ({placeholders})",
                        [_random_row(rng, key) for key in range(10, 310)])
        cur.execute("UPDATE all_fast_types SET d1 = -d1, vc = CONCAT(vc, 'x'), s = 'b' WHERE id % 3 = 0")
        cur.execute("DELETE FROM all_fast_types WHERE id % 5 = 0")
    library, fast = _rows_both_ways(mariadb, fresh_database, start)
    assert len(library) == len(fast) > 300
    for (kind, expected), (fast_kind, got) in zip(library, fast, strict=True):
        assert kind == fast_kind
        for image in ("values", "before_values", "after_values"):
            if image in expected:
                assert got[image] == expected[image], (kind, expected[image]["id"] if expected[image] else None)


def test_zero_dates_and_empty_sets_are_null_with_the_library_reason(mariadb, fresh_database) -> None:
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("CREATE TABLE z (id INT PRIMARY KEY, dt DATETIME(2), da DATE, s SET('a','b'))")
        start = current_position(conn)
        cur.execute("INSERT INTO z VALUES (1, '0000-00-00 00:00:00', '0000-00-00', ''), (2, NULL, NULL, NULL)")
    library, fast = _rows_both_ways(mariadb, fresh_database, start)
    assert [row for _, row in fast] == [row for _, row in library]
    assert fast[0][1]["none_sources"] == {"dt": "out of datetime2 range", "da": "out of date range", "s": "empty set"}
