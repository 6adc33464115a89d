"""Every DAG file imports cleanly, quickly and without heavy modules; bad pipeline files fail the parse loudly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from lakesync_devkit.dev.airflow_home import repo_root
from lakesync_devkit.dev.airflow_runner import AirflowRunner

HEAVY = ("pyspark", "deltalake", "pymysql", "confluent_kafka", "pandas")

_PARSE = f"""
import json, sys, time
started = time.monotonic()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
seconds = time.monotonic() - started
heavy = [name for name in {HEAVY!r} if name in sys.modules]
dags = {{}}
for dag_id, dag in bag.dags.items():
    dags[dag_id] = {{"timetable": type(dag.timetable).__name__, "catchup": dag.catchup,
                    "max_active_runs": dag.max_active_runs, "params": sorted(dag.params),
                    "tasks": [t.task_id for t in dag.tasks],
                    "outlets": sorted(str(o.uri) for t in dag.tasks for o in t.outlets if hasattr(o, "uri"))}}
print("RESULT " + json.dumps({{"seconds": seconds, "heavy": heavy, "errors": bag.import_errors, "dags": dags}}))
"""


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("airflow_home")


def _parse(airflow_home: Path, pipelines: Path) -> dict:
    runner = AirflowRunner(airflow_home, connections={}, pipelines_dir=pipelines)
    done = runner.run("-c", _PARSE, runner.dags_folder)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    raise AssertionError(done.stderr[-4000:])


@pytest.fixture(scope="module")
def demo_parse(airflow_home, tmp_path_factory) -> dict:
    pipelines = tmp_path_factory.mktemp("pipelines")
    shutil.copy(repo_root() / "include" / "pipelines" / "demo.yaml", pipelines)
    return _parse(airflow_home, pipelines)


def test_every_dag_file_imports_without_errors(demo_parse):
    assert demo_parse["errors"] == {}
    assert sorted(demo_parse["dags"]) == [
        "lakesync_demo_full_load", "lakesync_demo_maintenance", "lakesync_demo_settlement", "lakesync_demo_stream"]


def test_parsing_imports_no_heavy_modules(demo_parse):
    print(f"DagBag parse incl. airflow import: {demo_parse['seconds']:.2f}s")
    # Airflow kills a DAG file import that takes longer than core.dagbag_import_timeout (30 s by default); the
    # parse takes ~1 s here, and what keeps it there is importing no heavy modules.
    assert demo_parse["heavy"] == []


def test_settlement_dag_has_real_data_intervals_and_no_catchup(demo_parse):
    settlement = demo_parse["dags"]["lakesync_demo_settlement"]
    assert settlement["timetable"] == "CronDataIntervalTimetable"
    assert settlement["catchup"] is False and settlement["max_active_runs"] == 1
    assert settlement["tasks"] == ["settle_daily_balances", "settle_transactions"]
    assert all(uri.startswith("file:///") for uri in settlement["outlets"]) and len(settlement["outlets"]) == 2


def test_full_load_dag_offers_tables_and_mode_and_hands_off_to_the_stream(demo_parse):
    full_load = demo_parse["dags"]["lakesync_demo_full_load"]
    assert full_load["params"] == ["mode", "restart", "tables"]
    assert full_load["tasks"] == ["check_source", "full_load", "handoff", "stream", "wait_caught_up", "validate"]
    assert demo_parse["dags"]["lakesync_demo_stream"]["max_active_runs"] == 1


def test_invalid_pipeline_file_fails_the_parse_naming_file_and_field(airflow_home, tmp_path):
    document = yaml.safe_load((repo_root() / "include" / "pipelines" / "demo.yaml").read_text())
    document["name"] = "broken"
    document["tables"]["overrides"]["transactions"]["semantics"] = "sometimes"
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(document))
    parsed = _parse(airflow_home, tmp_path)
    assert parsed["dags"] == {}
    (error,) = parsed["errors"].values()
    assert "broken.yaml" in error
    assert "tables.overrides.transactions.semantics" in error
