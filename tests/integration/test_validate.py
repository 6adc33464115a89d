"""``lakesync validate`` against the real embedded MariaDB and real Delta tables.

The Delta tables are built here with ``write_deltalake`` from rows read through lakesync's type map
(``tests.deltakit.source_arrow``: what the sink stores: the source columns plus ``_lakesync_pos``/``_lakesync_op``/``_lakesync_ts_ms``), so these
tests don't depend on the stream. Table and column names are hostile on purpose (spaces, backticks, quotes,
non-ASCII letters): every identifier must be quoted on both sides.
"""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from deltalake import write_deltalake

from lakesync.cli.main import main
from lakesync.core.config import load_pipeline
from lakesync.source.server_checks import current_position
from lakesync.stream.progress import StreamProgress
from lakesync.validation.store import last_results
from lakesync.validation.validate import validate_pipeline
from tests.deltakit import delta_table, source_arrow
from tests.oracle import quote_identifier as q

pytestmark = pytest.mark.integration

LEDGER = "le`dger 'q\" ä"            # single integer key: range chunks
ID, NAME, AMOUNT = "id `x", "näme 'q\"", "amount €"
CODES = "codes ö"                     # composite text key: hash buckets
AUDIT = "audit log"                   # no key: append-only change log


@pytest.fixture
def pipeline(stack, fresh_database, tmp_path, monkeypatch, mariadb):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    with mariadb.connect() as conn, conn.cursor() as cur:
        db = q(fresh_database)
        cur.execute(f"CREATE TABLE {db}.{q(LEDGER)} ({q(ID)} BIGINT UNSIGNED PRIMARY KEY, {q(NAME)} VARCHAR(40),"
                    f" {q(AMOUNT)} DECIMAL(18,2), big BIGINT NULL, booked DATETIME(6), stamp TIMESTAMP(3) NULL,"
                    f" ratio FLOAT, blob_ BLOB)")
        cur.executemany(
            f"INSERT INTO {db}.{q(LEDGER)} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [(i, f"name {i} ' \" `", f"{i}.25", None if i % 3 else 2**62 + i, f"2026-11-0{1 + i % 9} 10:00:00.123456",
              "2026-11-20 01:02:03.456", i / 7, bytes([i % 256, 0, 255])) for i in range(1, 121)],
        )
        cur.execute(f"CREATE TABLE {db}.{q(CODES)} (region CHAR(3), `co de` VARCHAR(20), label TEXT,"
                    f" PRIMARY KEY (region, `co de`))")
        cur.executemany(f"INSERT INTO {db}.{q(CODES)} VALUES (%s, %s, %s)",
                        [(r, f"c{i}", f"label {r}{i}") for r in ("EU", "US", "ÄÖ") for i in range(20)])
        cur.execute(f"CREATE TABLE {db}.{q(AUDIT)} (msg VARCHAR(20))")
        cur.executemany(f"INSERT INTO {db}.{q(AUDIT)} VALUES (%s)", [("a",), ("b",), ("b",)])
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    document = {
        "name": "checks",
        "source": {"conn_id": "lakesync_demo_mysql", "database": fresh_database},
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "t"},
        "delta": {"root": str(tmp_path / "delta")},
        "snapshot": {"chunk_rows": 25},
        "state_dir": str(tmp_path / "state"),
    }
    (pipelines / "checks.yaml").write_text(yaml.safe_dump(document, allow_unicode=True))
    monkeypatch.setenv("LAKESYNC_PIPELINES_DIR", str(pipelines))
    pipeline = load_pipeline("checks")
    for table in (LEDGER, CODES, AUDIT):
        load_delta(pipeline, mariadb, table)
    return pipeline


def load_delta(pipeline, mariadb, table: str) -> str:
    """Write the source table to Delta as the full load would: every row tagged with the current position."""
    with mariadb.connect() as conn:
        position = current_position(conn).key()
        rows = source_arrow(conn, pipeline.source.database, table)
    tagged = rows.append_column("_lakesync_pos", pa.array([position] * rows.num_rows, pa.string())) \
        .append_column("_lakesync_op", pa.array(["r"] * rows.num_rows, pa.string())) \
        .append_column("_lakesync_ts_ms", pa.array([0] * rows.num_rows, pa.int64()))
    write_deltalake(pipeline.delta.table_uri(table), tagged, mode="overwrite")
    return position


def rewrite_delta(pipeline, table: str, rows: pa.Table) -> None:
    write_deltalake(pipeline.delta.table_uri(table), rows, mode="overwrite")


def run_cli(*args: str) -> int:
    return main(["validate", "--pipeline", "checks", "--settle-timeout", "1", *args])


@pytest.mark.parametrize("reader", [[], ["--fast-read"]], ids=["plain-read", "fast-read"])
def test_identical_tables_pass_with_exit_code_0(pipeline, capsys, reader):
    assert run_cli("--json", *reader) == 0
    report = json.loads(capsys.readouterr().out)
    by_table = {t["table"]: t for t in report["tables"]}
    assert by_table[LEDGER]["status"] == "equal"
    assert by_table[LEDGER]["source_rows"] == by_table[LEDGER]["delta_rows"] == 120
    assert by_table[LEDGER]["chunks"] >= 4  # 120 rows at 25 per chunk
    assert by_table[CODES]["status"] == "equal" and by_table[CODES]["key_columns"] == ["region", "co de"]
    assert by_table[AUDIT]["status"] == "not_comparable"
    assert "append-only" in by_table[AUDIT]["note"]


def test_changed_value_in_delta_is_reported_with_its_key_and_exit_code_3(pipeline, capsys):
    rows = delta_table(pipeline.delta.table_uri(LEDGER))
    amounts = pc.if_else(pc.equal(rows[ID], 42), pa.scalar(99, rows.schema.field(AMOUNT).type), rows[AMOUNT])
    rewrite_delta(pipeline, LEDGER, rows.set_column(rows.schema.get_field_index(AMOUNT), AMOUNT, amounts))
    assert run_cli("--json", "--tables", LEDGER) == 3
    captured = capsys.readouterr()
    (result,) = json.loads(captured.out)["tables"]
    assert result["status"] == "mismatch"
    assert result["different"] == [{ID: 42}]
    assert result["mismatched_keys"] == 1 and result["chunks_mismatched"] == 1
    assert "differ" in captured.err


def test_missing_and_extra_rows_are_found_by_key(pipeline):
    rows = delta_table(pipeline.delta.table_uri(LEDGER))
    without_7 = rows.filter(pc.not_equal(rows[ID], 7))
    extra = rows.filter(pc.equal(rows[ID], 8))
    extra = extra.set_column(0, rows.schema.field(ID), pa.array([10_000], rows.schema.field(ID).type))
    rewrite_delta(pipeline, LEDGER, pa.concat_tables([without_7, extra]))
    report = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=0.5, rounds=2)
    (result,) = report.tables
    assert result.missing_in_delta == [{ID: 7}]
    assert result.extra_in_delta == [{ID: 10_000}]
    assert result.different == []
    assert not report.matches
    with pytest.raises(Exception) as raised:
        report.raise_for_mismatch()
    assert raised.value.exit_code == 3


def test_difference_in_a_hash_bucketed_table_names_the_composite_key(pipeline):
    rows = delta_table(pipeline.delta.table_uri(CODES))
    changed = pc.if_else(pc.and_(pc.equal(rows["region"], "ÄÖ"), pc.equal(rows["co de"], "c3")), "oops", rows["label"])
    rewrite_delta(pipeline, CODES, rows.set_column(rows.schema.get_field_index("label"), "label", changed))
    (result,) = validate_pipeline(pipeline, tables=[CODES], settle_timeout_s=0.5, rounds=1).tables
    assert result.different == [{"region": "ÄÖ", "co de": "c3"}]
    assert result.chunks > 1


def test_tombstone_in_delta_counts_as_missing_row(pipeline):
    rows = delta_table(pipeline.delta.table_uri(LEDGER))
    ops = pc.if_else(pc.equal(rows[ID], 5), "d", rows["_lakesync_op"])
    rewrite_delta(pipeline, LEDGER, rows.set_column(rows.schema.get_field_index("_lakesync_op"), "_lakesync_op", ops))
    (result,) = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=0.5, rounds=1).tables
    assert result.missing_in_delta == [{ID: 5}]
    assert result.delta_rows == 119


def test_change_not_yet_streamed_is_not_a_mismatch_once_the_stream_catches_up(pipeline, mariadb):
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE {q(pipeline.source.database)}.{q(LEDGER)} SET {q(NAME)} = 'renamed' WHERE {q(ID)} = 3")

    waiting, finished = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def said(table: str, what: str) -> None:  # validate's progress line: round 1 found the difference
        if "waiting for the stream" in what:
            waiting.set()

    def stream_catches_up() -> None:
        """Apply the change to Delta only once validate waits for the stream (after its first round)."""
        waiting.wait(300)
        if finished.is_set():
            return  # validate never waited: the assertions below say so
        try:
            position = load_delta(pipeline, mariadb, LEDGER)
            progress = StreamProgress.load(pipeline.pipeline_state_dir)
            progress.record(LEDGER, batch_id=1, rows=1, position=position, source_ts_ms=int(time.time() * 1000))
            progress.save(pipeline.pipeline_state_dir)
        except BaseException as exc:  # reported by the test's assertions
            failed.append(exc)

    stream = threading.Thread(target=stream_catches_up)
    stream.start()
    try:
        report = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=60, rounds=3, progress=said)
    finally:
        finished.set()
        waiting.set()
        stream.join()
    assert not failed, failed
    (result,) = report.tables
    # Equal only after the thread wrote Delta: it waited for the stream; and the wait ended because the
    # stream reached the snapshot position, not because the settle timeout ran out.
    assert result.status == "equal", (result.describe(), result.rounds, result.note)
    assert result.rounds >= 2 and result.chunks_mismatched == 1
    assert not result.stream_behind


def test_delta_row_newer_than_the_snapshot_is_in_flight_not_a_mismatch(pipeline):
    rows = delta_table(pipeline.delta.table_uri(LEDGER))
    newer = pc.if_else(pc.equal(rows[ID], 9), "99999999.000000000000.000001", rows["_lakesync_pos"])
    names = pc.if_else(pc.equal(rows[ID], 9), "changed later", rows[NAME])
    rows = rows.set_column(rows.schema.get_field_index("_lakesync_pos"), "_lakesync_pos", newer)
    rewrite_delta(pipeline, LEDGER, rows.set_column(rows.schema.get_field_index(NAME), NAME, names))
    (result,) = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=0.5, rounds=2).tables
    assert result.status == "equal"
    assert result.in_flight_keys == 1


def test_results_land_in_the_validation_table_and_in_status(pipeline, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")
    rows = delta_table(pipeline.delta.table_uri(LEDGER))
    rewrite_delta(pipeline, LEDGER, rows.filter(pc.not_equal(rows[ID], 11)))
    report = validate_pipeline(pipeline, settle_timeout_s=0.5, rounds=1)
    stored = last_results(pipeline)
    assert stored[LEDGER]["run_id"] == report.run_id
    assert stored[LEDGER]["status"] == "mismatch"
    assert stored[LEDGER]["sample"]["missing_in_delta"] == [{ID: 11}]
    assert stored[CODES]["status"] == "equal" and stored[AUDIT]["status"] == "not_comparable"

    assert main(["status", "--pipeline", "checks", "--json", "--no-relay"]) == 0
    status = json.loads(capsys.readouterr().out)
    entry = next(t for t in status["tables"] if t["table"] == LEDGER)
    assert entry["key_columns"] == [ID] and entry["semantics"] == "exactly_once"
    assert entry["last_validation"]["status"] == "mismatch"
    assert entry["delta"]["rows"] == 119 and entry["delta"]["max_position"]
    assert {"full_load", "stream", "lagging"} <= set(entry)
    assert main(["status", "--pipeline", "checks", "--no-relay"]) == 0
    assert LEDGER in capsys.readouterr().out


def test_with_the_real_sink_a_newer_tombstone_is_in_flight_and_an_older_one_is_a_missing_row(pipeline, mariadb):
    from lakesync.core.positions import SourcePosition
    from lakesync.sink import DeltaSink

    uri = pipeline.delta.table_uri(LEDGER)
    with mariadb.connect() as conn:
        position = current_position(conn)
        rows = source_arrow(conn, pipeline.source.database, LEDGER)
    sink = DeltaSink(uri, key_columns=[ID])
    sink.write_snapshot(rows.to_batches(), schema=rows.schema, position=position, snapshot_ts_ms=0)

    def delete(key: int, at: SourcePosition, version: int) -> None:
        change = pa.table({ID: pa.array([key], rows.schema.field(ID).type), "_lakesync_pos": [at.key()],
                           "_lakesync_op": ["d"], "_lakesync_ts_ms": [0]})
        sink.apply_changes(change, app_id="test", batch_version=version)

    delete(20, SourcePosition(position.file, position.offset + 10**9, 1), 1)  # after any snapshot we take
    (result,) = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=0.5, rounds=2).tables
    assert result.status == "equal" and result.in_flight_keys == 1

    with mariadb.connect() as conn, conn.cursor() as cur:  # moves the binlog on past the delete below
        cur.execute(f"INSERT INTO {q(pipeline.source.database)}.{q(AUDIT)} VALUES ('later')")
    delete(21, SourcePosition(position.file, position.offset + 1, 1), 2)  # before our snapshot: really gone
    (result,) = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=0.5, rounds=2).tables
    assert result.missing_in_delta == [{ID: 21}]


def test_a_table_never_loaded_is_an_error_that_names_what_to_do(pipeline, mariadb):
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {q(pipeline.source.database)}.`new one` (id INT PRIMARY KEY)")
    report = validate_pipeline(pipeline, settle_timeout_s=0.5, rounds=1)
    by_table = {t.table: t for t in report.tables}
    assert by_table["new one"].status == "error" and "run the full load" in by_table["new one"].error
    assert by_table[LEDGER].status == "equal"  # the other tables are still checked
    assert not report.matches


def test_lock_free_snapshot_is_tagged_no_later_than_its_start(pipeline, mariadb):
    """The fallback for MySQL users without RELOAD: the tag may be early (safe), never late."""
    from lakesync.core.connections import mysql_connection
    from lakesync.validation.snapshot import lock_free_snapshot

    with mariadb.connect() as conn:
        before = current_position(conn)
    snapshot = lock_free_snapshot(mysql_connection(pipeline), pipeline.source.database)
    try:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {q(pipeline.source.database)}.{q(AUDIT)} VALUES ('after')")
        with snapshot.connections[0].cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {q(pipeline.source.database)}.{q(AUDIT)}")
            assert cur.fetchone()[0] == 3  # the insert after the snapshot is not seen
    finally:
        snapshot.close()
    assert before <= snapshot.position


def test_busy_source_with_a_lagging_stream_is_not_reported_as_a_mismatch(pipeline, mariadb):
    """Updates, inserts and deletes keep coming while a stand-in stream applies them through the real sink
    about half a second late, with their positions; validation must see through the churn."""
    import random

    from lakesync.core.types import arrow_table_from_db_rows
    from lakesync.sink import DeltaSink
    from lakesync.source import queries
    from lakesync.source.schema import read_table_columns

    db, uri = pipeline.source.database, pipeline.delta.table_uri(LEDGER)
    with mariadb.connect() as conn:
        position = current_position(conn)
        rows = source_arrow(conn, db, LEDGER)
        columns = read_table_columns(conn, db, LEDGER)
    sink = DeltaSink(uri, key_columns=[ID])
    sink.write_snapshot(rows.to_batches(), schema=rows.schema, position=position, snapshot_ts_ms=0)
    meta = {"_lakesync_op": pa.string(), "_lakesync_pos": pa.string(), "_lakesync_ts_ms": pa.int64()}
    pending: list[tuple[float, pa.Table]] = []
    stop = threading.Event()
    lock = threading.Lock()

    def source_writer() -> None:
        rng = random.Random(7)
        next_id = 1000
        with mariadb.connect() as conn, conn.cursor() as cur:
            while not stop.is_set():
                roll = rng.random()
                key = rng.randint(1, 120)
                if roll < 0.6:
                    cur.execute(f"UPDATE {q(db)}.{q(LEDGER)} SET {q(NAME)} = %s WHERE {q(ID)} = %s",
                                (f"v{rng.random()}", key))
                elif roll < 0.8:
                    key, next_id = next_id, next_id + 1
                    cur.execute(f"INSERT INTO {q(db)}.{q(LEDGER)} ({q(ID)}, {q(NAME)}) VALUES (%s, 'new')", (key,))
                else:
                    cur.execute(f"DELETE FROM {q(db)}.{q(LEDGER)} WHERE {q(ID)} = %s", (key,))
                at = current_position(conn).key()
                ledger = queries.source_table(db, LEDGER, [c.name for c in columns])
                queries.execute(cur, queries.select_rows(ledger, columns, ledger.c[ID] == key))
                found = cur.fetchall()
                change = arrow_table_from_db_rows(columns, list(found)) if found else pa.table(
                    {ID: pa.array([key], rows.schema.field(ID).type)})
                op = "u" if found else "d"
                change = change.append_column(pa.field("_lakesync_op", meta["_lakesync_op"]), pa.array([op]))
                change = change.append_column(pa.field("_lakesync_pos", pa.string()), pa.array([at]))
                change = change.append_column(pa.field("_lakesync_ts_ms", pa.int64()), pa.array([0], pa.int64()))
                with lock:
                    pending.append((time.monotonic() + 0.5, change))
                time.sleep(0.05)

    def lagging_stream() -> None:
        version = 0
        while not (stop.is_set() and not pending):
            with lock:
                due = [change for when, change in pending if when <= time.monotonic()]
                del pending[:len(due)]
            # One micro-batch: upserts, then deletes (a deleted key never comes back here, so the order holds).
            for kind in ("u", "d"):
                batch = [change for change in due if change["_lakesync_op"][0].as_py() == kind]
                if not batch:
                    continue
                version += 1
                batch = pa.concat_tables(batch)
                sink.apply_changes(batch, app_id="busy", batch_version=version)
            if due:
                progress = StreamProgress.load(pipeline.pipeline_state_dir)
                progress.record(LEDGER, batch_id=version, rows=len(due),
                                position=max(change["_lakesync_pos"][0].as_py() for change in due), source_ts_ms=None)
                progress.save(pipeline.pipeline_state_dir)
            time.sleep(0.2)

    threads = [threading.Thread(target=source_writer), threading.Thread(target=lagging_stream)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        results = [validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=30).tables[0]
                   for _ in range(2)]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    for result in results:
        assert result.status == "equal", (result.describe(), result.rounds, result.note)
    (settled,) = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=5, rounds=2).tables
    assert settled.status == "equal" and settled.in_flight_keys == 0, settled.describe()
    print("\nbusy-source rounds:", [(r.rounds, r.chunks_mismatched, r.in_flight_keys) for r in results])


def test_a_column_missing_in_delta_is_a_mismatch_and_an_extra_one_is_noted(pipeline):
    rows = delta_table(pipeline.delta.table_uri(CODES))
    write_deltalake(pipeline.delta.table_uri(CODES), rows.append_column("dropped at source", pa.array([1] * rows.num_rows)),
                    mode="overwrite", schema_mode="overwrite")
    (result,) = validate_pipeline(pipeline, tables=[CODES], settle_timeout_s=0.5, rounds=1).tables
    assert result.status == "equal" and "dropped at source" in result.note

    write_deltalake(pipeline.delta.table_uri(CODES), rows.drop_columns(["label"]), mode="overwrite",
                    schema_mode="overwrite")
    (result,) = validate_pipeline(pipeline, tables=[CODES], settle_timeout_s=0.5, rounds=1).tables
    assert result.status == "mismatch" and "label" in result.note


def test_many_differing_chunks_are_compared_in_bounded_groups(pipeline, monkeypatch):
    import lakesync.validation.catch_up

    monkeypatch.setattr(lakesync.validation.validate, "DIFF_ROWS", 30)  # one 25-row chunk per group
    rows = delta_table(pipeline.delta.table_uri(LEDGER))
    gone = [3, 30, 60, 90, 119]
    rewrite_delta(pipeline, LEDGER, rows.filter(pc.invert(pc.is_in(rows[ID], pa.array(gone, rows.schema.field(ID).type)))))
    (result,) = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=0.5, rounds=1).tables
    assert result.chunks_mismatched == 5 and result.mismatched_keys == 5
    assert sorted(key[ID] for key in result.missing_in_delta) == gone


def test_a_table_the_stream_stopped_is_reported_without_waiting_and_says_why(pipeline, monkeypatch):
    import lakesync.validation.catch_up

    polled: list[str] = []  # every look at how far the stream got is part of waiting for it
    real_applied_position = lakesync.validation.catch_up.applied_position
    monkeypatch.setattr(lakesync.validation.catch_up, "applied_position",
                        lambda pipeline, table: polled.append(table) or real_applied_position(pipeline, table))
    progress = StreamProgress()
    progress.record(LEDGER, batch_id=1, rows=0, position=None, source_ts_ms=None)
    progress.tables[LEDGER].stopped_reason = "unsupported DDL: ALTER TABLE ... DROP PRIMARY KEY"
    progress.save(pipeline.pipeline_state_dir)
    rows = delta_table(pipeline.delta.table_uri(LEDGER))
    rewrite_delta(pipeline, LEDGER, rows.filter(pc.not_equal(rows[ID], 50)))
    (result,) = validate_pipeline(pipeline, tables=[LEDGER], settle_timeout_s=30, rounds=3).tables
    assert polled == []  # it did not wait for the stream to reach a table the stream stopped
    assert result.missing_in_delta == [{ID: 50}] and result.stream_behind
    assert "DROP PRIMARY KEY" in result.note
