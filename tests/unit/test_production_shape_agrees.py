"""docker-compose.yaml, deploy/pipelines/team.yaml and docs/deployment.md use the commands and settings that the
production shape (``lakesync dev up --shape production``, proven by tests/production/) runs.

Nothing is started: the shape's commands and environment are built from its settings, the compose file is
parsed. A change to either side that the other does not follow fails here."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from lakesync_devkit.dev.airflow_services import SERVICES
from lakesync_devkit.dev.production import S3_STORAGE_OPTIONS, ProductionStack, deployment_env
from lakesync_devkit.dev.spark_cluster import SparkWorker
from lakesync_devkit.dev.stack import StackSettings

from lakesync.core.connections import SPARK_CONN_ID

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_SERVICES = {f"airflow-{command}": command for command in SERVICES}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


@pytest.fixture(scope="module")
def shape(tmp_path_factory: pytest.TempPathFactory) -> ProductionStack:
    stack = ProductionStack(tmp_path_factory.mktemp("shape"))
    stack._save(StackSettings.fresh())
    return stack


def _env(service: dict) -> dict[str, str]:
    """The service's environment with compose's ``${VAR...}`` references replaced by a placeholder value."""
    return {key: re.sub(r"\$\{[^}]*\}", "value", str(value))
            for key, value in (service.get("environment") or {}).items()}


def test_compose_runs_the_four_airflow_services_the_shape_runs(compose: dict) -> None:
    commands = {name: service["command"] for name, service in compose["services"].items()
                if name in AIRFLOW_SERVICES}
    assert commands == {name: [command] for name, command in AIRFLOW_SERVICES.items()}


def test_airflow_settings_of_compose_and_the_shape_agree(compose: dict, shape: ProductionStack) -> None:
    ours = shape.airflow_env()
    for name in AIRFLOW_SERVICES:
        theirs = _env(compose["services"][name])
        for key in deployment_env():
            assert key in theirs and key in ours, f"{name}: {key}"
        assert theirs["AIRFLOW__CORE__EXECUTOR"] == ours["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL"):
            assert urlsplit(theirs[key]).scheme == urlsplit(ours[key]).scheme, key
            assert urlsplit(theirs[key]).path == urlsplit(ours[key]).path, key
        spark = f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}"
        assert theirs[spark].startswith("spark://") and '"spark://' in ours[spark]


def test_compose_spark_runs_the_shape_s_daemons_with_the_same_worker_size(compose: dict) -> None:
    master = compose["services"]["spark-master"]["command"]
    worker = " ".join(compose["services"]["spark-worker"]["command"])
    assert "org.apache.spark.deploy.master.Master" in master
    assert "org.apache.spark.deploy.worker.Worker" in worker
    defaults = SparkWorker(home=Path("."), port=0)
    assert f"--cores ${{SPARK_WORKER_CORES:-{defaults.cores}}}" in worker
    assert f"--memory ${{SPARK_WORKER_MEMORY:-{defaults.memory}}}" in worker


def test_compose_relay_runs_the_command_the_shape_runs(compose: dict, shape: ProductionStack) -> None:
    command = compose["services"]["lakesync-relay"]["command"]
    relay = shape.relay
    assert [command[0], command[1]] == [relay.command, relay.args[0]]


def test_team_pipeline_uses_the_storage_options_the_shape_proves() -> None:
    team = yaml.safe_load((REPO / "deploy" / "pipelines" / "team.yaml").read_text())
    options = team["delta"]["storage_options"]
    assert set(options) == set(S3_STORAGE_OPTIONS)
    for key in ("AWS_ALLOW_HTTP", "aws_conditional_put"):
        assert options[key] == S3_STORAGE_OPTIONS[key], key
    assert not {"AWS_S3_ALLOW_UNSAFE_RENAME", "AWS_S3_LOCKING_PROVIDER"} & {k.upper() for k in options}
    assert team["delta"]["root"].startswith("s3://")


def test_deployment_doc_names_the_shape_its_commands_and_what_only_compose_shows() -> None:
    doc = (REPO / "docs" / "deployment.md").read_text()
    for text in ("lakesync dev up --shape production", "org.apache.spark.deploy.master.Master",
                 "org.apache.spark.deploy.worker.Worker", "aws_conditional_put: etag", "What the tests cover",
                 "What only compose shows", *(f"airflow {command}" for command in SERVICES), *deployment_env()):
        assert text in doc, text
