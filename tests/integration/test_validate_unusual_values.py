"""``lakesync validate`` never cries wolf on unusual values, and names exactly the keys that differ.

A real MariaDB table holds 4-byte UTF-8 (emoji, mathematical letters), NUL characters inside strings, empty
strings, strings that differ only after a NUL, trailing spaces, and a column of most types of docs/types.md
with edge values. lakesync's full load writes it to Delta; the oracle (tests/oracle.py) says what is true;
``validate`` must agree with it: no difference after the load, exactly the changed key after one Delta row's
text is changed after its NUL (written directly with deltalake).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from lakesync.cli.main import main
from lakesync.core.config import load_pipeline
from lakesync.full_load.load import FullLoad
from tests.deltakit import delta_table
from tests.oracle import compare_table
from tests.oracle import quote_identifier as q

pytestmark = pytest.mark.integration

UNUSUAL = "unusual"     # single integer key: range chunks
TEXT_KEYED = "text_keyed"  # text key: hash buckets

TEXTS = ["😀 grinning", "𝐀𝐁𝐂 𝔘𝔫𝔦", "a\x00b", "a\x00c", "", "x\x00", "x", "trail   ", "\x00", "\x00\x00",
         "tab\tnew\nline", "'\"`\\", "ä€😀\x00😀", " lead", None]


COLUMNS = (
    "id INT PRIMARY KEY, vc VARCHAR(40), tx TEXT, ch CHAR(8), bn BINARY(4), vb VARBINARY(20), bl BLOB,"
    " d10 DECIMAL(10,2), d65 DECIMAL(65,30), ubig BIGINT UNSIGNED, big BIGINT, ti TINYINT, fl FLOAT, db DOUBLE,"
    " dt DATE, dtm DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(6), yr YEAR, bt BIT(10), en ENUM('a','😀',''),"
    " st SET('x','y','z'), js JSON, uu UUID, i6 INET6, pt POINT"
)


def unusual_rows() -> list[tuple]:
    rows = []
    for i, text in enumerate(TEXTS, start=1):
        nulls = text is None
        rows.append((
            i, text, None if nulls else text * 3, None if nulls else (text or "")[:8].rstrip(" ") or "",
            None if nulls else bytes([i % 256, 0, 0, 0]), None if nulls else (b"\x00" * (i % 3) + b"\xff"),
            None if nulls else b"" if i % 2 else b"\x00\x01\x00",
            None if nulls else f"{(-1) ** i * i}.0{i % 10}",
            None if nulls else ("-" if i % 2 else "") + "12345678901234567890123456789012345." + "1" * 29 + str(i % 10),
            None if nulls else (2**64 - i), None if nulls else (-(2**63) + i if i % 2 else 2**63 - i),
            None if nulls else (-128 if i % 2 else 127), None if nulls else 1.2345678 * i,
            None if nulls else (-1e308 if i % 2 else 5e-324), None if nulls else f"2026-0{1 + i % 9}-1{i % 10}",
            None if nulls else f"1000-01-01 00:00:0{i % 10}.00000{i % 10}",
            None if nulls else f"2038-01-19 03:14:0{i % 8}.99999{i % 10}",
            None if nulls else ("-838:59:59.000000" if i % 2 else f"00:00:0{i % 10}.25"),
            None if nulls else (1901 + i), None if nulls else (1023 if i % 2 else 0),
            None if nulls else ("😀" if i % 2 else ""), None if nulls else ("x,z" if i % 2 else ""),
            None if nulls else json.dumps({"t": text, "i": i}, ensure_ascii=False),
            None if nulls else f"0000000{i % 10}-0000-0000-0000-00000000000{i % 10}",
            None if nulls else f"::ffff:1.2.3.{i}", None if nulls else f"POINT({i} -{i})",
        ))
    return rows


@pytest.fixture
def loaded(stack, mariadb, fresh_database, tmp_path, monkeypatch):
    """The two tables, full-loaded into Delta by lakesync's full load; the pipeline file is on disk for the CLI."""
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    db = q(fresh_database)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {db}.{UNUSUAL} ({COLUMNS}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        marks = ", ".join(["%s"] * 25 + ["ST_GeomFromText(%s)"])
        cur.executemany(f"INSERT INTO {db}.{UNUSUAL} VALUES ({marks})", unusual_rows())
        # utf8mb4_bin: under the general collations all emoji are equal and would collide as keys
        cur.execute(f"CREATE TABLE {db}.{TEXT_KEYED} (k VARCHAR(40) PRIMARY KEY, v TEXT)"
                    " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        cur.executemany(f"INSERT INTO {db}.{TEXT_KEYED} VALUES (%s, %s)",
                        [(text, text) for text in TEXTS if text is not None and text != "trail   "])
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "unusual.yaml").write_text(yaml.safe_dump({
        "name": "unusual",
        "source": {"conn_id": "lakesync_demo_mysql", "database": fresh_database},
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "t"},
        "delta": {"root": str(tmp_path / "delta")},
        "snapshot": {"chunk_rows": 4},
        "state_dir": str(tmp_path / "state"),
    }))
    monkeypatch.setenv("LAKESYNC_PIPELINES_DIR", str(pipelines))
    pipeline = load_pipeline("unusual")
    FullLoad(pipeline).run()
    return pipeline


def oracle(mariadb, pipeline, table: str):
    with mariadb.connect() as conn:
        return compare_table(conn, pipeline.source.database, table, pipeline.delta.table_uri(table))


def validate_json(capsys, *args: str) -> tuple[int, dict[str, dict]]:
    code = main(["validate", "--pipeline", "unusual", "--settle-timeout", "0.5", "--rounds", "1", "--json",
                 "--no-store", *args])
    report = json.loads(capsys.readouterr().out)
    return code, {t["table"]: t for t in report["tables"]}


def reported_keys(result: dict, key: str) -> set[tuple]:
    return {(entry[key],) for kind in ("missing_in_delta", "extra_in_delta", "different") for entry in result[kind]}


def change_text_after_nul(pipeline, table: str, key_column: str, key, column: str) -> None:
    """Replace ``column`` of one Delta row by its value with the text after the first NUL changed."""
    uri = pipeline.delta.table_uri(table)
    rows = delta_table(uri)
    rows = rows.cast(pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type)
                                else f.with_type(pa.binary()) if pa.types.is_binary_view(f.type) else f
                                for f in rows.schema]))
    (old,) = rows.filter(pc.equal(rows[key_column], key))[column].to_pylist()
    assert "\x00" in old
    new = old.split("\x00", 1)[0] + "\x00" + "changed after the NUL"
    values = pc.if_else(pc.equal(rows[key_column], key), pa.scalar(new, rows.schema.field(column).type), rows[column])
    write_deltalake(uri, rows.set_column(rows.schema.get_field_index(column), column, values), mode="overwrite")


def reorder_delta_files(pipeline) -> None:
    """Same rows, other files: OPTIMIZE merges the full load's per-chunk files into one, and a rewrite puts
    the rows in another order (as MERGEs and compactions do). A row's fingerprint must not notice."""
    DeltaTable(pipeline.delta.table_uri(UNUSUAL)).optimize.compact()
    uri = pipeline.delta.table_uri(TEXT_KEYED)
    rows = delta_table(uri)
    write_deltalake(uri, rows.take(pa.array(range(rows.num_rows - 1, -1, -1))), mode="overwrite")


@pytest.mark.parametrize("reader", [[], ["--fast-read"]], ids=["plain-read", "fast-read"])
def test_unusual_values_validate_equal_after_the_full_load_and_a_compaction(loaded, mariadb, capsys, reader):
    for step in ("full load", "compaction"):
        if step == "compaction":
            reorder_delta_files(loaded)
        for table in (UNUSUAL, TEXT_KEYED):
            truth = oracle(mariadb, loaded, table)
            assert truth.identical, truth.describe()
        code, results = validate_json(capsys, *reader)
        statuses = {name: r["status"] for name, r in results.items()}
        assert statuses == {UNUSUAL: "equal", TEXT_KEYED: "equal"}, (step, results)
        assert code == 0
        assert results[UNUSUAL]["chunks"] >= 3  # 15 rows at 4 per chunk: rows of one chunk are hashed together


def test_a_change_after_a_nul_is_named_by_exactly_its_key(loaded, mariadb, capsys):
    change_text_after_nul(loaded, UNUSUAL, "id", 3, "vc")  # 'a\0b' -> 'a\0changed...', next to 'a\0c'
    truth = oracle(mariadb, loaded, UNUSUAL)
    assert truth.differing_keys() == {(3,)}, truth.describe()
    code, results = validate_json(capsys, "--tables", UNUSUAL)
    assert code == 3
    assert reported_keys(results[UNUSUAL], "id") == truth.differing_keys()
    assert results[UNUSUAL]["mismatched_keys"] == 1


def test_a_change_after_a_nul_in_a_text_key_table_is_named_by_exactly_its_key(loaded, mariadb, capsys):
    change_text_after_nul(loaded, TEXT_KEYED, "k", "x\x00", "v")
    truth = oracle(mariadb, loaded, TEXT_KEYED)
    assert truth.differing_keys() == {("x\x00",)}, truth.describe()
    code, results = validate_json(capsys, "--tables", TEXT_KEYED)
    assert code == 3
    assert reported_keys(results[TEXT_KEYED], "k") == truth.differing_keys()
    assert results[TEXT_KEYED]["mismatched_keys"] == 1
