"""Every kind of DDL, with and without row changes right after it, through the whole stream:
MariaDB -> relay -> broker -> Spark -> Delta, judged by the independent oracle (tests/oracle.py).

One pipeline holds one table per (DDL kind, variant) plus an untouched control table; the expensive parts
(full load, relay, Spark stream) run once for all of them. Each table must end equal to its source: followed
in place (``EQUAL``), or re-loaded by the stream itself and saying so (``RELOAD``). A table that no longer
exists (``GONE``) is stopped with a message that gives a command; where the table comes back later (the
``busy`` variant re-creates it after the stream stopped it) the test runs that exact command through the CLI entry point and, after one more
relay and stream run, the oracle must find the table equal. The control table is always equal and never
stopped, whatever happened to the others.

Regressions covered here (issue 10): ADD COLUMN ... NOT NULL DEFAULT left old rows NULL (``add_default``);
DROP COLUMN of a NOT NULL column failed the whole stream (``drop_not_null``); the re-snapshot command in a
stopped table's message did nothing (the ``GONE`` cases' ``busy`` variant); RENAME INDEX, FORCE, CONVERT TO CHARACTER SET and
an INET6 column ended the relay for every table (``rename_index``, ``force``, ``convert_charset``, ``inet6``).
An INET6, INET4 or UUID column added by ALTER and then given values must stream them exactly (``inet6``,
``inet4``, ``uuid``).
"""

from __future__ import annotations

import random
import re
import shlex
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs
import pytest
import yaml
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.cli.main import main as lakesync_cli
from lakesync.core.config import Pipeline, load_pipeline
from lakesync.full_load.load import FullLoad
from lakesync.relay import Relay
from lakesync.stream.app import run_stream
from lakesync.stream.progress import StreamProgress
from lakesync.validation.validate import validate_pipeline
from tests.oracle import compare_table
from tests.oracle_delta_log import replay_log

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.ddl_matrix]

EQUAL, RELOAD, GONE = "equal", "reload", "gone"
CREATE = ("CREATE TABLE {t} (id INT NOT NULL, v INT NOT NULL, s VARCHAR(20) NOT NULL, d DECIMAL(10,2) NULL, "
          "PRIMARY KEY (id), KEY ix_v (v))")
SEED = "INSERT INTO {t} VALUES " + ", ".join(f"({i}, {i * 10}, 's{i}', {i}.25)" for i in range(1, 6))
#: Row changes right after the DDL, in the table's new shape (``{extra}`` = values of columns the DDL added).
ROWS_AFTER = ["INSERT INTO {t} (id, v, s, d{cols}) VALUES (100, 1000, 's100', 9.5{vals})",
              "UPDATE {t} SET d = 7.75 WHERE id = 2",
              "DELETE FROM {t} WHERE id = 3"]


@dataclass(frozen=True)
class Case:
    """One DDL kind: the statements (``{t}`` = the table), what must come of it, extra insert columns."""

    name: str
    ddl: tuple[str, ...]
    outcome: str
    cols: str = ""
    vals: str = ""
    rows_after: tuple[str, ...] | None = None  # instead of ROWS_AFTER, for shapes ROWS_AFTER doesn't fit
    comeback: tuple[str, ...] = ()  # GONE, busy variant: brings the table back after the stream stopped it
    widened: tuple[str, str] | None = None  # EQUAL by type widening: the column and its Delta type after it


CASES = [
    Case("control", (), EQUAL),
    Case("add_null", ("ALTER TABLE {t} ADD COLUMN n INT NULL",), EQUAL, ", n", ", 5"),
    Case("add_default", ("ALTER TABLE {t} ADD COLUMN n INT NOT NULL DEFAULT 7",), EQUAL, ", n", ", 8"),
    Case("add_default_text", ("ALTER TABLE {t} ADD COLUMN n VARCHAR(10) DEFAULT 'it''s'",), EQUAL, ", n", ", 'x'"),
    Case("add_not_null_implicit", ("ALTER TABLE {t} ADD COLUMN n INT NOT NULL",), EQUAL, ", n", ", 3"),
    Case("add_default_now", ("ALTER TABLE {t} ADD COLUMN n DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP",), RELOAD),
    Case("drop_not_null", ("ALTER TABLE {t} DROP COLUMN s",), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, d) VALUES (100, 1000, 9.5)", "UPDATE {t} SET d = 7.75 WHERE id = 2",
                     "DELETE FROM {t} WHERE id = 3")),
    Case("drop_null", ("ALTER TABLE {t} DROP COLUMN d",), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, s) VALUES (100, 1000, 's100')", "UPDATE {t} SET v = 7 WHERE id = 2",
                     "DELETE FROM {t} WHERE id = 3")),
    Case("rename_column", ("ALTER TABLE {t} RENAME COLUMN d TO d2",), RELOAD,
         rows_after=("INSERT INTO {t} (id, v, s, d2) VALUES (100, 1000, 's100', 9.5)",)),
    Case("widen_varchar", ("ALTER TABLE {t} MODIFY s VARCHAR(200) NOT NULL",), EQUAL),
    Case("narrow_varchar", ("ALTER TABLE {t} MODIFY s VARCHAR(10) NOT NULL",), EQUAL),
    # type widening in place (delta-spark): values only the wider type holds come right after the DDL
    Case("widen_int", ("ALTER TABLE {t} MODIFY v BIGINT NOT NULL",), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, s, d) VALUES (100, 5000000000, 's100', 9.5)",
                     "UPDATE {t} SET v = -6000000000 WHERE id = 2", "DELETE FROM {t} WHERE id = 3"),
         widened=("v", "long")),
    Case("widen_key", ("ALTER TABLE {t} MODIFY id BIGINT NOT NULL",), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, s, d) VALUES (5000000000, 1, 's100', 9.5)",
                     "UPDATE {t} SET d = 7.75 WHERE id = 2", "DELETE FROM {t} WHERE id = 3",
                     "DELETE FROM {t} WHERE id = 5000000000"),
         widened=("id", "long")),
    Case("widen_decimal", ("ALTER TABLE {t} MODIFY d DECIMAL(14,4) NULL",), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, s, d) VALUES (100, 1000, 's100', 1234567890.1234)",
                     "UPDATE {t} SET d = 7.7525 WHERE id = 2", "DELETE FROM {t} WHERE id = 3"),
         widened=("d", "decimal(14,4)")),
    Case("int_to_decimal", ("ALTER TABLE {t} MODIFY v DECIMAL(12,2) NOT NULL",), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, s, d) VALUES (100, 1234567890.12, 's100', 9.5)",
                     "UPDATE {t} SET v = 0.5 WHERE id = 2", "DELETE FROM {t} WHERE id = 3"),
         widened=("v", "decimal(12,2)")),
    # a column added, given values, then widened: FLOAT -> DOUBLE (MariaDB converts the stored single-precision
    # value) and DATE -> DATETIME (midnight; Delta's TIMESTAMP_NTZ needs its table feature switched on first)
    Case("float_to_double", ("ALTER TABLE {t} ADD COLUMN f FLOAT NULL", "UPDATE {t} SET f = 1.1 WHERE id = 1",
                             "UPDATE {t} SET f = -0.3 WHERE id = 4", "ALTER TABLE {t} MODIFY f DOUBLE NULL"), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, s, d, f) VALUES (100, 1000, 's100', 9.5, 2.000000000001)",
                     "UPDATE {t} SET f = 1e300 WHERE id = 2", "DELETE FROM {t} WHERE id = 3"),
         widened=("f", "double")),
    Case("date_to_datetime", ("ALTER TABLE {t} ADD COLUMN dd DATE NULL", "UPDATE {t} SET dd = '2024-02-29' WHERE id = 1",
                              "ALTER TABLE {t} MODIFY dd DATETIME(6) NULL"), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, s, d, dd) VALUES (100, 1000, 's100', 9.5, '2026-12-07 23:59:59.5')",
                     "UPDATE {t} SET dd = '1999-12-31 12:00:00' WHERE id = 2", "DELETE FROM {t} WHERE id = 3"),
         widened=("dd", "timestamp_ntz")),
    Case("narrow_int", ("ALTER TABLE {t} MODIFY v SMALLINT NOT NULL",), RELOAD),
    Case("to_unsigned", ("ALTER TABLE {t} MODIFY v INT UNSIGNED NOT NULL",), RELOAD),  # int32 -> int64, yet re-loads
    Case("change_type", ("ALTER TABLE {t} MODIFY d VARCHAR(20) NULL",), RELOAD),
    Case("make_nullable", ("ALTER TABLE {t} MODIFY v INT NULL",), EQUAL,
         rows_after=("INSERT INTO {t} (id, v, s) VALUES (100, NULL, 's100')", "UPDATE {t} SET v = NULL WHERE id = 2",
                     "DELETE FROM {t} WHERE id = 3")),
    Case("add_unique_key", ("ALTER TABLE {t} ADD UNIQUE KEY uk_s (s)",), EQUAL),
    Case("change_primary_key", ("ALTER TABLE {t} DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)",), RELOAD),
    Case("add_index", ("ALTER TABLE {t} ADD INDEX ix_s (s)",), EQUAL),
    Case("drop_index", ("ALTER TABLE {t} DROP INDEX ix_v",), EQUAL),
    Case("rename_index", ("ALTER TABLE {t} RENAME INDEX ix_v TO ix_v2",), EQUAL),
    Case("force", ("ALTER TABLE {t} FORCE",), EQUAL),
    Case("engine", ("ALTER TABLE {t} ENGINE=InnoDB, ALGORITHM=COPY",), EQUAL),
    Case("convert_charset", ("ALTER TABLE {t} CONVERT TO CHARACTER SET utf8mb4",), EQUAL),
    Case("partition", ("ALTER TABLE {t} PARTITION BY HASH(id) PARTITIONS 2",), EQUAL),
    # MariaDB's own types added by ALTER, then given values by an insert and an update of an older row
    *(Case(name, (f"ALTER TABLE {{t}} ADD COLUMN n {kind} NULL",), EQUAL, ", n", f", '{new}'",
           rows_after=("INSERT INTO {t} (id, v, s, d{cols}) VALUES (100, 1000, 's100', 9.5{vals})",
                       f"UPDATE {{t}} SET n = '{old}' WHERE id = 2", "DELETE FROM {t} WHERE id = 3"))
      for name, kind, new, old in (("inet6", "INET6", "2001:db8::1", "::ffff:10.0.0.1"),
                                   ("inet4", "INET4", "10.1.2.3", "255.255.255.255"),
                                   ("uuid", "UUID", "123e4567-e89b-12d3-a456-426655440000",
                                    "00000000-0000-0000-0000-000000000001"))),
    Case("unreadable", ("ALTER TABLE {t} ADD COLUMN (n1 INT NULL, n2 INT NULL)",), RELOAD),
    Case("truncate", ("TRUNCATE TABLE {t}",), RELOAD),
    Case("drop_table", ("DROP TABLE {t}",), GONE, rows_after=(),
         comeback=(CREATE, SEED, "INSERT INTO {t} VALUES (100, 1000, 's100', 9.5)")),
    Case("rename_table", ("RENAME TABLE {t} TO {t}_moved",), GONE, rows_after=(),
         comeback=("RENAME TABLE {t}_moved TO {t}", "DELETE FROM {t} WHERE id = 3")),
    Case("drop_and_create", ("DROP TABLE {t}", CREATE, SEED), RELOAD),  # back before the stream saw the drop
    Case("gh_ost", ("CREATE TABLE _{t}_gho LIKE {t}", "ALTER TABLE _{t}_gho ADD COLUMN n INT NULL",
                    "INSERT INTO _{t}_gho (id, v, s, d) SELECT id, v, s, d FROM {t}",
                    "CREATE TABLE _{t}_ghc (id INT PRIMARY KEY, hint VARCHAR(20))",
                    "RENAME TABLE {t} TO _{t}_del, _{t}_gho TO {t}", "DROP TABLE _{t}_del, _{t}_ghc"),
         RELOAD, ", n", ", 4"),
    Case("pt_osc", ("CREATE TABLE _{t}_new LIKE {t}", "ALTER TABLE _{t}_new MODIFY v BIGINT NOT NULL",
                    "INSERT INTO _{t}_new SELECT * FROM {t}",
                    "RENAME TABLE {t} TO _{t}_old, _{t}_new TO {t}", "DROP TABLE _{t}_old"), RELOAD),
]
VARIANTS = ("quiet", "busy")  # without / with row changes right after the DDL


def table_name(case: Case, variant: str) -> str:
    return f"{case.name}_{variant}"


@dataclass
class Matrix:
    pipeline: Pipeline
    database: str
    mariadb: Any
    stopped_first: dict[str, str | None]
    recovered: dict[str, str] = field(default_factory=dict)  # table -> the command that was run

    def compare(self, table: str):
        with self.mariadb.connect() as conn:
            return compare_table(conn, self.database, table, self.pipeline.delta.table_uri(table))

    def stopped_now(self, table: str) -> str | None:
        progress = StreamProgress.load(self.pipeline.pipeline_state_dir).tables.get(table)
        return progress.stopped_reason if progress else None


def _execute(conn, statements: list[str]) -> None:
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _ddl_and_rows(case: Case, variant: str) -> list[str]:
    t = table_name(case, variant)
    statements = [s.format(t=t) for s in case.ddl]
    if variant == "busy":
        statements += [s.format(t=t, cols=case.cols, vals=case.vals) for s in (ROWS_AFTER if case.rows_after is None else case.rows_after)]
    return statements


def _command(reason: str) -> list[str]:
    """The command a stopped table's message gives, as argv for the CLI entry point."""
    found = re.search(r"`(lakesync [^`]+)`", reason)
    assert found, f"the stop message gives no command: {reason}"
    argv = shlex.split(found.group(1))
    assert argv[0] == "lakesync"
    return argv[1:]


def _relay_and_stream(pipeline: Pipeline, spark) -> None:
    Relay(pipeline, heartbeat_seconds=0.3).run(stop_when_idle_seconds=1.0)
    run_stream(pipeline, once=True, spark=spark)


@pytest.fixture(scope="module")
def matrix(stack, mariadb, spark, tmp_path_factory) -> Iterator[Matrix]:
    folder = tmp_path_factory.mktemp("ddl_matrix")
    database = f"m_{uuid.uuid4().hex[:10]}"
    server_id = random.randrange(5_000, 60_000)
    name = "ddlmatrix"
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name,
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"dm{server_id}{uuid.uuid4().hex[:6]}"},
        "delta": {"root": str(folder / "delta")},
        "state_dir": str(folder / "state"),
    }))
    tables = [table_name(case, variant) for case in CASES for variant in VARIANTS]
    with pytest.MonkeyPatch.context() as patch, mariadb.connect() as conn:
        for key, value in stack.connection_env().items():
            patch.setenv(key, value)
        patch.setenv("LAKESYNC_PIPELINES_DIR", str(folder))  # so the message's command finds the pipeline
        _execute(conn, [f"CREATE DATABASE `{database}`", f"USE `{database}`",
                        *(CREATE.format(t=t) for t in tables), *(SEED.format(t=t) for t in tables)])
        pipeline = load_pipeline(name, folder)
        try:
            FullLoad(pipeline=pipeline).run()
            _execute(conn, [s for case in CASES for variant in VARIANTS for s in _ddl_and_rows(case, variant)])
            _relay_and_stream(pipeline, spark)
            progress = StreamProgress.load(pipeline.pipeline_state_dir)
            result = Matrix(pipeline, database, mariadb,
                            {t: (progress.tables[t].stopped_reason if t in progress.tables else None) for t in tables})
            # the recovery: run each stopped table's command exactly as its message gives it, then keep writing
            for case in CASES:
                for variant in VARIANTS:
                    t = table_name(case, variant)
                    if case.outcome == GONE and variant == "busy" and result.stopped_first[t]:
                        _execute(conn, [statement.format(t=t) for statement in case.comeback])
                        argv = _command(result.stopped_first[t])
                        assert lakesync_cli(argv) == 0, argv
                        result.recovered[t] = shlex.join(argv)
                        _execute(conn, [f"UPDATE {t} SET v = v + 1 WHERE id = 1",
                                        f"DELETE FROM {t} WHERE id = 4"])
            _execute(conn, [f"UPDATE {table_name(CASES[0], v)} SET v = v + 1" for v in VARIANTS])
            _relay_and_stream(pipeline, spark)
            yield result
        finally:
            _execute(conn, [f"DROP DATABASE IF EXISTS `{database}`"])


PARAMS = [pytest.param(case, variant, id=table_name(case, variant)) for case in CASES for variant in VARIANTS]


@pytest.mark.parametrize(("case", "variant"), [p for p in PARAMS if p.values[0].outcome == EQUAL])
def test_ddl_delta_can_follow_keeps_the_table_equal_to_the_source(matrix, case, variant):
    table = table_name(case, variant)
    assert matrix.stopped_first[table] is None, matrix.stopped_first[table]
    assert matrix.stopped_now(table) is None
    # no progress entry: no change was streamed, and a re-load would have made one (it records last_reload)
    progress = StreamProgress.load(matrix.pipeline.pipeline_state_dir).tables.get(table)
    assert progress is None or not progress.last_reload, f"followed in place, not re-loaded: {progress}"
    comparison = matrix.compare(table)
    assert comparison.identical, comparison.describe()


@pytest.mark.parametrize(("case", "variant"), [p for p in PARAMS if p.values[0].widened])
def test_a_widening_type_change_widens_the_delta_column_in_place(matrix, case, variant):
    """The Delta log (read by the oracle's own log reader) says the column has the wider type and the table
    lists Delta's type widening; the rows are judged equal above, with no re-load."""
    column, delta_type = case.widened
    table = table_name(case, variant)
    schema = replay_log(pafs.LocalFileSystem(), matrix.pipeline.delta.table_uri(table)).schema
    field = next(f for f in schema["fields"] if f["name"] == column)
    assert field["type"] == delta_type, field
    assert field["metadata"]["delta.typeChanges"], field
    # lakesync's own check reads the widened table through Spark (delta-rs can't): it must agree with the oracle
    (result,) = validate_pipeline(matrix.pipeline, tables=[table], settle_timeout_s=2, rounds=1, store=False).tables
    assert result.matches, result.describe()


@pytest.mark.parametrize(("case", "variant"), [p for p in PARAMS if p.values[0].outcome == RELOAD])
def test_ddl_delta_cannot_follow_in_place_re_loads_the_table_and_says_so(matrix, case, variant):
    table = table_name(case, variant)
    assert matrix.stopped_first[table] is None, matrix.stopped_first[table]
    assert matrix.stopped_now(table) is None
    progress = StreamProgress.load(matrix.pipeline.pipeline_state_dir).tables[table]
    assert progress.last_reload and table in progress.last_reload, progress.last_reload
    comparison = matrix.compare(table)
    assert comparison.identical, comparison.describe()


@pytest.mark.parametrize(("case", "variant"), [p for p in PARAMS if p.values[0].outcome == GONE])
def test_a_table_gone_from_the_source_stops_and_its_command_recovers_it_once_back(matrix, case, variant):
    table = table_name(case, variant)
    reason = matrix.stopped_first[table]
    assert reason and ("drop table" in reason or "rename table" in reason) and "no longer exists" in reason, reason
    if variant == "quiet":
        assert matrix.stopped_now(table) == reason, "nothing to load: it stays stopped"
        return
    assert table in matrix.recovered
    assert matrix.stopped_now(table) is None, f"still stopped after `{matrix.recovered[table]}`"
    comparison = matrix.compare(table)
    assert comparison.identical, comparison.describe()


def test_the_control_table_is_never_stopped_and_stays_equal(matrix):
    for variant in VARIANTS:
        table = table_name(CASES[0], variant)
        assert matrix.stopped_first[table] is None and matrix.stopped_now(table) is None
        comparison = matrix.compare(table)
        assert comparison.identical, comparison.describe()
