"""Settlement of data intervals against the real embedded MariaDB, landing in real Delta tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from lakesync_devkit.demo.database import create_demo_database

from lakesync.core.config import parse_pipeline
from lakesync.settlement.sync import settle_table, validate_interval
from tests.oracle import read_delta_table

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)
NOV_20 = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)


def _scan(uri, columns: list[str] | None = None) -> pa.Table:
    """Read with delta-rs's own reader (pyarrow's dataset reader can abort at exit, docs/sink.md)."""
    table = pa.RecordBatchReader.from_stream(DeltaTable(str(uri)).scan(columns=columns)).read_all()
    return table.cast(pa.schema([f.with_type(pa.string()) if f.type == pa.string_view() else f for f in table.schema]))


@pytest.fixture
def pipeline(stack, fresh_database, tmp_path, monkeypatch, request):
    """The settlement pipeline; ``delta.writer`` is ``request.param`` when a test parametrizes it
    (``indirect=True``), delta-rs otherwise."""
    writer = getattr(request, "param", "delta_rs")
    if writer == "delta_spark":
        request.getfixturevalue("spark")  # the writer opens a session of the running one
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    with stack.mariadb.connect() as conn:
        create_demo_database(conn, fresh_database)
    return parse_pipeline(
        {
            "name": "settle",
            "source": {"conn_id": "lakesync_demo_mysql", "database": fresh_database},
            "tables": {"overrides": {"transactions": {"watermark": {"column": "updated_at"}}}},
            "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "t"},
            "delta": {"root": str(tmp_path / "delta"), "writer": writer},
            "settlement": {"safety_window_seconds": 60},
            "state_dir": str(tmp_path / "state"),
        },
        source_name="settle.yaml",
    )


def _book(mariadb, database: str, rows: list[tuple[int, str, str]]) -> None:
    """Insert transactions (id, amount, updated_at) with explicit watermarks."""
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO `{database}`.transactions (id, account_no, amount, kind, reference, booked_at, updated_at)"
            " VALUES (%s, 'AC0000000001', %s, 'deposit', 'ref', %s, %s)",
            [(i, amount, ts, ts) for i, amount, ts in rows],
        )


def _rows(pipeline) -> list[tuple[int, str]]:
    table = read_delta_table(pipeline.delta.table_uri("transactions"))
    return sorted((row["id"], str(row["amount"])) for row in table.to_pylist())


def _metadata(commit: dict) -> dict:
    """A commit's lakesync keys, read as each writer stores them: delta-rs as keys of the commit info,
    delta-spark as one JSON object in ``userMetadata``."""
    user = commit.get("userMetadata")
    return {**commit, **json.loads(user)} if isinstance(user, str) and user.startswith("{") else commit


def _writers(uri: str) -> set[str]:
    """Which library made each commit of the table after its creation, by ``engineInfo``."""
    engines = {entry.get("engineInfo", "") for entry in DeltaTable(uri).history()}
    return {"delta_spark" if "Delta-Lake/" in engine else "delta_rs" if engine.startswith("delta-rs") else engine
            for engine in engines}


BOTH_WRITERS = pytest.mark.parametrize("pipeline", ["delta_rs", "delta_spark"], indirect=True)


def test_interval_reads_start_minus_window_to_end_minus_window(pipeline, mariadb, fresh_database):
    _book(mariadb, fresh_database, [
        (1, "1.00", "2026-11-19 01:58:59"),   # before the window: the previous interval's
        (2, "2.00", "2026-11-19 01:59:00"),   # first second of the window (start - 60 s)
        (3, "3.00", "2026-11-20 01:58:59.999999"),
        (4, "4.00", "2026-11-20 01:59:00"),   # the safety window: left to the next interval
    ])
    result = settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    assert (result.source_rows, result.inserted) == (2, 2)
    assert _rows(pipeline) == [(2, "2.00"), (3, "3.00")]
    following = settle_table(pipeline, "transactions", interval_start=NOV_20, interval_end=NOV_20 + DAY)
    assert following.inserted == 1
    assert _rows(pipeline) == [(2, "2.00"), (3, "3.00"), (4, "4.00")]


@BOTH_WRITERS
def test_rerun_of_an_interval_changes_nothing(pipeline, mariadb, fresh_database):
    _book(mariadb, fresh_database, [(i, f"{i}.50", "2026-11-19 12:00:00") for i in range(1, 51)])
    first = settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    version = DeltaTable(pipeline.delta.table_uri("transactions")).version()
    again = settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    assert (first.inserted, first.delta_version, first.run) == (50, version, 1)
    assert (again.changed, again.delta_version, again.run) == (0, None, 1)
    assert DeltaTable(pipeline.delta.table_uri("transactions")).version() == version
    assert validate_interval(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)[
        "differing"] == 0


@BOTH_WRITERS
def test_rerun_after_source_changes_replaces_the_interval_effect(pipeline, mariadb, fresh_database):
    _book(mariadb, fresh_database, [(i, "1.00", "2026-11-19 12:00:00") for i in range(1, 6)])
    settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{fresh_database}`.transactions SET amount = 9.00, updated_at = updated_at WHERE id = 2")
        cur.execute(f"DELETE FROM `{fresh_database}`.transactions WHERE id = 5")
        cur.execute(f"UPDATE `{fresh_database}`.transactions SET updated_at = '2026-11-21 08:00:00' WHERE id = 3")
    repair = settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    assert (repair.updated, repair.deleted, repair.run) == (2, 1, 2)  # id 2 changed, id 3 moved on, id 5 gone
    assert _rows(pipeline) == [(1, "1.00"), (2, "9.00"), (3, "1.00"), (4, "1.00")]
    history = _metadata(DeltaTable(pipeline.delta.table_uri("transactions")).history(1)[0])
    assert history["lakesync.settlement.interval_start"] == (NOV_20 - DAY).isoformat()
    assert history["lakesync.settlement.run"] == "2"
    assert _writers(pipeline.delta.table_uri("transactions")) == {pipeline.delta.writer}


@BOTH_WRITERS
def test_empty_interval_is_still_marked_settled_once(pipeline, mariadb, fresh_database):
    _book(mariadb, fresh_database, [(1, "1.00", "2026-11-19 12:00:00")])
    settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    empty = settle_table(pipeline, "transactions", interval_start=NOV_20, interval_end=NOV_20 + DAY)
    again = settle_table(pipeline, "transactions", interval_start=NOV_20, interval_end=NOV_20 + DAY)
    table = DeltaTable(pipeline.delta.table_uri("transactions"))
    assert empty.delta_version == table.version() and again.delta_version is None
    assert table.transaction_version(f"settlement:transactions:{NOV_20:%Y%m%dT%H%M%SZ}") == 1


def test_cli_settles_every_scheduled_interval_in_the_range(pipeline, mariadb, fresh_database, tmp_path):
    from lakesync.cli.main import main

    _book(mariadb, fresh_database, [(1, "1.00", "2026-11-17 12:00:00"), (2, "2.00", "2026-11-18 12:00:00"),
                                    (3, "3.00", "2026-11-19 12:00:00")])
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "settle.yaml").write_text(yaml.safe_dump(pipeline.model_dump(mode="json")))
    args = ["settle", "--pipeline", "settle", "--pipelines-dir", str(folder),
            "--from", "2026-11-18T02:00Z", "--to", "2026-11-20T02:00Z"]
    assert main(args) == 0
    assert _rows(pipeline) == [(2, "2.00"), (3, "3.00")]  # the 17th lies before the first interval
    commits = DeltaTable(pipeline.delta.table_uri("transactions")).history()
    assert sorted(c["lakesync.settlement.interval_start"][:10] for c in commits) == ["2026-11-18", "2026-11-19"]


@BOTH_WRITERS
def test_settlement_never_overwrites_a_newer_stream_change_and_leaves_tombstones(pipeline, mariadb, fresh_database):
    from lakesync.sink.delta import DeltaSink
    from lakesync.sink.tombstones import tombstone_uri

    _book(mariadb, fresh_database, [(1, "1.00", "2026-11-19 12:00:00"), (2, "2.00", "2026-11-19 12:00:00")])
    settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    uri = pipeline.delta.table_uri("transactions")
    current = _scan(uri)
    stream_change = current.take([i for i, key in enumerate(current["id"].to_pylist()) if key == 1])
    stream_change = stream_change.set_column(stream_change.schema.get_field_index("amount"), "amount",
                                             pa.array([Decimal("7.77")], pa.decimal128(18, 2)))
    newer = "99999999.000000000000.000001"  # a position after anything the settlement can read
    stream_change = stream_change.set_column(stream_change.schema.get_field_index("_lakesync_pos"),
                                             "_lakesync_pos", pa.array([newer]))
    DeltaSink(uri, key_columns=["id"]).apply_changes(stream_change, app_id="test-stream", batch_version=1)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DELETE FROM `{fresh_database}`.transactions WHERE id = 2")
    repair = settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    assert repair.deleted == 1
    assert _rows(pipeline) == [(1, "7.77")]  # the newer stream change stays; id 2 is gone
    tombstones = _scan(tombstone_uri(uri), ["id"]).to_pylist()
    assert tombstones == [{"id": 2}]


def test_composite_char_key_table_is_settled_and_repaired(pipeline, mariadb, fresh_database):
    document = pipeline.model_dump(mode="json")
    document["tables"]["overrides"]["daily_balances"] = {"watermark": {"column": "updated_at"}}
    balances = parse_pipeline(document, source_name="settle.yaml")
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO `{fresh_database}`.daily_balances VALUES (%s, %s, %s, '2026-11-19 23:00:00')",
            [("AC0000000001", "2026-11-19", "10.00"), ("AC0000000002", "2026-11-19", "20.00")],
        )
    first = settle_table(balances, "daily_balances", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{fresh_database}`.daily_balances SET closing_balance = 25.00, "
                    "updated_at = updated_at WHERE account_no = 'AC0000000002'")
    repair = settle_table(balances, "daily_balances", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    again = settle_table(balances, "daily_balances", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    assert (first.inserted, repair.updated, repair.inserted, again.changed) == (2, 1, 0, 0)
    rows = _scan(balances.delta.table_uri("daily_balances"), ["account_no", "closing_balance"]).to_pylist()
    assert sorted((r["account_no"], str(r["closing_balance"])) for r in rows) == [
        ("AC0000000001", "10.00"), ("AC0000000002", "25.00")]


def test_streamed_table_loaded_by_the_sink_is_compared_and_repaired_not_reloaded(pipeline, mariadb,
                                                                                  fresh_database):
    from lakesync.sink.delta import DeltaSink
    from lakesync.source.server_checks import current_position
    from tests.deltakit import source_arrow

    _book(mariadb, fresh_database, [(i, f"{i}.00", "2026-11-19 12:00:00") for i in range(1, 21)])
    uri = pipeline.delta.table_uri("transactions")
    with mariadb.connect() as conn:
        position = current_position(conn)
        rows = source_arrow(conn, fresh_database, "transactions")
    DeltaSink(uri, key_columns=["id"]).write_snapshot(rows.to_batches(), schema=rows.schema, position=position,
                                                      snapshot_ts_ms=0)
    with mariadb.connect() as conn, conn.cursor() as cur:  # changes the stream "missed"
        cur.execute(f"UPDATE `{fresh_database}`.transactions SET amount = 99.00, updated_at = updated_at "
                    "WHERE id IN (4, 5)")
    loaded_version = DeltaTable(uri).version()
    repair = settle_table(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)
    assert (repair.source_rows, repair.updated, repair.inserted, repair.deleted) == (20, 2, 0, 0)
    assert DeltaTable(uri).version() == loaded_version + 1  # one commit, touching the two differing rows
    assert dict(_rows(pipeline))[4] == "99.00"
    assert validate_interval(pipeline, "transactions", interval_start=NOV_20 - DAY, interval_end=NOV_20)[
        "differing"] == 0
