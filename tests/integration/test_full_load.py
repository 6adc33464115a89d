"""The full load against the real server and real Delta tables: exact position, one commit per table,
resumption, chunked mode under concurrent writes, every type of the type map, and the errors users meet."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from deltalake import DeltaTable
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from lakesync.core.config import Pipeline
from lakesync.core.connections import MySQLConnection
from lakesync.core.errors import LakesyncError, SchemaChangeError, SourceError
from lakesync.core.positions import SourcePosition
from lakesync.full_load.chunk_runners import ChunkTask, ThreadChunkRunner
from lakesync.full_load.load import FullLoad
from lakesync.full_load.state import ChunkDone, LoadState
from lakesync.sink.delta import DeltaSink
from lakesync.validation.validate import validate_pipeline
from tests.deltakit import delta_table
from tests.integration.loadkit import load_killed_after_commit, make_numbers
from tests.oracle import assert_tables_match

pytestmark = pytest.mark.integration


def _rows(pipeline: Pipeline, table: str) -> list[dict[str, Any]]:
    return sorted(delta_table(pipeline.delta.table_uri(table)).to_pylist(),
                  key=lambda row: tuple(str(v) for v in row.values()))


# -- position ----------------------------------------------------------------------------------------------
def test_position_is_exactly_the_snapshots(make_pipeline, db, mariadb) -> None:
    """A change committed before the snapshot is in the load; one committed after is not, and it is the
    first change the binlog holds at or after the recorded position."""
    db.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
    db.execute("CREATE TABLE b (id INT PRIMARY KEY, v INT)")
    db.execute("INSERT INTO a VALUES (1, 1)")
    db.execute("INSERT INTO b VALUES (1, 1)")  # committed before the snapshot
    after_the_snapshot = []

    def on_progress(table: str, rows: int, total: int) -> None:
        if table == "a" and not after_the_snapshot:  # the snapshot is open; b is not read yet
            db.execute("INSERT INTO b VALUES (2, 2)")
            after_the_snapshot.append(True)

    pipeline = make_pipeline()
    FullLoad(pipeline, on_progress=on_progress).run()

    assert [row["id"] for row in _rows(pipeline, "b")] == [1]
    state = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    position = state.position
    assert position is not None and position.gtid
    assert {row["_lakesync_pos"] for row in _rows(pipeline, "b")} == {position.key()}
    inserts = _binlog_changes(mariadb, position, schema=db.connection.db.decode())
    assert [(kind, table, values) for kind, table, values, _ in inserts] == [("insert", "b", {"id": 2, "v": 2})]
    assert inserts[0][3] > position


def _binlog_changes(mariadb, start: SourcePosition, *, schema: str) -> list[tuple[str, str, dict, SourcePosition]]:
    """Row changes from ``start`` to the end of the binlog, each with its lakesync position."""
    stream = BinLogStreamReader(
        connection_settings={"host": mariadb.host, "port": mariadb.port, "user": "root",
                             "passwd": mariadb.root_password},
        server_id=5000 + uuid.uuid4().int % 100_000, resume_stream=True, log_file=start.file,
        log_pos=start.offset, blocking=False, only_schemas=[schema],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    changes = []
    try:
        for event in stream:
            for index, row in enumerate(event.rows):
                position = SourcePosition(stream.log_file, event.packet.log_pos, index + 1)
                if isinstance(event, WriteRowsEvent):
                    changes.append(("insert", event.table, row["values"], position))
                elif isinstance(event, UpdateRowsEvent):
                    changes.append(("update", event.table, row["after_values"], position))
                else:
                    changes.append(("delete", event.table, row["values"], position))
    finally:
        stream.close()
    return changes


# -- commits and resumption ----------------------------------------------------------------------------------
def test_each_table_load_is_one_commit_carrying_the_position_with_delta_rs(make_pipeline, db, tmp_path) -> None:
    """The delta-rs commit of the load (``delta.writer: delta_rs``); delta-spark's is
    test_full_load_delta_spark.py's."""
    make_numbers(db, "numbers", 5000)
    pipeline = make_pipeline(delta={"root": str(tmp_path / "delta"), "writer": "delta_rs"})
    for mode in ("consistent", "chunked"):
        (result,) = FullLoad(pipeline, mode=mode, restart=True).run()
        table = DeltaTable(pipeline.delta.table_uri("numbers"))
        history = table.history()
        assert result.rows == 5000 and table.version() == result.delta_version
        assert history[0]["lakesync.snapshot.position"] == result.position.key()
        assert history[0]["lakesync.snapshot.mode"] == mode
        sink = DeltaSink(pipeline.delta.table_uri("numbers"), key_columns=["id"])
        assert sink.snapshot_position() == result.position.key()  # the sink's snapshot floor
        assert delta_table(pipeline.delta.table_uri("numbers")).num_rows == 5000
    assert len(table.history()) == 2  # two loads, two commits


def test_interrupted_load_resumes_without_rereading_finished_tables(make_pipeline, db) -> None:
    for name in ("t1", "t2", "t3"):
        make_numbers(db, name, 300)
    pipeline = make_pipeline()
    reads: list[str] = []

    def crash_in_t2(table: str, rows: int, total: int) -> None:
        reads.append(table)
        if table == "t2":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        FullLoad(pipeline, on_progress=crash_in_t2).run()
    state = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    assert state.is_done("t1") and not state.is_done("t2")
    assert state.position is not None and state.position.key() == state.tables["t1"].position_key
    assert not DeltaTable.is_deltatable(pipeline.delta.table_uri("t2"))  # nothing half-visible

    reads.clear()
    results = FullLoad(pipeline, on_progress=lambda table, rows, total: reads.append(table)).run()
    assert set(reads) == {"t2", "t3"}
    assert [(r.table, r.skipped, r.rows) for r in results] == [("t1", True, 300), ("t2", False, 300),
                                                                ("t3", False, 300)]
    assert DeltaTable(pipeline.delta.table_uri("t1")).version() == 0  # not written again
    state = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    assert state.finished_at and all(state.is_done(name) for name in ("t1", "t2", "t3"))


def test_a_restarted_load_forgets_tables_no_longer_selected_so_its_position_is_the_new_loads(make_pipeline,
                                                                                              db) -> None:
    for name in ("kept", "dropped", "excluded"):
        make_numbers(db, name, 10)
    FullLoad(make_pipeline()).run()
    db.execute("DROP TABLE dropped")
    db.execute("INSERT INTO kept VALUES (1000, 1)")
    db.execute("FLUSH BINARY LOGS")  # the first load's positions are in an older binlog file than the re-load's

    pipeline = make_pipeline(tables={"include": ["*"], "exclude": ["excluded"]})
    FullLoad(pipeline, restart=True).run()
    state = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    assert set(state.tables) == {"kept"}, "the old entries would hold the load's position back, at a purgeable file"
    assert state.position is not None and state.position.key() == state.tables["kept"].position_key


class _CountingRunner:
    """The real thread runner, counting the chunks it is given and optionally failing after ``stop_after``."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.tasks: list[ChunkTask] = []

    def run(self, tasks: Sequence[ChunkTask], on_done: Callable[[ChunkDone], None]) -> None:
        self.tasks.extend(tasks)
        finished = 0

        def counted(chunk: ChunkDone) -> None:
            nonlocal finished
            on_done(chunk)
            finished += 1
            if self.stop_after is not None and finished >= self.stop_after:
                raise RuntimeError("worker lost")

        ThreadChunkRunner(1).run(tasks, counted)


def test_interrupted_chunked_table_resumes_its_missing_chunks(make_pipeline, db) -> None:
    make_numbers(db, "numbers", 1000)
    pipeline = make_pipeline(snapshot={"mode": "chunked", "chunk_rows": 100})
    first = _CountingRunner(stop_after=4)
    with pytest.raises(RuntimeError, match="worker lost"):
        FullLoad(pipeline, chunk_runner=first).run()
    assert len(first.tasks) == 10
    assert not DeltaTable.is_deltatable(pipeline.delta.table_uri("numbers"))
    interrupted = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    # recorded before any read, so a relay starting now would not start after any chunk's position
    assert interrupted.position is not None
    assert all(interrupted.position.key() <= c.position_key for c in interrupted.tables["numbers"].chunks_done)

    second = _CountingRunner()
    (result,) = FullLoad(pipeline, chunk_runner=second).run()
    assert len(second.tasks) == 6  # only the chunks the first run did not finish
    assert result.rows == 1000
    rows = _rows(pipeline, "numbers")
    assert sorted(row["id"] for row in rows) == list(range(1, 1001))
    assert len(DeltaTable(pipeline.delta.table_uri("numbers")).history()) == 1


# -- chunked mode -------------------------------------------------------------------------------------------
def test_a_load_killed_between_its_delta_commit_and_its_state_file_keeps_the_table_on_resume(make_pipeline, db,
                                                                                             monkeypatch) -> None:
    """The resumed load finds its commit landed (the table holds exactly its chunks' files) and does not commit
    them again: adding and removing the same files in one commit would leave the table empty (found by the
    full-load fault test in a CI run, the kill landing in that window)."""
    make_numbers(db, "numbers", 500)
    pipeline = make_pipeline(snapshot={"mode": "chunked", "chunk_rows": 100})

    load_killed_after_commit(pipeline, monkeypatch)
    committed = DeltaTable(pipeline.delta.table_uri("numbers")).version()
    assert not LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).is_done("numbers")

    (result,) = FullLoad(pipeline).run()
    assert result.rows == 500 and result.delta_version == committed, "the landed commit is the table's load"
    assert DeltaTable(pipeline.delta.table_uri("numbers")).version() == committed, "nothing committed again"
    assert sorted(row["id"] for row in _rows(pipeline, "numbers")) == list(range(1, 501))


def test_chunked_load_under_concurrent_writes_converges_after_replay(make_pipeline, db, mariadb) -> None:
    """Chunks read while rows change; replaying the binlog from the recorded position with the sink's rule
    (apply only when the change's position is greater than the row's) gives exactly the source table."""
    make_numbers(db, "numbers", 3000)
    pipeline = make_pipeline(snapshot={"mode": "chunked", "chunk_rows": 200})
    stop = threading.Event()

    def write() -> None:
        with mariadb.connect(database=pipeline.source.database) as conn, conn.cursor() as cur:
            n = 0
            while not stop.is_set():
                n += 1
                cur.execute("UPDATE numbers SET v = v + 1 WHERE id %% 97 = %s", (n % 97,))
                cur.execute("DELETE FROM numbers WHERE id = %s", (1 + (n * 37) % 3000,))
                cur.execute("INSERT INTO numbers VALUES (%s, %s)", (3000 + n, n))

    writes = iter(range(1, 1000))

    def write_between_chunks(table: str, rows: int, total: int) -> None:
        # The background writer may not get a commit in between chunk reads on a fast run; one write per
        # finished chunk guarantees later chunks are read at later positions.
        with mariadb.connect(database=pipeline.source.database) as conn, conn.cursor() as cur:
            cur.execute("UPDATE numbers SET v = v + 1000 WHERE id = %s", (2 * next(writes),))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        (result,) = FullLoad(pipeline, on_progress=write_between_chunks).run()
    finally:
        stop.set()
        writer.join()

    target = {row["id"]: (row["v"], row["_lakesync_pos"]) for row in _rows(pipeline, "numbers")}
    assert len({row["_lakesync_pos"] for row in _rows(pipeline, "numbers")}) > 1  # chunks at several positions
    for kind, _, values, position in _binlog_changes(mariadb, result.position, schema=pipeline.source.database):
        current = target.get(values["id"])
        if current is not None and position.key() <= current[1]:
            continue
        target[values["id"]] = (None if kind == "delete" else values["v"], position.key())
    live = {key: value for key, (value, _) in target.items() if value is not None}
    db.execute("SELECT id, v FROM numbers")
    assert live == dict(db.fetchall())


def test_composite_and_missing_keys_load_every_row_once(make_pipeline, db) -> None:
    db.execute("CREATE TABLE balances (account CHAR(4) NOT NULL, day DATE NOT NULL, amount DECIMAL(10,2), "
               "PRIMARY KEY (account, day))")
    db.execute("INSERT INTO balances SELECT CONCAT('A', seq % 7), DATE '2026-01-01' + INTERVAL seq DAY, seq "
               "FROM seq_1_to_700")
    db.execute("CREATE TABLE log (at INT, msg TEXT)")
    db.execute("INSERT INTO log SELECT seq % 5, CONCAT('line, \"', seq, '\"\\n') FROM seq_1_to_250")
    for mode in ("chunked", "consistent"):
        pipeline = make_pipeline(snapshot={"mode": mode, "chunk_rows": 100})
        results = {r.table: r for r in FullLoad(pipeline, restart=True).run()}
        assert results["balances"].rows == 700 and results["log"].rows == 250
        keys = [(row["account"], row["day"]) for row in _rows(pipeline, "balances")]
        assert len(set(keys)) == 700
        messages = sorted(row["msg"] for row in _rows(pipeline, "log"))
        assert messages == sorted(f'line, "{n}"\n' for n in range(1, 251))



@pytest.mark.parametrize("mode", ["consistent", "chunked"])
def test_tables_mixing_collations_load_and_validate_identical(make_pipeline, db, mariadb, fresh_database: str,
                                                               mode: str) -> None:
    """Text columns of different character sets and collations in one row (key and non-key): the load's
    one-line-per-row SQL must not mix their collations, and key ranges must follow each column's own order
    (Swedish sorts 'ä' after 'z'; NO PAD keeps 'x' and 'x ' apart)."""
    db.execute("CREATE TABLE mixed_key (region VARCHAR(8) CHARACTER SET latin1 COLLATE latin1_swedish_ci NOT NULL,"
               " code VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL,"
               " tag VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,"
               " note TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, PRIMARY KEY (region, code, tag))")
    keys = [(region, code, tag) for region in ("a", "Z", "ä", "ö", "å", "m")
            for code in (*(f"c{i}" for i in range(8)), "É", "y")
            for tag in ("x", "x ", "X", "é", "e", "t", "t ", "T", "ü", "u")]  # 600 rows: several ranges
    db.executemany("INSERT INTO mixed_key VALUES (%s, %s, %s, %s)",
                   [(*key, f"{'|'.join(key)} ü") for key in keys])
    db.execute("CREATE TABLE mixed_text (id INT PRIMARY KEY,"
               " a VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,"
               " b VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,"
               " c TEXT CHARACTER SET latin1 COLLATE latin1_swedish_ci NULL,"
               " d VARCHAR(20) CHARACTER SET utf8mb3 COLLATE utf8mb3_unicode_ci NULL,"
               " e ENUM('x', 'y') CHARACTER SET ascii COLLATE ascii_bin NULL)")
    db.executemany("INSERT INTO mixed_text VALUES (%s, %s, %s, %s, %s, %s)",
                   [(i, None if i % 4 == 0 else f"a{i} 🙂", f"b{i} ", f"c{i} åäö", f"d{i} é", None if i % 3 else "x")
                    for i in range(1, 301)])
    pipeline = make_pipeline(snapshot={"mode": mode, "chunk_rows": 10})
    FullLoad(pipeline, restart=True).run()
    with mariadb.connect() as conn:
        assert_tables_match(conn, fresh_database, {table: pipeline.delta.table_uri(table)
                                                   for table in ("mixed_key", "mixed_text")})
    for fast_read in (False, True):
        report = validate_pipeline(pipeline, tables=["mixed_key", "mixed_text"], chunk_rows=10,
                                   fast_read=fast_read, store=False, settle_timeout_s=1)
        assert [(t.table, t.status) for t in report.tables] == [("mixed_key", "equal"), ("mixed_text", "equal")]

TRICKY_TEXT = ["plain", "", "NULL", "=x", "a,b", 'say "hi"', "line\nbreak", "cr\r", "\r\n", "\nlead",
               "unit\x1fsep", "tab\tand\\slash", "nul\x00byte", "Überweisung 銀行 🙂", None]


@pytest.mark.parametrize("first_or_last", ["first", "last"])
def test_text_with_separators_line_breaks_and_null_markers_loads_exactly(make_pipeline, db, first_or_last: str) -> None:
    """Every awkward value, in the first and in the last column, in a table read in several ranges."""
    columns = "(t TEXT NULL, id INT PRIMARY KEY, n VARCHAR(20) NOT NULL)" if first_or_last == "first" \
        else "(id INT PRIMARY KEY, n VARCHAR(20) NOT NULL, t TEXT NULL)"
    db.execute(f"CREATE TABLE tricky {columns}")
    rows = [(i, f"n{i}", TRICKY_TEXT[i % len(TRICKY_TEXT)]) for i in range(1, 601)]
    db.executemany("INSERT INTO tricky (id, n, t) VALUES (%s, %s, %s)", rows)
    pipeline = make_pipeline(snapshot={"mode": "consistent", "chunk_rows": 100})
    FullLoad(pipeline).run()
    loaded = sorted((row["id"], row["n"], row["t"]) for row in _rows(pipeline, "tricky"))
    assert loaded == rows


@pytest.mark.parametrize("value", TRICKY_TEXT, ids=repr)
def test_one_awkward_value_in_an_otherwise_clean_table_is_noticed_and_loaded_exactly(make_pipeline, db,
                                                                                     value: str | None) -> None:
    """Clean ranges go in the fast, unquoted form; the range with the value must not load it wrong."""
    db.execute("CREATE TABLE mixed (id INT PRIMARY KEY, a VARCHAR(40) NULL, b TEXT NULL)")
    db.execute("INSERT INTO mixed SELECT seq, CONCAT('a', seq), CONCAT('b', seq) FROM seq_1_to_400")
    db.execute("UPDATE mixed SET b = %s WHERE id = 150", (value,))
    db.execute("UPDATE mixed SET a = %s WHERE id = 250", (value,))
    pipeline = make_pipeline(snapshot={"mode": "chunked", "chunk_rows": 100})
    FullLoad(pipeline).run()
    db.execute("SELECT id, a, b FROM mixed ORDER BY id")
    assert sorted((row["id"], row["a"], row["b"]) for row in _rows(pipeline, "mixed")) == list(db.fetchall())


# -- types ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["consistent", "chunked"])
def test_every_type_in_the_type_map_loads_equal_to_the_expected_value(make_pipeline, db, mode: str) -> None:
    """Reuses the type map test's table: one column per map row, edge values and a NULL row."""
    from test_type_map import CASES, ROW_COUNT, _literal

    db.execute("SET SESSION sql_mode = ''")
    columns = ", ".join(f"`{case.name}` {case.ddl}" for case in CASES)
    db.execute(f"CREATE TABLE type_map (row_no INT PRIMARY KEY, {columns})")
    for row in range(ROW_COUNT):
        db.execute(f"INSERT INTO type_map VALUES ({row}, {', '.join(_literal(case, row)[0] for case in CASES)})")
    pipeline = make_pipeline(snapshot={"mode": mode, "chunk_rows": 100})
    FullLoad(pipeline).run()
    table = delta_table(pipeline.delta.table_uri("type_map")).sort_by("row_no")
    for case in CASES:
        assert table.schema.field(case.name).type == case.arrow_type, case.name
        expected = [_literal(case, row)[1] for row in range(ROW_COUNT)]
        assert table.column(case.name).to_pylist() == expected, case.name


def test_zero_dates_in_a_later_range_become_null_and_the_rest_loads(make_pipeline, db) -> None:
    db.execute("SET SESSION sql_mode = ''")
    db.execute("CREATE TABLE dated (id INT PRIMARY KEY, d DATE NOT NULL, t DATETIME(6))")
    db.execute("INSERT INTO dated SELECT seq, DATE '2026-01-01' + INTERVAL seq DAY, NULL FROM seq_1_to_1000")
    db.execute("UPDATE dated SET d = '0000-00-00', t = '2026-00-05 10:00:00' WHERE id = 950")
    pipeline = make_pipeline(snapshot={"mode": "consistent", "chunk_rows": 100})
    (result,) = FullLoad(pipeline).run()
    rows = {row["id"]: row for row in _rows(pipeline, "dated")}
    assert result.rows == 1000 and rows[950]["d"] is None and rows[950]["t"] is None
    assert str(rows[949]["d"]) == "2028-08-07"


# -- bad input -----------------------------------------------------------------------------------------------
def test_unknown_table_is_named_with_the_tables_there(make_pipeline, db) -> None:
    make_numbers(db, "numbers", 3)
    with pytest.raises(SourceError, match="no table nope") as error:
        FullLoad(make_pipeline(), tables=["nope"]).run()
    assert "numbers" in (error.value.hint or "")


def test_wrong_credentials_are_a_clear_error(make_pipeline, db, mariadb) -> None:
    make_numbers(db, "numbers", 3)
    wrong = MySQLConnection(mariadb.host, mariadb.port, "lakesync", pydantic_secret("not-the-password"))
    with pytest.raises(SourceError, match="refused the credentials"):
        FullLoad(make_pipeline(), connection=wrong).run()


def pydantic_secret(value: str) -> Any:
    from pydantic import SecretStr

    return SecretStr(value)


def test_table_the_user_may_not_read_is_named_with_the_fix(make_pipeline, db, mariadb) -> None:
    make_numbers(db, "numbers", 3)
    make_numbers(db, "other", 3)
    database = db.connection.db.decode()
    user, password = f"u{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    db.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'")
    try:
        db.execute(f"GRANT REPLICATION CLIENT, RELOAD ON *.* TO '{user}'@'127.0.0.1'")
        db.execute(f"GRANT SELECT ON `{database}`.other TO '{user}'@'127.0.0.1'")
        limited = MySQLConnection(mariadb.host, mariadb.port, user, pydantic_secret(password))
        with pytest.raises(SourceError, match=r"no table numbers .* can't see it"):
            FullLoad(make_pipeline(), connection=limited, tables=["numbers"]).run()
    finally:
        db.execute(f"DROP USER '{user}'@'127.0.0.1'")


def test_binlog_row_image_other_than_full_is_refused(make_pipeline, db) -> None:
    make_numbers(db, "numbers", 3)
    db.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        with pytest.raises(SourceError, match="binlog_row_image is MINIMAL"):
            FullLoad(make_pipeline()).run()
    finally:
        db.execute("SET GLOBAL binlog_row_image = 'FULL'")


def test_table_dropped_during_the_load_fails_it_without_a_trace_in_delta(make_pipeline, db) -> None:
    make_numbers(db, "a", 10)
    make_numbers(db, "b", 10)

    def drop_b(table: str, rows: int, total: int) -> None:
        if table == "a":
            db.execute("DROP TABLE IF EXISTS b")

    pipeline = make_pipeline()
    with pytest.raises((SchemaChangeError, SourceError)) as error:
        FullLoad(pipeline, on_progress=drop_b).run()
    assert isinstance(error.value, LakesyncError) and "b" in error.value.message
    assert not DeltaTable.is_deltatable(pipeline.delta.table_uri("b"))
    assert LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).is_done("a")
