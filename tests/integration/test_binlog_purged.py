"""A binlog the relay needs, purged from the source while the relay is down: ``status`` says so (and warns
before, while the file nears expiry), and both recoveries end with Delta equal to the source (the oracle):
``recovery.when_purged: reload`` (the relay re-loads by itself) and the one command ``status`` gives.

Purging binlogs would take away files other tests of the session still read, so this test runs its own
MariaDB (only that: the session's broker and Spark serve it too) and stops it at the end."""

from __future__ import annotations

import subprocess
import time
from urllib.parse import quote

import pytest
import yaml
from deltalake import DeltaTable
from lakesync_devkit.demo.load import DemoWorkload, LoadReport
from lakesync_devkit.dev.mariadb import MariaDBServer
from lakesync_devkit.dev.processes import free_port
from lakesync_devkit.dev.stack import MYSQL_CONN_ID

from lakesync.core.errors import BinlogPurgedError
from lakesync.core.positions import SourcePosition
from lakesync.full_load.load import FullLoad
from lakesync.full_load.state import LoadState
from lakesync.monitoring.attention import attention
from lakesync.monitoring.status import pipeline_status
from lakesync.recovery.replay import Recovery
from lakesync.relay.worker import Relay
from lakesync.stream.app import run_stream
from lakesync.stream.progress import StreamProgress
from tests.faults.faultkit import FaultOutcome, FaultPipeline

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PASSWORD = "purge-test-pw"


@pytest.fixture
def own_mariadb(tmp_path_factory):
    server = MariaDBServer(home=tmp_path_factory.mktemp("purge-mariadb"), port=free_port(), server_id=71,
                           root_password="purge-root-pw")
    server.start()
    server.create_lakesync_user("lakesync", PASSWORD)
    yield server
    server.stop()


def _write(server: MariaDBServer, database: str, steps: int, seed: int) -> None:
    """``steps`` demo transactions (inserts, updates, deletes on several tables), then a new binlog file."""
    with server.connect(database=database, autocommit=False) as conn:
        workload, report = DemoWorkload(conn, database, seed=seed), LoadReport()
        for _ in range(steps):
            workload.step(report)
    _admin(server, "FLUSH BINARY LOGS")


def _admin(server: MariaDBServer, sql: str) -> list[tuple]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _purge_all_but_the_newest(server: MariaDBServer, needed_file: str) -> None:
    """Purge every binlog before the newest; the server skips a file a binlog reader still holds, so wait
    until the file the relay needs is really gone (a closed reader's session can linger a moment)."""
    deadline = time.monotonic() + 60
    while True:
        newest = _admin(server, "SHOW BINARY LOGS")[-1][0]
        _admin(server, f"PURGE BINARY LOGS TO '{newest}'")
        if needed_file not in {row[0] for row in _admin(server, "SHOW BINARY LOGS")}:
            return
        assert time.monotonic() < deadline, f"{needed_file} was not purged in 60 s"
        time.sleep(0.5)


def _relay(kit: FaultPipeline):
    return Relay(kit.pipeline, heartbeat_seconds=0.3).run(stop_when_idle_seconds=1.5)


def _set(kit: FaultPipeline, section: str, **values: object) -> None:
    path = kit.pipelines_dir / f"{kit.name}.yaml"
    document = yaml.safe_load(path.read_text())
    document.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(document))


def _stored_file(kit: FaultPipeline) -> str:
    status = pipeline_status(kit.pipeline, binlog=False)
    return status["relay"]["position_token"].split(":")[0]


def test_a_purged_position_shows_in_status_and_both_recoveries_end_equal_to_the_source(
        own_mariadb, stack, tmp_path, monkeypatch, spark):
    database = "bank_purged"
    uri = f"mysql://lakesync:{quote(PASSWORD)}@127.0.0.1:{own_mariadb.port}/{database}"
    env = {**stack.connection_env(), f"AIRFLOW_CONN_{MYSQL_CONN_ID.upper()}": uri,
           "LAKESYNC_STATE_DIR": str(tmp_path / "state-root")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    kit = FaultPipeline(tmp_path, own_mariadb, database, env, name="purged")
    kit.create_demo_data(transactions=300)
    FullLoad(kit.pipeline).run()
    _write(own_mariadb, database, 10, seed=0)
    _relay(kit)
    run_stream(kit.pipeline, once=True, spark=spark)  # tables have applied changes: their commit times are known

    # the relay is down while the source goes on and rotates its binlog; the file the relay needs nears expiry
    _write(own_mariadb, database, 40, seed=1)
    needed = _stored_file(kit)
    _admin(own_mariadb, "SET GLOBAL binlog_expire_logs_seconds = 86400")
    _set(kit, "monitoring", binlog_expiry_warning_seconds=2 * 86400)
    expiring = pipeline_status(kit.pipeline)
    assert expiring["binlog"]["state"] == "expiring" and expiring["binlog"]["file"] == needed, expiring["binlog"]
    warning = attention(expiring, lag_alert_seconds=1e9)
    assert [(item.level, item.command) for item in warning] == [("warning", None)], warning
    _admin(own_mariadb, "SET GLOBAL binlog_expire_logs_seconds = 0")

    # ... and then it is purged: status names it, with the one command
    _purge_all_but_the_newest(own_mariadb, needed)
    purged = pipeline_status(kit.pipeline)
    assert purged["binlog"]["state"] == "purged" and purged["binlog"]["file"] == needed, purged["binlog"]
    (alert,) = attention(purged, lag_alert_seconds=1e9)
    assert alert.level == "alert" and alert.command == "lakesync snapshot --pipeline purged --restart"
    shown = subprocess.run(kit._cli("status"), env=kit.env, capture_output=True, text=True, timeout=120, check=True)
    assert "binlog purged" in shown.stdout and shown.stdout.count("lakesync snapshot") == 1, shown.stdout
    with pytest.raises(BinlogPurgedError):
        _relay(kit)  # off by default: the relay refuses, as before

    # recovery.when_purged: reload -> the relay re-loads the tables that need it (those loaded before the purged
    # position; one re-loaded by hand since keeps its Delta table) and goes on from there
    _set(kit, "recovery", when_purged="reload")
    tables = sorted(LoadState.for_pipeline_dir(kit.pipeline.pipeline_state_dir).tables)
    FullLoad(kit.pipeline, tables=[tables[0]], restart=True).run()  # loaded after the purge: its binlog is there
    kept_version = DeltaTable(kit.pipeline.delta.table_uri(tables[0])).version()
    _write(own_mariadb, database, 20, seed=2)
    stats = _relay(kit)
    assert f"re-load of {len(tables) - 1} of {len(tables)} tables" in stats.start_origin, stats.start_origin
    assert DeltaTable(kit.pipeline.delta.table_uri(tables[0])).version() == kept_version, "not re-loaded again"
    _write(own_mariadb, database, 20, seed=3)  # changes after the re-load arrive through the binlog
    _relay(kit)
    run_stream(kit.pipeline, once=True, spark=spark)
    outcome = FaultOutcome("binlog_purged_auto_reload", "relay")
    kit.verify(outcome)
    assert pipeline_status(kit.pipeline)["binlog"]["state"] == "ok"

    # off again, purged again: the one command from status is the whole recovery
    _set(kit, "recovery", when_purged="fail")
    _write(own_mariadb, database, 30, seed=4)
    _purge_all_but_the_newest(own_mariadb, _stored_file(kit))
    (alert,) = attention(pipeline_status(kit.pipeline), lag_alert_seconds=1e9)
    assert alert.command == "lakesync snapshot --pipeline purged --restart"
    kit.finish(kit.snapshot("--restart"))  # that command, through the CLI as a user runs it
    assert pipeline_status(kit.pipeline)["binlog"]["state"] == "ok", "the finished re-load is what the relay needs now"
    _write(own_mariadb, database, 20, seed=5)
    stats = _relay(kit)
    assert stats.start_origin.startswith("the full load's position: the stored progress"), stats.start_origin
    run_stream(kit.pipeline, once=True, spark=spark)
    kit.verify(FaultOutcome("binlog_purged_one_command", "relay"))


def test_recover_replays_the_tables_the_binlog_covers_and_reloads_only_the_one_it_does_not(
        own_mariadb, stack, tmp_path, monkeypatch, spark):
    """Kafka lost everything; the binlog still holds where the busy tables' marks are, not the load position
    of a table that never changed (its topic never existed, so it has no mark): ``recover`` re-loads that one
    alone and replays the rest, and Delta equals the source (the oracle)."""
    database = "bank_recover"
    uri = f"mysql://lakesync:{quote(PASSWORD)}@127.0.0.1:{own_mariadb.port}/{database}"
    env = {**stack.connection_env(), f"AIRFLOW_CONN_{MYSQL_CONN_ID.upper()}": uri,
           "LAKESYNC_STATE_DIR": str(tmp_path / "state-root")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    kit = FaultPipeline(tmp_path, own_mariadb, database, env, name="recovered")
    kit.create_demo_data(transactions=300)
    with own_mariadb.connect(database=database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE quiet_rates (code CHAR(3) PRIMARY KEY, rate DECIMAL(10,4) NOT NULL)")
        cur.execute("INSERT INTO quiet_rates VALUES ('EUR', 1.0000), ('USD', 1.0842)")
    FullLoad(kit.pipeline).run()
    _admin(own_mariadb, "FLUSH BINARY LOGS")  # the load's position is in an older file than what follows
    _write(own_mariadb, database, 10, seed=0)
    _relay(kit)
    run_stream(kit.pipeline, once=True, spark=spark)
    marks = {name: p.consumed_through for name, p in StreamProgress.load(kit.pipeline.pipeline_state_dir).tables.items()}
    assert marks.get("quiet_rates") is None and any(marks.values()), marks
    mark_file = SourcePosition.from_key(max(m for m in marks.values() if m), file_stem="binlog").file
    load_file = LoadState.for_pipeline_dir(kit.pipeline.pipeline_state_dir).position.file
    _admin(own_mariadb, f"PURGE BINARY LOGS TO '{mark_file}'")
    assert load_file not in {row[0] for row in _admin(own_mariadb, "SHOW BINARY LOGS")}

    recovery = Recovery(kit.pipeline)
    plan = recovery.plan()
    assert plan.reloaded == ["quiet_rates"], [(t.table, t.why) for t in plan.tables]
    busy = [t.table for t in plan.tables if not t.reload]
    versions = {name: DeltaTable(kit.pipeline.delta.table_uri(name)).version() for name in busy}
    recovery.run(plan)
    assert {name: DeltaTable(kit.pipeline.delta.table_uri(name)).version() for name in busy} == versions

    _write(own_mariadb, database, 10, seed=1)
    with own_mariadb.connect(database=database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE quiet_rates SET rate = 1.0900 WHERE code = 'USD'")
    _relay(kit)
    run_stream(kit.pipeline, once=True, spark=spark)
    kit.verify(FaultOutcome("recover_partial_reload", "relay"))
