"""The settlement DAG run by Airflow (``dag.test()``) against the embedded MariaDB, landing in Delta."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from lakesync_devkit.demo.database import create_demo_database
from lakesync_devkit.dev.airflow_runner import AirflowRunner

from tests.deltakit import commit_history
from tests.oracle import read_delta_table

pytestmark = pytest.mark.integration

DAG_ID = "lakesync_settle_settlement"


def _scan(uri, columns: list[str] | None = None) -> pa.Table:
    """Read with delta-rs's own reader (pyarrow's dataset reader can abort at exit, docs/sink.md)."""
    return pa.RecordBatchReader.from_stream(DeltaTable(str(uri)).scan(columns=columns)).read_all()


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Path:
    """One migrated Airflow home for the module; each test brings its own pipelines folder."""
    return tmp_path_factory.mktemp("airflow_home")


@pytest.fixture(scope="module")
def module_delta_root(tmp_path_factory) -> Path:
    """The Delta root of every test in the module. The settle task's outlet is the table's asset, named
    ``lakesync.settle.transactions`` and located at the table's URI; Airflow keeps one active asset per name,
    so a second root under the same name in the shared Airflow home can make the task's asset inactive (the
    task then fails before it runs: AirflowInactiveAssetInInletOrOutletException). Each test starts with the
    root empty instead."""
    return tmp_path_factory.mktemp("settle_delta") / "delta"


@pytest.fixture
def settle_pipeline(stack, fresh_database, tmp_path, module_delta_root) -> tuple[Path, Path]:
    """A pipeline file ``settle.yaml`` over a fresh demo database; returns (pipelines dir, Delta root)."""
    with stack.mariadb.connect() as conn:
        create_demo_database(conn, fresh_database)
    pipelines, delta_root = tmp_path / "pipelines", module_delta_root
    shutil.rmtree(delta_root, ignore_errors=True)
    pipelines.mkdir()
    (pipelines / "settle.yaml").write_text(yaml.safe_dump({
        "name": "settle",
        "source": {"conn_id": "lakesync_demo_mysql", "database": fresh_database},
        "tables": {"overrides": {"transactions": {"watermark": {"column": "updated_at"}}}},
        "kafka": {"conn_id": "lakesync_demo_kafka", "topic_prefix": "settle"},
        "delta": {"root": str(delta_root)},
        "settlement": {"schedule": "0 2 * * *", "safety_window_seconds": 60},
        "state_dir": str(tmp_path / "state"),
    }))
    return pipelines, delta_root


@pytest.fixture
def airflow(stack, settle_pipeline, airflow_home) -> AirflowRunner:
    runner = AirflowRunner(airflow_home, connections=stack.connection_env(), pipelines_dir=settle_pipeline[0])
    print(f"airflow db migrate: {runner.migrate_seconds:.1f}s")
    return runner


def _book_days(mariadb, database: str, days: dict[str, int]) -> None:
    """``days[day]`` transactions stamped at noon of ``day`` (ids continue across days)."""
    rows, next_id = [], 1
    for day, count in days.items():
        for _ in range(count):
            rows.append((next_id, f"{next_id}.25", f"{day} 12:00:00"))
            next_id += 1
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO `{database}`.transactions (id, account_no, amount, kind, reference, booked_at, updated_at)"
            " VALUES (%s, 'AC0000000001', %s, 'deposit', 'ref', %s, %s)",
            [(i, amount, ts, ts) for i, amount, ts in rows],
        )


def _settlement_commits(uri: Path) -> list[dict]:
    return [c for c in commit_history(uri) if "lakesync.settlement.interval_start" in c]


def test_settlement_dag_run_twice_for_one_interval_leaves_the_same_table(airflow, settle_pipeline, mariadb,
                                                                         fresh_database):
    _book_days(mariadb, fresh_database, {"2026-11-19": 40})
    started = time.monotonic()
    first, second = airflow.dag_test(DAG_ID, "2026-11-20T02:00:00+00:00", "2026-11-20T02:00:00+00:00")
    print(f"dag.test x2: {time.monotonic() - started:.1f}s")
    assert first["state"] == second["state"] == "success", (first, second)
    assert first["interval"] == ["2026-11-19T02:00:00+00:00", "2026-11-20T02:00:00+00:00"]
    table = settle_pipeline[1] / "transactions"
    rows = _scan(str(table), ["id", "amount"]).sort_by("id").to_pylist()
    assert [r["id"] for r in rows] == list(range(1, 41))
    commits = _settlement_commits(table)
    assert len(commits) == 1, "the second run found nothing to change and committed nothing"
    assert commits[0]["lakesync.settlement.inserted"] == "40"


def test_three_day_backfill_lands_each_day_once(airflow, settle_pipeline, mariadb, fresh_database):
    _book_days(mariadb, fresh_database, {"2026-11-17": 3, "2026-11-18": 5, "2026-11-19": 7})
    days = ["2026-11-18T02:00:00+00:00", "2026-11-19T02:00:00+00:00", "2026-11-20T02:00:00+00:00"]
    runs = airflow.dag_test(DAG_ID, *days, *days)  # the backfill, then the same backfill again
    assert all(run["state"] == "success" for run in runs), runs
    table = settle_pipeline[1] / "transactions"
    commits = sorted(_settlement_commits(table), key=lambda c: c["lakesync.settlement.interval_start"])
    assert [(c["lakesync.settlement.interval_start"][:10], c["lakesync.settlement.inserted"]) for c in commits] == [
        ("2026-11-17", "3"), ("2026-11-18", "5"), ("2026-11-19", "7")]
    assert _scan(str(table), ["id"]).num_rows == 15


def test_maintenance_dag_with_delta_spark_compacts_the_settled_table_and_keeps_its_rows(airflow, settle_pipeline,
                                                                                        mariadb, fresh_database):
    """With ``delta.writer: delta_spark`` the maintenance task's commits are delta-spark's (a Spark session in
    the task), on a table delta-rs's settlement wrote. (The delta-rs maintenance task runs in
    tests/production/test_production_pipeline.py and beside the stream and the settlement in
    tests/production/test_production_writers_concurrent.py, on S3.)"""
    writer = "delta_spark"
    _book_days(mariadb, fresh_database, {"2026-11-17": 3, "2026-11-18": 5, "2026-11-19": 7})
    runs = airflow.dag_test(DAG_ID, "2026-11-18T02:00:00+00:00", "2026-11-19T02:00:00+00:00",
                            "2026-11-20T02:00:00+00:00")
    assert all(run["state"] == "success" for run in runs), runs
    table = settle_pipeline[1] / "transactions"
    files_before = len(DeltaTable(str(table)).file_uris())
    assert files_before >= 3, f"each settled day should have added a file: {DeltaTable(str(table)).history()}"
    settings = settle_pipeline[0] / "settle.yaml"
    document = yaml.safe_load(settings.read_text())
    document["delta"]["writer"] = writer
    settings.write_text(yaml.safe_dump(document))
    versions_before = DeltaTable(str(table)).version()

    (run,) = airflow.dag_test("lakesync_settle_maintenance", "2026-11-22T00:00:00+00:00")

    assert run["state"] == "success", run
    assert len(DeltaTable(str(table)).file_uris()) < files_before
    assert read_delta_table(str(table)).num_rows == 15
    engines = {entry.get("engineInfo", "") for entry in DeltaTable(str(table)).history()
               if entry["version"] > versions_before and entry["operation"] in ("OPTIMIZE", "VACUUM END")}
    writers = {"delta_spark" if "Delta-Lake/" in engine else "delta_rs" if engine.startswith("delta-rs") else engine
               for engine in engines}
    assert writers == {writer}, engines
