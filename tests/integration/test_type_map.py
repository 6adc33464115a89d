"""Every row of the type map (docs/types.md) against the real server, on both read paths and through Delta.

One table holds a column per map row, with the edge values of that type and a row of NULLs. For each row
of the map this proves:
(a) snapshot: the PyMySQL value becomes the expected Arrow value;
(b) binlog: the same rows read back from the binlog with python-mysql-replication, turned into the JSON
    form of events and back, give exactly the snapshot's Arrow values (and the same JSON as the snapshot);
(c) the relay's own binlog reader (:class:`lakesync.source.binlog.BinlogSource`, the code path production
    runs) gives the snapshot's JSON for every column, both for a table it decodes with the library and for
    one it decodes with its fast reader (:mod:`lakesync.source.binlog_rows`);
(d) the Arrow table writes to Delta and reads back equal.
The table is built and read once per module (``type_map`` fixture) so the suite stays quick.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from lakesync.core.positions import SourcePosition
from lakesync.core.types import (
    SNAPSHOT_TIME_ZONE_SQL,
    ColumnSpec,
    arrow_field,
    arrow_schema,
    arrow_table_from_db_rows,
    arrow_table_from_json_rows,
    arrow_value_from_json,
    json_row_from_binlog,
    json_row_from_db,
)
from lakesync.source import queries
from lakesync.source.binlog import BinlogSource
from lakesync.source.schema import list_tables, read_key_columns, read_table_columns
from tests.deltakit import delta_table

pytestmark = pytest.mark.integration

UTC = dt.UTC


def f32(value: float) -> float:
    """The double that an Arrow float32 holding ``value`` reads back as."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def us(hours: int = 0, minutes: int = 0, seconds: int = 0, micros: int = 0, *, negative: bool = False) -> int:
    total = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros
    return -total if negative else total


# WKB of POINT(1 2) and LINESTRING(0 0,1 1), little-endian, as MySQL stores it after the 4-byte SRID.
WKB_POINT_1_2 = bytes.fromhex("0101000000000000000000f03f0000000000000040")
WKB_LINE = bytes.fromhex("010200000002000000" + "00" * 16 + "000000000000f03f000000000000f03f")


@dataclass(frozen=True)
class Case:
    """One row of the map: a column definition, SQL literals to insert and the Arrow values expected."""

    name: str
    ddl: str
    arrow_type: pa.DataType
    values: tuple[tuple[str, Any], ...]
    #: For NOT NULL columns, the literal that goes where the NULL row has NULL.
    null_literal: str = "NULL"
    null_expected: Any = None


CASES: tuple[Case, ...] = (
    Case("tinyint", "TINYINT", pa.int8(), (("-128", -128), ("127", 127), ("0", 0))),
    Case("tinyint_unsigned", "TINYINT UNSIGNED", pa.int16(), (("0", 0), ("255", 255))),
    Case("bool_tinyint1", "BOOL", pa.int8(), (("TRUE", 1), ("FALSE", 0), ("-1", -1))),
    Case("smallint", "SMALLINT", pa.int16(), (("-32768", -32768), ("32767", 32767))),
    Case("smallint_unsigned", "SMALLINT UNSIGNED", pa.int32(), (("0", 0), ("65535", 65535))),
    Case("mediumint", "MEDIUMINT", pa.int32(), (("-8388608", -8388608), ("8388607", 8388607))),
    Case("mediumint_unsigned", "MEDIUMINT UNSIGNED", pa.int32(), (("0", 0), ("16777215", 16777215))),
    Case("int", "INT", pa.int32(), (("-2147483648", -2147483648), ("2147483647", 2147483647))),
    Case("int_unsigned", "INT UNSIGNED", pa.int64(), (("0", 0), ("4294967295", 4294967295))),
    Case(
        "bigint",
        "BIGINT",
        pa.int64(),
        (("-9223372036854775808", -(2**63)), ("9223372036854775807", 2**63 - 1)),
    ),
    Case(
        "bigint_unsigned",
        "BIGINT UNSIGNED",
        pa.decimal128(20, 0),
        (("0", Decimal(0)), ("18446744073709551615", Decimal(2**64 - 1))),
    ),
    Case(
        "decimal_65_30",
        "DECIMAL(65,30)",
        pa.string(),
        (
            (
                "-12345678901234567890123456789012345.123456789012345678901234567890",
                "-12345678901234567890123456789012345.123456789012345678901234567890",
            ),
            ("0", "0." + "0" * 30),
            ("99999999999999999999999999999999999." + "9" * 30, "9" * 35 + "." + "9" * 30),
        ),
    ),
    Case(
        "decimal_38_10",
        "DECIMAL(38,10)",
        pa.decimal128(38, 10),
        (
            ("-1234567890123456789012345678.0123456789", Decimal("-1234567890123456789012345678.0123456789")),
            ("0.5", Decimal("0.5000000000")),
            ("9999999999999999999999999999.9999999999", Decimal("9999999999999999999999999999.9999999999")),
        ),
    ),
    Case("decimal_10_0", "DECIMAL(10,0)", pa.decimal128(10, 0), (("-99999", Decimal(-99999)), ("12", Decimal(12)))),
    Case(
        "float",
        "FLOAT",
        pa.float32(),
        (("1.2345678", f32(1.2345678)), ("-3.4028234e38", f32(-3.4028234e38)), ("1.17549435e-38", f32(1.17549435e-38))),
    ),
    Case(
        "double",
        "DOUBLE",
        pa.float64(),
        (("0.1", 0.1), ("1.7976931348623157e308", 1.7976931348623157e308), ("0.30000000000000004", 0.30000000000000004)),
    ),
    Case("bit_1", "BIT(1)", pa.int64(), (("b'1'", 1), ("b'0'", 0))),
    Case("bit_10", "BIT(10)", pa.int64(), (("b'1000000001'", 513), ("b'0'", 0))),
    Case(
        "bit_64",
        "BIT(64)",
        pa.decimal128(20, 0),
        (("b'" + "1" * 64 + "'", Decimal(2**64 - 1)), ("b'0'", Decimal(0)), ("x'8000000000000001'", Decimal(2**63 + 1))),
    ),
    Case(
        "date",
        "DATE",
        pa.date32(),
        (("'2020-02-29'", dt.date(2020, 2, 29)), ("'1000-01-01'", dt.date(1000, 1, 1)), ("'9999-12-31'", dt.date(9999, 12, 31))),
    ),
    Case("date_zero", "DATE", pa.date32(), (("'0000-00-00'", None), ("'2020-02-00'", None), ("'2020-01-01'", dt.date(2020, 1, 1)))),
    Case(
        "datetime_0",
        "DATETIME",
        pa.timestamp("us"),
        (
            ("'2020-01-02 03:04:05'", dt.datetime(2020, 1, 2, 3, 4, 5)),
            ("'1000-01-01 00:00:00'", dt.datetime(1000, 1, 1)),
            ("'9999-12-31 23:59:59'", dt.datetime(9999, 12, 31, 23, 59, 59)),
        ),
    ),
    Case(
        "datetime_3",
        "DATETIME(3)",
        pa.timestamp("us"),
        (
            ("'2020-01-02 03:04:05.123'", dt.datetime(2020, 1, 2, 3, 4, 5, 123000)),
            ("'9999-12-31 23:59:59.999'", dt.datetime(9999, 12, 31, 23, 59, 59, 999000)),
        ),
    ),
    Case(
        "datetime_6",
        "DATETIME(6)",
        pa.timestamp("us"),
        (
            ("'2020-01-02 03:04:05.123456'", dt.datetime(2020, 1, 2, 3, 4, 5, 123456)),
            ("'9999-12-31 23:59:59.999999'", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
            ("'1000-01-01 00:00:00.000001'", dt.datetime(1000, 1, 1, 0, 0, 0, 1)),
        ),
    ),
    Case(
        "datetime_zero_not_null",
        "DATETIME NOT NULL",
        pa.timestamp("us"),
        (("'0000-00-00 00:00:00'", None), ("'2020-01-01 00:00:00'", dt.datetime(2020, 1, 1))),
        null_literal="'0000-00-00 00:00:00'",
    ),
    Case(
        "timestamp_0",
        "TIMESTAMP NULL",
        pa.timestamp("us", tz="UTC"),
        (
            ("'1970-01-01 00:00:01'", dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
            ("'2038-01-19 03:14:07'", dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)),
            ("'0000-00-00 00:00:00'", None),
        ),
    ),
    Case(
        "timestamp_6",
        "TIMESTAMP(6) NULL",
        pa.timestamp("us", tz="UTC"),
        (
            ("'2038-01-19 03:14:07.999999'", dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)),
            ("'1970-01-01 00:00:01.000001'", dt.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)),
            ("'0000-00-00 00:00:00'", None),
        ),
    ),
    Case(
        "time_0",
        "TIME",
        pa.int64(),
        (
            ("'-838:59:59'", us(838, 59, 59, negative=True)),
            ("'838:59:59'", us(838, 59, 59)),
            ("'-00:00:01'", us(seconds=1, negative=True)),
            ("'00:00:00'", 0),
        ),
    ),
    Case(
        "time_6",
        "TIME(6)",
        pa.int64(),
        (
            ("'838:59:59.000000'", us(838, 59, 59)),
            ("'-838:59:59.000000'", us(838, 59, 59, negative=True)),
            ("'-838:59:59.999999'", us(838, 59, 59, 999999, negative=True)),
            ("'-12:34:56.789'", us(12, 34, 56, 789000, negative=True)),
            ("'-00:00:00.000001'", us(micros=1, negative=True)),
            ("'00:00:00.5'", us(micros=500000)),
        ),
    ),
    Case(
        "time_3",
        "TIME(3)",
        pa.int64(),
        (("'-00:00:01.250'", us(seconds=1, micros=250000, negative=True)), ("'23:59:59.999'", us(23, 59, 59, 999000))),
    ),
    Case("year", "YEAR", pa.int16(), (("1901", 1901), ("2155", 2155), ("0", 0), ("2024", 2024))),
    Case("char", "CHAR(10)", pa.string(), (("'abc'", "abc"), ("''", ""), ("'é🙂'", "é🙂"), ("' a  '", " a"))),
    Case(
        "varchar",
        "VARCHAR(100)",
        pa.string(),
        (("'héllo 🙂 漢字'", "héllo 🙂 漢字"), ("''", ""), ("'it''s \\\\ a'", "it's \\ a")),
    ),
    Case("text", "TEXT", pa.string(), (("REPEAT('漢🙂', 200)", "漢🙂" * 200), ("''", ""))),
    Case("varchar_latin1", "VARCHAR(10) CHARACTER SET latin1", pa.string(), (("'café€'", "café€"),)),
    Case(
        "binary_6",
        "BINARY(6)",
        pa.binary(),
        (("x'610062'", b"a\x00b\x00\x00\x00"), ("''", b"\x00" * 6), ("x'000000000000'", b"\x00" * 6), ("x'ffffffffffff'", b"\xff" * 6)),
    ),
    Case("varbinary", "VARBINARY(10)", pa.binary(), (("x'00ff00'", b"\x00\xff\x00"), ("''", b""), ("x'00'", b"\x00"))),
    Case("blob", "BLOB", pa.binary(), (("x'00ff0000'", b"\x00\xff\x00\x00"), ("''", b""))),
    Case(
        "json",
        "JSON",
        pa.string(),
        (("'{\"b\": [1, 2.5], \"a\": \"é\"}'", '{"b": [1, 2.5], "a": "é"}'), ("'[]'", "[]"), ("'null'", "null")),
    ),
    Case("enum", "ENUM('x','y','it''s')", pa.string(), (("'y'", "y"), ("'nope'", ""), ("'it''s'", "it's"))),
    Case("set", "SET('a','b','c')", pa.string(), (("'c,a'", "a,c"), ("''", ""), ("'a,b,c'", "a,b,c"))),
    Case(
        "point",
        "POINT",
        pa.binary(),
        (("ST_GeomFromText('POINT(1 2)')", WKB_POINT_1_2), ("ST_GeomFromText('POINT(1 2)', 4326)", WKB_POINT_1_2)),
    ),
    Case("geometry", "GEOMETRY", pa.binary(), (("ST_GeomFromText('LINESTRING(0 0,1 1)')", WKB_LINE),)),
    Case(
        "uuid",
        "UUID",
        pa.string(),
        tuple(
            (f"'{u}'", u)
            for u in (
                "123e4567-e89b-12d3-a456-426614174000",
                "01890c8a-0000-7000-8000-000000000000",
                "00000000-0000-0000-0000-000000000000",
                str(uuid.UUID(int=2**128 - 1)),
            )
        ),
    ),
    Case(
        "inet6",
        "INET6",
        pa.string(),
        (("'::ffff:1.2.3.4'", "::ffff:1.2.3.4"), ("'2001:db8::'", "2001:db8::"), ("'::'", "::")),
    ),
    Case(
        "inet4",
        "INET4",
        pa.string(),
        (("'10.0.0.0'", "10.0.0.0"), ("'255.255.255.255'", "255.255.255.255"), ("'0.0.0.0'", "0.0.0.0")),
    ),
)
ROW_COUNT = 1 + max(len(case.values) for case in CASES)


def _literal(case: Case, row: int) -> tuple[str, Any]:
    """Row 0 is the NULL row; rows past a case's values repeat NULL (or its NOT NULL stand-in)."""
    if 1 <= row <= len(case.values):
        return case.values[row - 1]
    return case.null_literal, case.null_expected


@dataclass
class TypeMapRun:
    columns: list[ColumnSpec]
    snapshot_rows: list[tuple[Any, ...]]
    snapshot: pa.Table
    binlog_rows: list[dict[str, Any]]
    delta: pa.Table
    #: table -> the ``after`` images the relay's BinlogSource produced, in insert order
    relay_rows: dict[str, list[dict[str, Any]]]
    #: table -> whether the relay decoded it with its fast reader (rather than the library)
    relay_fast: dict[str, bool]


#: Column types the fast reader leaves to the library; the ``type_map_fast`` table holds every other case.
_LIBRARY_ONLY = ("TIME", "BIT", "JSON", "GEOMETRY", "POINT")


def _fast_cases() -> list[Case]:
    return [case for case in CASES if not case.ddl.upper().startswith(_LIBRARY_ONLY)]


def _relay_rows(mariadb, database: str, start: SourcePosition) -> tuple[dict[str, list], dict[str, bool]]:
    """Every insert after ``start``, as the relay's BinlogSource turns it into event JSON."""
    source = BinlogSource(
        {"host": mariadb.host, "port": mariadb.port, "user": "root", "password": mariadb.root_password},
        server_id=5000 + uuid.uuid4().int % 100_000, database=database, start=start,
        selects=lambda table: True, blocking=False,
    )
    rows: dict[str, list[dict[str, Any]]] = {}
    for item in source:
        if getattr(item, "op", None) == "c":
            rows.setdefault(item.table, []).append(item.after)
    fast = {table.table: converter.plan is not None for table, converter in source._converters.values()}
    return rows, fast


@pytest.fixture(scope="module")
def type_map(mariadb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TypeMapRun]:
    """Create the table, insert every case's values, then read them by snapshot, by binlog and via Delta."""
    database = f"t_types_{uuid.uuid4().hex[:8]}"
    column_ddl = ", ".join(f"`{case.name}` {case.ddl}" for case in CASES)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        try:
            cur.execute(f"USE `{database}`")
            cur.execute("SET SESSION sql_mode = ''")  # lets the zero dates and the invalid ENUM value in
            cur.execute(f"CREATE TABLE type_map (row_no INT PRIMARY KEY, {column_ddl})")
            cur.execute("SHOW MASTER STATUS")
            log_file, log_pos = cur.fetchone()[:2]
            fast_names = ", ".join(f"`{case.name}`" for case in _fast_cases())
            cur.execute(f"CREATE TABLE type_map_fast AS SELECT row_no, {fast_names} FROM type_map LIMIT 0")
            cur.execute("ALTER TABLE type_map_fast ADD PRIMARY KEY (row_no)")
            for row in range(ROW_COUNT):
                literals = ", ".join(_literal(case, row)[0] for case in CASES)
                cur.execute(f"INSERT INTO type_map VALUES ({row}, {literals})")
            cur.execute(f"INSERT INTO type_map_fast SELECT row_no, {fast_names} FROM type_map ORDER BY row_no")

            columns = read_table_columns(conn, database, "type_map")
            cur.execute(SNAPSHOT_TIME_ZONE_SQL)
            source = queries.source_table(database, "type_map", [c.name for c in columns])
            queries.execute(cur, queries.select_rows(source, columns))
            snapshot_rows = sorted(cur.fetchall(), key=lambda row: row[0])  # row_no

            stream = BinLogStreamReader(
                connection_settings={
                    "host": mariadb.host,
                    "port": mariadb.port,
                    "user": "root",
                    "passwd": mariadb.root_password,
                },
                server_id=4000 + uuid.uuid4().int % 100_000,
                resume_stream=True,
                log_file=log_file,
                log_pos=log_pos,
                blocking=False,
                only_events=[WriteRowsEvent],
                only_schemas=[database],
            )
            try:
                binlog_rows = [
                    json_row_from_binlog(columns, row["values"], row["none_sources"])
                    for event in stream
                    if event.table == "type_map"
                    for row in event.rows
                ]
            finally:
                stream.close()
            relay_rows, relay_fast = _relay_rows(mariadb, database, SourcePosition(log_file, log_pos))
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")

    snapshot = arrow_table_from_db_rows(columns, snapshot_rows)
    delta_path = tmp_path_factory.mktemp("type_map_delta") / "type_map"
    write_deltalake(str(delta_path), snapshot)
    delta = delta_table(delta_path).sort_by("row_no")
    yield TypeMapRun(columns, snapshot_rows, snapshot, binlog_rows, delta, relay_rows, relay_fast)


def _expected(case: Case) -> list[Any]:
    return [_literal(case, row)[1] for row in range(ROW_COUNT)]


def _column(run: TypeMapRun, name: str) -> ColumnSpec:
    return next(column for column in run.columns if column.name == name)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_column_maps_to_the_documented_arrow_type(type_map: TypeMapRun, case: Case) -> None:
    field = arrow_field(_column(type_map, case.name))
    assert field.type == case.arrow_type
    assert type_map.snapshot.schema.field(case.name).type == case.arrow_type


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_snapshot_value_becomes_the_expected_arrow_value(type_map: TypeMapRun, case: Case) -> None:
    assert type_map.snapshot.column(case.name).to_pylist() == _expected(case)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_binlog_value_through_json_equals_snapshot_value(type_map: TypeMapRun, case: Case) -> None:
    assert len(type_map.binlog_rows) == ROW_COUNT
    arrow_type = case.arrow_type
    from_binlog = [arrow_value_from_json(arrow_type, row[case.name]) for row in type_map.binlog_rows]
    assert from_binlog == type_map.snapshot.column(case.name).to_pylist()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_binlog_and_snapshot_give_the_same_json(type_map: TypeMapRun, case: Case) -> None:
    column = _column(type_map, case.name)
    index = type_map.columns.index(column)
    from_snapshot = [json_row_from_db([column], (row[index],))[case.name] for row in type_map.snapshot_rows]
    assert [row[case.name] for row in type_map.binlog_rows] == from_snapshot


def _snapshot_json(run: TypeMapRun, case: Case) -> list[Any]:
    column = _column(run, case.name)
    index = run.columns.index(column)
    return [json_row_from_db([column], (row[index],))[case.name] for row in run.snapshot_rows]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_relay_library_path_gives_the_snapshot_json(type_map: TypeMapRun, case: Case) -> None:
    assert type_map.relay_fast["type_map"] is False, "the table has columns only the library decodes"
    assert [row[case.name] for row in type_map.relay_rows["type_map"]] == _snapshot_json(type_map, case)


@pytest.mark.parametrize("case", _fast_cases(), ids=lambda case: case.name)
def test_relay_fast_path_gives_the_snapshot_json(type_map: TypeMapRun, case: Case) -> None:
    assert type_map.relay_fast["type_map_fast"] is True, "every column of this table has a fast reader"
    assert [row[case.name] for row in type_map.relay_rows["type_map_fast"]] == _snapshot_json(type_map, case)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_json_rows_build_the_same_arrow_table_as_the_snapshot(type_map: TypeMapRun, case: Case) -> None:
    schema = pa.schema([type_map.snapshot.schema.field(case.name)])
    table = arrow_table_from_json_rows(schema, type_map.binlog_rows)
    assert table.column(case.name).to_pylist() == type_map.snapshot.column(case.name).to_pylist()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_delta_round_trip_keeps_the_value(type_map: TypeMapRun, case: Case) -> None:
    assert type_map.delta.column(case.name).to_pylist() == type_map.snapshot.column(case.name).to_pylist()


def test_zero_date_column_is_nullable_even_when_not_null(type_map: TypeMapRun) -> None:
    column = _column(type_map, "datetime_zero_not_null")
    assert not column.nullable
    assert arrow_field(column).nullable
    assert not arrow_field(_column(type_map, "row_no")).nullable


def test_delta_schema_matches_the_arrow_schema(type_map: TypeMapRun) -> None:
    expected = arrow_schema(type_map.columns)
    assert [(f.name, f.type) for f in type_map.delta.schema] == [(f.name, f.type) for f in expected]


# -- source/schema.py -------------------------------------------------------------------------------------


def test_columns_come_in_ordinal_order_with_their_types(mariadb, fresh_database: str) -> None:
    with mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE `we``ird` (z INT NOT NULL, a VARCHAR(5) CHARACTER SET latin1, "
            "e ENUM('x','it''s'), b BIGINT UNSIGNED)"
        )
        columns = read_table_columns(conn, fresh_database, "we`ird")
    assert [c.name for c in columns] == ["z", "a", "e", "b"]
    assert columns[0] == ColumnSpec("z", "int", "int(11)", nullable=False)
    assert columns[1].charset == "latin1"
    assert columns[2].enum_values == ("x", "it's")
    assert columns[3].unsigned


def test_missing_table_is_a_clear_error(mariadb, fresh_database: str) -> None:
    from lakesync.core.errors import SourceError

    with mariadb.connect() as conn, pytest.raises(SourceError, match="does not exist"):
        read_table_columns(conn, fresh_database, "nope")


def test_key_is_primary_key_else_first_not_null_unique_key(mariadb, fresh_database: str) -> None:
    with mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE pk (a INT, b INT, c INT, PRIMARY KEY (b, a), UNIQUE KEY u (c))")
        cur.execute(
            "CREATE TABLE uk (a INT, b INT NOT NULL, c INT NOT NULL, d INT NOT NULL,"
            " UNIQUE KEY z_nullable (a), UNIQUE KEY y_first (c, b), UNIQUE KEY x_second (d))"
        )
        cur.execute("CREATE TABLE nokey (a INT, b INT, UNIQUE KEY u (a), KEY k (b))")
        assert read_key_columns(conn, fresh_database, "pk") == ["b", "a"]
        assert read_key_columns(conn, fresh_database, "uk") == ["c", "b"]
        assert read_key_columns(conn, fresh_database, "nokey") == []


def test_list_tables_returns_base_tables_only(mariadb, fresh_database: str) -> None:
    with mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE b (id INT)")
        cur.execute("CREATE TABLE a (id INT)")
        cur.execute("CREATE VIEW v AS SELECT id FROM a")
        cur.execute("CREATE SEQUENCE s")
        assert list_tables(conn, fresh_database) == ["a", "b"]


def test_table_names_are_parameters_not_sql(mariadb, fresh_database: str) -> None:
    with mariadb.connect() as conn:
        assert list_tables(conn, f"{fresh_database}' OR '1'='1") == []
        assert read_key_columns(conn, fresh_database, "x' OR '1'='1") == []
