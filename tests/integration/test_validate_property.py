"""Property: ``validate_pipeline`` names exactly the keys the oracle says differ, on random tables.

Each example is a real MariaDB table (an integer key, cut into key-range chunks, or a text key, hash
buckets) with random unusual text (NUL, emoji, mathematical letters, empty, trailing spaces), binaries,
decimals, doubles, BIGINTs, DATETIMEs and NULLs, full-loaded by lakesync into Delta. Then Delta is left
equal or gets random injected differences, written directly with deltalake: a changed value, a missing row,
an extra row, a duplicated key. The oracle (tests/oracle.py) is the truth: validate's differing keys must be
exactly its ``differing_keys()``, and "no difference" exactly when it says identical.

The budget comes from the Hypothesis profile (``LAKESYNC_HYPOTHESIS_PROFILE``, tests/conftest.py): few
derandomized examples in CI, many random ones with ``thorough``. Hypothesis prints the falsifying example.
"""

from __future__ import annotations

import datetime as dt
import itertools
import shutil
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.core.config import parse_pipeline
from lakesync.core.positions import MIN_KEY
from lakesync.full_load.load import FullLoad
from lakesync.validation.validate import validate_pipeline
from tests.deltakit import delta_table
from tests.oracle import compare_table

pytestmark = pytest.mark.integration

ALPHABET = ["a", "b", "A", " ", "\x00", "\t", "é", "€", "😀", "𝐀", "'", "\\", "\u200b"]
TEXT = st.text(alphabet=st.sampled_from(ALPHABET), max_size=6)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "txt": st.none() | TEXT,
    "raw": st.none() | st.binary(max_size=6),
    "num": st.none() | st.decimals(min_value=Decimal("-999999999.999"), max_value=Decimal("999999999.999"),
                                   places=3, allow_nan=False, allow_infinity=False),
    "dbl": st.none() | st.floats(allow_nan=False, allow_infinity=False),
    "big": st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "at": st.none() | st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 12, 31)),
}
COLUMNS = ("txt VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin, raw VARBINARY(10), num DECIMAL(12,3),"
           " dbl DOUBLE, big BIGINT, at DATETIME(6)")
KEYS = {"int": (st.integers(min_value=-(2**31), max_value=2**31 - 1), "k INT PRIMARY KEY"),
        # nopad (the whole table: the loader cannot mix collations): 'x' and 'x ' are different keys
        "text": (TEXT, "k VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PRIMARY KEY")}
NAMES = itertools.count()


@dataclass
class Case:
    key_kind: str
    rows: list[dict[str, Any]]
    #: ("change", row index, column, new value) | ("drop", row index) | ("extra", row) | ("duplicate", row index)
    mutations: list[tuple]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    key_kind = draw(st.sampled_from(sorted(KEYS)))
    keys = draw(st.lists(KEYS[key_kind][0], max_size=12, unique=True))
    rows = [{"k": key, **{name: draw(values) for name, values in VALUES.items()}} for key in keys]
    mutations: list[tuple] = []
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        kind = draw(st.sampled_from(["change", "drop", "extra", "duplicate"] if rows else ["extra"]))
        if kind == "extra":
            key = draw(KEYS[key_kind][0].filter(lambda k: k not in keys))
            keys.append(key)
            mutations.append((kind, {"k": key, **{name: draw(values) for name, values in VALUES.items()}}))
        elif kind == "change":
            column = draw(st.sampled_from(sorted(VALUES)))
            mutations.append((kind, draw(st.integers(0, len(rows) - 1)), column, draw(VALUES[column])))
        else:
            mutations.append((kind, draw(st.integers(0, len(rows) - 1))))
    return Case(key_kind, rows, mutations)


@pytest.fixture(scope="module")
def pipeline(stack, mariadb, tmp_path_factory):
    name = f"t_prop_{next(NAMES)}_{id(stack) % 10_000}"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    root = tmp_path_factory.mktemp("validate_property")
    with pytest.MonkeyPatch.context() as patch:
        for variable, value in stack.connection_env().items():
            patch.setenv(variable, value)
        yield parse_pipeline({
            "name": "prop", "source": {"conn_id": "lakesync_demo_mysql", "database": name},
            "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "t"},
            "delta": {"root": str(root / "delta")}, "snapshot": {"chunk_rows": 3},
            "state_dir": str(root / "state"),
        }, source_name="prop.yaml")
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def inject(uri: str, mutations: list[tuple]) -> None:
    """Apply the mutations to the Delta table's rows and write them back (same schema, same positions)."""
    table = delta_table(uri)
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type)
                        else f.with_type(pa.binary()) if pa.types.is_binary_view(f.type) else f for f in table.schema])
    rows = table.cast(schema).to_pylist()
    dropped: set[int] = set()
    for mutation in mutations:
        kind = mutation[0]
        if kind == "change":
            _, index, column, value = mutation
            rows[index][column] = value
        elif kind == "drop":
            dropped.add(mutation[1])
        elif kind == "duplicate":
            rows.append(dict(rows[mutation[1]]))
        else:
            rows.append({**mutation[1], "_lakesync_pos": MIN_KEY, "_lakesync_op": "r", "_lakesync_ts_ms": 0})
    kept = [row for i, row in enumerate(rows) if i not in dropped]
    write_deltalake(uri, pa.Table.from_pylist(kept, schema=schema), mode="overwrite")


def reported_keys(result) -> set[tuple]:
    return {(entry["k"],) for entry in (*result.missing_in_delta, *result.extra_in_delta, *result.different)}


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases())
def test_validate_names_exactly_the_keys_the_oracle_says_differ(pipeline, mariadb, case):
    table = f"p{next(NAMES)}"
    database = pipeline.source.database
    uri = pipeline.delta.table_uri(table)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` ({KEYS[case.key_kind][1]}, {COLUMNS})")
        cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        [tuple(row.values()) for row in case.rows])
        conn.commit()
    try:
        FullLoad(pipeline, tables=[table]).run()
        if case.mutations:
            inject(uri, case.mutations)
        with mariadb.connect(database) as conn:
            truth = compare_table(conn, database, table, uri)
        (result,) = validate_pipeline(pipeline, tables=[table], settle_timeout_s=0, rounds=1, store=False).tables
        assert result.error is None, result.error
        assert reported_keys(result) == truth.differing_keys(), truth.describe()
        assert result.mismatched_keys == len(truth.differing_keys())
        assert (result.status == "equal") == truth.identical
    finally:
        with mariadb.connect(database) as conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE `{table}`")
        shutil.rmtree(uri, ignore_errors=True)
