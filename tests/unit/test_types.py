"""The type map and the JSON form of values, without a server.

The driver values here are the shapes PyMySQL and python-mysql-replication were seen to return (the
integration test tests/integration/test_type_map.py proves them against the real server).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from lakesync.core.errors import SourceError
from lakesync.core.types import (
    ColumnSpec,
    arrow_field,
    arrow_table_from_db_rows,
    arrow_table_from_json_rows,
    arrow_value_from_json,
    binlog_value_converter,
    json_converter,
    json_row_from_binlog,
    json_row_from_db,
    json_value,
)

UTC = dt.UTC


def col(column_type: str, name: str = "c", *, nullable: bool = True) -> ColumnSpec:
    data_type = column_type.split("(")[0].split(" ")[0].lower()
    return ColumnSpec(name, data_type, column_type, nullable=nullable)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# -- the JSON conventions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column_type", "value", "expected"),
    [
        ("tinyint(4)", -128, -128),
        ("bigint(20) unsigned", 2**64 - 1, 2**64 - 1),
        ("decimal(10,2)", Decimal("-12.50"), "-12.50"),
        ("decimal(38,10)", Decimal("0E-10"), "0.0000000000"),
        ("decimal(65,30)", Decimal("1E+30"), "1000000000000000000000000000000"),
        ("float", 1.2345677614212036, 1.2345677614212036),
        ("double", 0.1, 0.1),
        ("date", dt.date(2020, 2, 29), "2020-02-29"),
        ("datetime", dt.datetime(2020, 1, 2, 3, 4, 5), "2020-01-02T03:04:05.000000"),
        ("datetime(6)", dt.datetime(1000, 1, 1, 0, 0, 0, 1), "1000-01-01T00:00:00.000001"),
        ("timestamp(6)", dt.datetime(2038, 1, 19, 3, 14, 7, 999999), "2038-01-19T03:14:07.999999Z"),
        ("timestamp", dt.datetime(2020, 1, 1, 2, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))), "2020-01-01T00:00:00.000000Z"),
        ("time", dt.timedelta(hours=-838, minutes=-59, seconds=-59), -3_020_399_000_000),
        ("time(6)", dt.timedelta(hours=838, minutes=59, seconds=59), 3_020_399_000_000),
        ("year", 2024, 2024),
        ("varchar(10)", "漢🙂", "漢🙂"),
        ("varbinary(4)", b"\x00\xff", b64(b"\x00\xff")),
        ("blob", b"", ""),
        ("json", '{"a": [1, 2.5]}', '{"a": [1, 2.5]}'),
        ("enum('x','y')", "y", "y"),
        ("set('a','b','c')", "a,c", "a,c"),
        ("bit(1)", b"\x01", 1),
        ("bit(64)", b"\xff" * 8, 2**64 - 1),
    ],
)
def test_snapshot_values_take_the_documented_json_form(column_type: str, value: object, expected: object) -> None:
    assert json_value(col(column_type), value) == expected


def test_json_forms_serialise_as_json() -> None:
    row = json_row_from_db(
        [col("bigint(20) unsigned", "u"), col("decimal(5,2)", "d"), col("blob", "b"), col("time", "t")],
        (2**64 - 1, Decimal("1.50"), b"\x00", dt.timedelta(seconds=-1)),
    )
    assert json.loads(json.dumps(row)) == {"u": 18446744073709551615, "d": "1.50", "b": "AA==", "t": -1_000_000}


@pytest.mark.parametrize("column_type", ["date", "datetime", "datetime(6)", "timestamp", "timestamp(3)"])
@pytest.mark.parametrize("zero", ["0000-00-00", "0000-00-00 00:00:00", "0000-00-00 00:00:00.000000", "2020-00-05"])
def test_zero_dates_from_pymysql_become_null(column_type: str, zero: str) -> None:
    assert json_value(col(column_type), zero) is None


def test_zero_timestamp_from_binlog_becomes_null() -> None:
    # The binlog stores the zero TIMESTAMP as epoch 0, which is not a valid TIMESTAMP value.
    assert json_value(col("timestamp"), dt.datetime(1970, 1, 1), binlog=True) is None
    assert json_value(col("timestamp"), dt.datetime(1970, 1, 1, 0, 0, 1), binlog=True) == "1970-01-01T00:00:01.000000Z"


@pytest.mark.parametrize("column_type", ["date", "datetime", "timestamp(6)"])
def test_date_columns_are_nullable_in_arrow_even_when_not_null(column_type: str) -> None:
    assert arrow_field(col(column_type, nullable=False)).nullable
    assert not arrow_field(col("int(11)", nullable=False)).nullable


# -- what the binlog decoder returns differently ---------------------------------------------------------


@pytest.mark.parametrize(
    ("decoded", "true_micros"),
    [
        # python-mysql-replication 1.0.17's output for these TIME(6) values (seen against MariaDB 10.11).
        (dt.timedelta(days=-1, seconds=41103, microseconds=789000), -45_296_789_000),  # -12:34:56.789
        (dt.timedelta(days=-1, seconds=86398, microseconds=1), -1_000_001),  # -00:00:01.000001
        (dt.timedelta(days=-35, seconds=3600, microseconds=999999), -3_020_399_999_999),  # -838:59:59.999999
        (dt.timedelta(days=-1, seconds=86399, microseconds=1), -1),  # -00:00:00.000001
        (dt.timedelta(days=-1, seconds=82799, microseconds=100000), -3_600_100_000),  # -01:00:00.1
        (dt.timedelta(days=-35, seconds=3601), -3_020_399_000_000),  # -838:59:59 (whole: decoded right)
        (dt.timedelta(microseconds=500000), 500_000),  # positive values are decoded right
    ],
)
def test_binlog_negative_fractional_time_is_corrected(decoded: dt.timedelta, true_micros: int) -> None:
    assert json_value(col("time(6)"), decoded, binlog=True) == true_micros


def test_snapshot_time_is_not_corrected() -> None:
    pymysql_value = dt.timedelta(days=-1, seconds=41103, microseconds=211000)  # -12:34:56.789
    assert json_value(col("time(6)"), pymysql_value) == -45_296_789_000


def test_binlog_bit_string_becomes_the_same_number_as_pymysql_bytes() -> None:
    column = col("bit(10)")
    assert json_value(column, "1000000001", binlog=True) == json_value(column, b"\x02\x01") == 513


def test_binlog_zero_year_is_decoded_as_1900_and_becomes_0() -> None:
    assert json_value(col("year"), 1900, binlog=True) == 0
    assert json_value(col("year"), 0) == 0


def test_binlog_binary_loses_trailing_nuls_and_gets_them_back() -> None:
    column = col("binary(6)")
    assert json_value(column, b"a\x00b", binlog=True) == json_value(column, b"a\x00b\x00\x00\x00")
    assert json_value(column, "", binlog=True) == b64(b"\x00" * 6)


def test_binlog_empty_binary_arrives_as_empty_str() -> None:
    assert json_value(col("varbinary(10)"), "", binlog=True) == ""


def test_binlog_set_comes_back_in_definition_order() -> None:
    column = col("set('c','b','a')")
    assert json_value(column, {"a", "c"}, binlog=True) == "c,a"


def test_binlog_empty_set_is_told_from_null_by_none_sources() -> None:
    columns = [col("set('a','b')", "s"), col("set('a','b')", "n")]
    row = json_row_from_binlog(columns, {"s": None, "n": None}, {"s": "empty set", "n": "null"})
    assert row == {"s": "", "n": None}


def test_binlog_uuid_and_inet_bytes_become_their_text() -> None:
    assert json_value(col("uuid"), bytes.fromhex("123e4567e89b12d3a456426614174000")[:-1]) == (
        "123e4567-e89b-12d3-a456-426614174000"
    )
    assert json_value(col("uuid"), "") == "00000000-0000-0000-0000-000000000000"
    assert json_value(col("inet6"), bytes(10) + b"\xff\xff\x01\x02\x03\x04") == "::ffff:1.2.3.4"
    assert json_value(col("inet6"), "") == "::"
    assert json_value(col("inet4"), b"\n") == "10.0.0.0"
    assert json_value(col("inet4"), "10.0.0.1") == "10.0.0.1"


def test_geometry_loses_the_srid_prefix() -> None:
    wkb = bytes.fromhex("0101000000000000000000f03f0000000000000040")
    assert json_value(col("point"), b"\xe6\x10\x00\x00" + wkb) == b64(wkb)


def test_mysql8_binary_json_from_the_binlog_becomes_json_text() -> None:
    parsed = {b"a": [1, 2.5, b"x", None, True], b"b": {b"c": Decimal("1.5")}}
    assert json.loads(json_value(col("json"), parsed, binlog=True)) == {"a": [1, 2.5, "x", None, True], "b": {"c": 1.5}}


def test_row_from_binlog_keeps_column_order_and_nulls() -> None:
    columns = [col("int(11)", "a"), col("varchar(5)", "b")]
    assert list(json_row_from_binlog(columns, {"b": "x", "a": None})) == ["a", "b"]


# -- JSON form -> Arrow ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arrow_type", "json_form", "expected"),
    [
        (pa.int8(), -128, -128),
        (pa.int64(), -3_020_399_000_000, -3_020_399_000_000),
        (pa.decimal128(20, 0), 2**64 - 1, Decimal(2**64 - 1)),
        (pa.decimal128(38, 10), "0.0000000000", Decimal("0E-10")),
        (pa.float32(), 1.5, 1.5),
        (pa.string(), "漢🙂", "漢🙂"),
        (pa.binary(), "AP8=", b"\x00\xff"),
        (pa.date32(), "2020-02-29", dt.date(2020, 2, 29)),
        (pa.timestamp("us"), "9999-12-31T23:59:59.999999", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
        (pa.timestamp("us", tz="UTC"), "2038-01-19T03:14:07.000001Z", dt.datetime(2038, 1, 19, 3, 14, 7, 1, tzinfo=UTC)),
    ],
)
def test_json_form_decodes_from_the_arrow_type_alone(arrow_type: pa.DataType, json_form: object, expected: object) -> None:
    assert arrow_value_from_json(arrow_type, json_form) == expected
    assert arrow_value_from_json(arrow_type, None) is None
    assert pa.array([arrow_value_from_json(arrow_type, json_form)], type=arrow_type).to_pylist() == [expected]


def test_json_rows_table_equals_per_value_decoding() -> None:
    schema = pa.schema(
        [
            ("i", pa.int32()),
            ("d", pa.decimal128(10, 2)),
            ("u", pa.decimal128(20, 0)),
            ("t", pa.timestamp("us", tz="UTC")),
            ("n", pa.timestamp("us")),
            ("day", pa.date32()),
            ("b", pa.binary()),
            ("s", pa.string()),
        ]
    )
    rows = [
        {"i": 1, "d": "-1.50", "u": 2**64 - 1, "t": "2020-01-01T00:00:00.000001Z", "n": "1000-01-01T00:00:00.000000",
         "day": "9999-12-31", "b": "AA==", "s": "x"},
        {"i": None, "d": None, "u": None, "t": None, "n": None, "day": None, "b": None},
    ]
    table = arrow_table_from_json_rows(schema, rows)
    assert table.schema == schema
    for f in schema:
        assert table.column(f.name).to_pylist() == [arrow_value_from_json(f.type, row.get(f.name)) for row in rows]


def test_db_rows_table_handles_zero_dates_time_and_bits() -> None:
    columns = [col("datetime", "d"), col("time", "t"), col("bit(3)", "b"), col("decimal(65,2)", "w")]
    rows = [
        ("0000-00-00 00:00:00", dt.timedelta(seconds=-1), b"\x05", Decimal("1.50")),
        (dt.datetime(2020, 1, 1), None, None, None),
    ]
    table = arrow_table_from_db_rows(columns, rows)
    assert table.to_pylist() == [
        {"d": None, "t": -1_000_000, "b": 5, "w": "1.50"},
        {"d": dt.datetime(2020, 1, 1), "t": None, "b": None, "w": None},
    ]


def test_db_rows_table_of_no_rows_has_the_schema() -> None:
    table = arrow_table_from_db_rows([col("int(11)", "a")], [])
    assert table.num_rows == 0
    assert table.schema.field("a").type == pa.int32()


# -- the map itself --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column_type", "arrow_type"),
    [
        ("tinyint(1)", pa.int8()),
        ("tinyint(3) unsigned", pa.int16()),
        ("mediumint(8) unsigned", pa.int32()),
        ("int(10) unsigned", pa.int64()),
        ("bigint(20) unsigned", pa.decimal128(20, 0)),
        ("decimal(38,38)", pa.decimal128(38, 38)),
        ("decimal(39,0)", pa.string()),
        ("bit(63)", pa.int64()),
        ("bit(64)", pa.decimal128(20, 0)),
        ("time(6)", pa.int64()),
        ("year(4)", pa.int16()),
        ("datetime(3)", pa.timestamp("us")),
        ("timestamp(6)", pa.timestamp("us", tz="UTC")),
        ("multipolygon", pa.binary()),
        ("inet6", pa.string()),
    ],
)
def test_column_types_map_to_arrow_types(column_type: str, arrow_type: pa.DataType) -> None:
    assert arrow_field(col(column_type)).type == arrow_type


def test_unknown_type_is_a_clear_error_naming_column_and_type() -> None:
    with pytest.raises(SourceError, match=r"'embedding' has type 'vector\(3\)'"):
        arrow_field(ColumnSpec("embedding", "vector", "vector(3)"))
    with pytest.raises(SourceError):
        json_converter(ColumnSpec("embedding", "vector", "vector(3)"))


def test_upper_case_data_type_is_accepted() -> None:
    assert arrow_field(ColumnSpec("c", "INT", "INT(11)")).type == pa.int32()


def test_enum_values_are_parsed_from_the_column_type_in_order() -> None:
    column = ColumnSpec("e", "enum", "enum('b','it''s','a,c','back\\\\slash')")
    assert column.allowed_values == ("b", "it's", "a,c", "back\\slash")


@pytest.mark.parametrize("column_type", ["YEAR", "FLOAT", "DOUBLE", "ENUM('a')", "VARCHAR(3)", "CHAR(2)", "TEXT",
                                         "BINARY(4)", "DECIMAL(5,2)", "TIME(3)", "SET('a','b')", "BIT(3)", "JSON"])
def test_only_integers_skip_the_binlog_conversion(column_type: str) -> None:
    """The relay skips the call where the converter is None; a type wrongly skipped once shipped YEAR 0000
    as 1900, so every type with any conversion must get one."""
    assert binlog_value_converter(col(column_type)) is not None


def test_binlog_year_converter_repairs_the_zero_year() -> None:
    convert = binlog_value_converter(col("YEAR"))
    assert convert is not None and (convert(1900), convert(1901), convert(2155)) == (0, 1901, 2155)


@pytest.mark.parametrize("column_type", ["TINYINT", "INT UNSIGNED", "BIGINT", "BIGINT UNSIGNED", "MEDIUMINT"])
def test_integer_binlog_values_are_already_their_json_form(column_type: str) -> None:
    assert binlog_value_converter(col(column_type)) is None
