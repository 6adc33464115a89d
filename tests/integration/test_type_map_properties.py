"""Property test of the type map against the real server (Hypothesis).

Each example is one table with a column for every MySQL/MariaDB type of docs/types.md, filled with
generated rows (edge values included: integer limits, 65-digit decimals, float32-exact floats, BIT(64),
zero dates under a permissive sql_mode, negative TIME with a fraction, YEAR 0000/1901/2155, 4-byte UTF-8,
NUL and empty strings, binary values with trailing NULs, empty SETs, JSON, UUID, INET4/6, a POINT), then
some of those rows updated and deleted. The table goes to Delta twice:

* by lakesync's full load, after the changes;
* by the binlog path: a full load of the empty table, then relay -> broker -> stream (Spark, in process).

Both Delta tables must equal the source according to the independent oracle (tests/oracle.py). Examples
are coarse (one table of many rows) so Spark runs stay few: the ``ci`` profile runs a few derandomized
examples (3), ``LAKESYNC_HYPOTHESIS_PROFILE=thorough`` many random ones (40); the profiles in
tests/conftest.py make a failure print the ``@reproduce_failure`` line that replays it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.full_load.load import FullLoad
from lakesync.relay import Relay
from lakesync.stream.app import run_stream
from tests.oracle import compare_table

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def _decimal(precision: int, scale: int) -> st.SearchStrategy[str]:
    whole = st.integers(0, 10 ** (precision - scale) - 1)
    fraction = st.integers(0, 10**scale - 1)
    edges = st.sampled_from(["0", "-0", "9" * (precision - scale) + ("." + "9" * scale if scale else ""),
                             "-" + "9" * (precision - scale) + ("." + "9" * scale if scale else "")])
    built = st.builds(lambda sign, w, f: f"{sign}{w}" + (f".{f:0{scale}d}" if scale else ""),
                      st.sampled_from(["", "-"]), whole, fraction)
    return st.one_of(edges, built)


def _ints(bits: int, unsigned: bool) -> st.SearchStrategy[int]:
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return st.one_of(st.sampled_from([low, high, 0]), st.integers(low, high))


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_SOME_TEXT = st.one_of(st.sampled_from(["", "\0", "😀🙂", "a\0b", "é"]), _TEXT)


def _datetime_text(low: dt.datetime, high: dt.datetime, digits: int) -> st.SearchStrategy[str]:
    return st.datetimes(low, high).map(lambda v: v.isoformat(sep=" ", timespec="microseconds")[: 20 + digits]
                                       if digits else v.isoformat(sep=" ", timespec="seconds"))


def _time_text() -> st.SearchStrategy[str]:
    def text(sign: str, micros: int) -> str:
        seconds, fraction = divmod(micros, 1_000_000)
        return f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"
    return st.builds(text, st.sampled_from(["", "-"]), st.integers(0, 838 * 3600 * 1_000_000 + 3599 * 1_000_000 + 999_999))


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=6).map(lambda v: json.dumps(v, ensure_ascii=False))


def _point(xy: tuple[float, float]) -> bytes:
    return struct.pack("<bIdd", 1, 1, *xy)


#: (column, DDL, strategy of the inserted value, the SQL placeholder). Values are sent as parameters.
COLUMNS: list[tuple[str, str, st.SearchStrategy[Any], str]] = [
    ("ti", "TINYINT", _ints(8, False), "%s"), ("tiu", "TINYINT UNSIGNED", _ints(8, True), "%s"),
    ("si", "SMALLINT", _ints(16, False), "%s"), ("siu", "SMALLINT UNSIGNED", _ints(16, True), "%s"),
    ("mi", "MEDIUMINT", _ints(24, False), "%s"), ("miu", "MEDIUMINT UNSIGNED", _ints(24, True), "%s"),
    ("i", "INT", _ints(32, False), "%s"), ("iu", "INT UNSIGNED", _ints(32, True), "%s"),
    ("bi", "BIGINT", _ints(64, False), "%s"), ("biu", "BIGINT UNSIGNED", _ints(64, True), "%s"),
    ("d65", "DECIMAL(65,30)", _decimal(65, 30), "%s"), ("d38", "DECIMAL(38,10)", _decimal(38, 10), "%s"),
    ("d10", "DECIMAL(10,0)", _decimal(10, 0), "%s"), ("d5", "DECIMAL(5,5)", _decimal(5, 5), "%s"),
    ("f", "FLOAT", st.floats(width=32, allow_nan=False, allow_infinity=False), "%s"),
    ("dbl", "DOUBLE", st.floats(allow_nan=False, allow_infinity=False), "%s"),
    ("b1", "BIT(1)", st.integers(0, 1), "%s"), ("b10", "BIT(10)", st.integers(0, 2**10 - 1), "%s"),
    ("b64", "BIT(64)", st.integers(0, 2**64 - 1), "%s"),
    ("da", "DATE", st.one_of(st.sampled_from(["0000-00-00", "2020-02-00", "1000-01-01", "9999-12-31"]),
                             st.dates(dt.date(1000, 1, 1)).map(str)), "%s"),
    ("dt0", "DATETIME", st.one_of(st.just("0000-00-00 00:00:00"),
                                  _datetime_text(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31), 0)), "%s"),
    ("dt6", "DATETIME(6)", _datetime_text(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59), 6), "%s"),
    ("ts3", "TIMESTAMP(3) NULL", st.one_of(st.just("0000-00-00 00:00:00"), _datetime_text(
        dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7), 3)), "%s"),
    ("t6", "TIME(6)", st.one_of(st.sampled_from(["-838:59:59", "838:59:59", "-00:00:00.000001", "0:00:00"]),
                                _time_text()), "%s"),
    ("y", "YEAR", st.one_of(st.sampled_from([0, 1901, 2155]), st.integers(1901, 2155)), "%s"),
    ("c", "CHAR(10)", _SOME_TEXT.map(lambda v: v[:10]), "%s"),
    ("vc", "VARCHAR(40)", _SOME_TEXT, "%s"),
    ("tx", "TEXT", _SOME_TEXT, "%s"),
    ("bn", "BINARY(6)", st.binary(max_size=6), "%s"),
    ("vb", "VARBINARY(20)", st.one_of(st.just(b"\0\0"), st.binary(max_size=20)), "%s"),
    ("bl", "BLOB", st.one_of(st.just(b"x\0"), st.binary(max_size=40)), "%s"),
    ("e", "ENUM('a','b','it''s')", st.sampled_from(["a", "b", "it's"]), "%s"),
    ("s", "SET('x','y','z')", st.sets(st.sampled_from("xyz")).map(lambda v: ",".join(sorted(v))), "%s"),
    ("j", "JSON", _JSON, "%s"),
    ("u", "UUID", st.uuids().map(str), "%s"),
    ("i4", "INET4", st.ip_addresses(v=4).map(str), "%s"),
    ("i6", "INET6", st.ip_addresses(v=6).map(str), "%s"),
    ("g", "POINT", st.tuples(st.floats(-1e9, 1e9), st.floats(-1e9, 1e9)).map(_point), "ST_GeomFromWKB(%s)"),
]

#: Two hand-picked rows of edge values, always tried first (in column order of COLUMNS).
_EDGES = [
    (-128, 255, -32768, 65535, -8388608, 16777215, -2**31, 2**32 - 1, -2**63, 2**64 - 1,
     "-" + "9" * 35 + "." + "9" * 30, "0.0000000000", "-9999999999", "-0.00001", -3.4028234663852886e38, 5e-324,
     1, 1023, 2**64 - 1, "0000-00-00", "0000-00-00 00:00:00", "9999-12-31 23:59:59.999999", "0000-00-00 00:00:00",
     "-00:00:01.250000", 0, "", "😀\0", "a\0b", b"\0", b"ab\0\0", b"x\0", "it's", "", '{"k": [1, null]}',
     "00000000-0000-0000-0000-000000000000", "0.0.0.0", "::", _point((0.0, -0.0))),
    (127, 0, 32767, 0, 8388607, 0, 2**31 - 1, 0, 2**63 - 1, 0,
     "9" * 35 + "." + "9" * 30, "-0.0000000001", "0", "0.99999", 1.1754943508222875e-38, -1.7976931348623157e308,
     0, 0, 0, "2020-02-00", "1000-01-01 00:00:00", "1000-01-01 00:00:00.000001", "2038-01-19 03:14:07.999",
     "-838:59:59.000000", 2155, " a", "", "\0", b"\0" * 6, b"", b"", "a", "x,y,z", "[]",
     "ffffffff-ffff-ffff-ffff-ffffffffffff", "255.255.255.255", "::ffff:1.2.3.4", _point((1e9, -1e9))),
]

_ROW = st.tuples(*(st.one_of(st.none(), strategy) for _, _, strategy, _ in COLUMNS))
#: One example: the rows to insert, then which of them to update (with new values) and which to delete.
_TABLE = st.lists(_ROW, min_size=1, max_size=40).flatmap(lambda rows: st.tuples(
    st.just(rows),
    st.lists(st.tuples(st.integers(0, len(rows) - 1), _ROW), max_size=8),
    st.sets(st.integers(0, len(rows) - 1), max_size=5),
))
_NAMES = ", ".join(f"`{name}`" for name, *_ in COLUMNS)
_INSERT = f"INSERT INTO typed (id, {_NAMES}) VALUES (%s, " + ", ".join(p for *_, p in COLUMNS) + ")"
_UPDATE = "UPDATE typed SET " + ", ".join(f"`{name}` = {p}" for name, _, _, p in COLUMNS) + " WHERE id = %s"


def _pipeline(folder: Path, name: str, database: str) -> Pipeline:
    server_id = random.randrange(5_000, 60_000)
    document = {
        "name": name, "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"tp{server_id}{uuid.uuid4().hex[:6]}"},
        "delta": {"root": str(folder / name / "delta")}, "state_dir": str(folder / name / "state"),
    }
    (folder / "pipelines").mkdir(parents=True, exist_ok=True)
    (folder / "pipelines" / f"{name}.yaml").write_text(yaml.safe_dump(document))
    return load_pipeline(name, folder / "pipelines")


@pytest.fixture
def env(stack, monkeypatch):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)


#: One example costs two full loads, a relay run and a Spark stream run (~15 s): fewer examples than the
#: profile's default, and more under LAKESYNC_HYPOTHESIS_PROFILE=thorough.
_EXAMPLES = 40 if os.environ.get("LAKESYNC_HYPOTHESIS_PROFILE") == "thorough" else 3


@settings(max_examples=_EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                          HealthCheck.data_too_large])
@given(example=_TABLE)
@example(example=(_EDGES, [(0, _EDGES[1])], {1}))
def test_full_load_and_binlog_path_both_equal_the_source_for_generated_values(
        example, env, mariadb, tmp_path_factory, spark) -> None:
    rows, updates, deletes = example
    database = f"tp_{uuid.uuid4().hex[:10]}"
    folder = tmp_path_factory.mktemp("typeprop")
    column_ddl = ", ".join(f"`{name}` {ddl}" for name, ddl, _, _ in COLUMNS)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    try:
        with mariadb.connect(database=database) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # zero dates, as a permissive server keeps them
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(f"CREATE TABLE typed (id INT PRIMARY KEY, {column_ddl})")
            streamed = _pipeline(folder, "streamed", database)
            FullLoad(pipeline=streamed).run()  # the empty table: the stream carries every row
            cur.executemany(_INSERT, [(key, *row) for key, row in enumerate(rows)])
            for key, row in updates:
                cur.execute(_UPDATE, (*row, key))
            for key in deletes:
                cur.execute("DELETE FROM typed WHERE id = %s", (key,))
        loaded = _pipeline(folder, "loaded", database)
        FullLoad(pipeline=loaded).run()
        Relay(streamed, heartbeat_seconds=0.3).run(stop_when_idle_seconds=1.0)
        run_stream(streamed, once=True, spark=spark)

        with mariadb.connect() as conn:
            for path, pipeline in (("full load", loaded), ("binlog path", streamed)):
                comparison = compare_table(conn, database, "typed", pipeline.delta.table_uri("typed"))
                assert comparison.identical, f"{path}:\n{comparison.describe()}"
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
