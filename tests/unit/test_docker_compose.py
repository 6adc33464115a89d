"""docker-compose.yaml agrees with the project: no Docker needed, the file is parsed and checked.

Expected values come from lakesync's own code wherever it has them (the grants, the binlog settings of the
embedded server, the pipeline model, the connection resolver), so that a change on either side that breaks
the deployment fails here rather than at a team's first ``docker compose up``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from importlib.metadata import requires
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from lakesync_devkit.dev.airflow_home import repo_root
from lakesync_devkit.dev.mariadb import LAKESYNC_GRANTS
from lakesync_devkit.dev.stack import LAKESYNC_USER
from packaging.requirements import Requirement

from lakesync.core import connections
from lakesync.core.config import Pipeline, load_pipeline, load_pipeline_file
from lakesync.core.connections import SPARK_CONN_ID
from lakesync.source.server_checks import REQUIRED_SETTINGS

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
DEPLOY = REPO / "deploy"
TEAM_PIPELINE = DEPLOY / "pipelines" / "team.yaml"

# Compose's interpolation: $$ is a literal $, ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}.
_COMPOSE_VAR = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
_REQUIRED_REF = re.compile(r"^\$\{[A-Za-z_]\w*:?\?[^}]*\}$")
_SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|FERNET|JWT|TOKEN", re.IGNORECASE)


def _compose_text() -> str:
    return COMPOSE_FILE.read_text()


def _required_variables(text: str) -> set[str]:
    return {m["name"] for m in _COMPOSE_VAR.finditer(text) if m["name"] and m["op"] in (":?", "?")}


def _interpolate(value: object, env: dict[str, str]) -> object:
    """What ``docker compose config`` would make of ``value`` with ``env`` as the .env file."""
    if isinstance(value, dict):
        return {key: _interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [_interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        found = env.get(match["name"])
        op = match["op"] or ""
        if found is None or (found == "" and op.startswith(":")):
            if op.endswith("?"):
                raise AssertionError(f"${{{match['name']}}} is required: {match['arg']}")
            return match["arg"] if op else ""
        return found

    return _COMPOSE_VAR.sub(replace, value)


#: The .env a team would write: a distinct value for every variable compose insists on.
DOT_ENV = {name: f"test-{name.lower().replace('_', '-')}" for name in _required_variables(_compose_text())}


@pytest.fixture(scope="module")
def compose() -> dict:
    return _interpolate(yaml.safe_load(_compose_text()), DOT_ENV)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def services(compose: dict) -> dict[str, dict]:
    return compose["services"]


def _env(service: dict) -> dict[str, str]:
    return {key: str(value) for key, value in (service.get("environment") or {}).items()}


def _one_shot(service: dict) -> bool:
    return service.get("restart") == "no"


def _served_ports(service: dict) -> set[int]:
    """Ports the container listens on, as the file declares them (``expose`` and published ports)."""
    ports = {int(port) for port in service.get("expose", [])}
    ports |= {int(str(mapping).rsplit(":", 1)[-1].split("/")[0]) for mapping in service.get("ports", [])}
    return ports


def _host_path(service: dict, container_path: str) -> Path:
    """The repository folder bind-mounted at ``container_path`` in ``service``."""
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if target == container_path and source.startswith("./"):
            return REPO / source
    raise AssertionError(f"nothing in the repository is mounted at {container_path}")


def _pipeline_services(services: dict[str, dict]) -> dict[str, dict]:
    return {name: svc for name, svc in services.items() if "LAKESYNC_PIPELINES_DIR" in _env(svc)}


@pytest.fixture
def isolated_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No lakesync or connection variables from the machine running the tests leak into a check."""
    for name in [*DOT_ENV, "LAKESYNC_SOURCE_DATABASE", "LAKESYNC_S3_ENDPOINT", "LAKESYNC_S3_REGION"]:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def _load_team_pipeline_as(service: dict, monkeypatch: pytest.MonkeyPatch) -> Pipeline:
    """Resolve the pipeline with exactly the service's environment and mounts, as the container would."""
    env = _env(service)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_pipeline("team", directory=_host_path(service, env["LAKESYNC_PIPELINES_DIR"]))


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict]) -> None:
    for name, service in services.items():
        if _one_shot(service):
            continue
        test = (service.get("healthcheck") or {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"


def test_one_shot_services_are_awaited_until_they_succeed(services: dict[str, dict]) -> None:
    awaited = {
        dependency
        for service in services.values()
        for dependency, rule in (service.get("depends_on") or {}).items()
        if rule["condition"] == "service_completed_successfully"
    }
    assert {name for name, service in services.items() if _one_shot(service)} == awaited


def test_dependencies_wait_for_health_not_just_for_a_start(services: dict[str, dict]) -> None:
    for name, service in services.items():
        depends_on = service.get("depends_on") or {}
        assert isinstance(depends_on, dict), f"{name}: depends_on must give a condition per service"
        for dependency, rule in depends_on.items():
            expected = "service_completed_successfully" if _one_shot(services[dependency]) else "service_healthy"
            assert rule["condition"] == expected, f"{name} -> {dependency}"


def test_mysql_runs_with_the_settings_lakesync_server_checks_demand(services: dict[str, dict]) -> None:
    pairs = (arg[2:].partition("=") for arg in services["mysql"]["command"] if arg.startswith("--"))
    flags = {key.replace("-", "_"): value for key, _, value in pairs}
    for variable, required in REQUIRED_SETTINGS:
        if variable == "log_bin":
            # Switched on by naming the files: a fixed base name survives the container being recreated.
            assert flags.get("log_bin"), "the binlog must be on, with a fixed base name"
        else:
            assert flags.get(variable, "").upper() == required, variable
    # Not demanded by the checks, but what the relay prefers on MySQL (LESSONS: prefer GTID positions).
    assert (flags.get("gtid_mode"), flags.get("enforce_gtid_consistency")) == ("ON", "ON")
    assert int(flags["server_id"]) >= 1


def test_mysql_init_grants_the_lakesync_user_exactly_lakesync_grants() -> None:
    scripts = "\n".join(path.read_text() for path in sorted((DEPLOY / "mysql" / "initdb").iterdir()))
    grants = re.findall(r"GRANT\s+(.+?)\s+ON\s+\*\.\*\s+TO\s+'(\w+)'@'%'", scripts)
    assert len(grants) == 1, grants
    privileges, user = grants[0]
    assert user == LAKESYNC_USER
    assert sorted(p.strip() for p in privileges.split(",")) == sorted(LAKESYNC_GRANTS)
    assert "IDENTIFIED BY '${password_sql}'" in scripts


def test_mysql_init_scripts_are_mounted_and_not_executable(services: dict[str, dict]) -> None:
    # Not executable: the MySQL entrypoint then sources them, which is what gives them docker_process_sql.
    assert _host_path(services["mysql"], "/docker-entrypoint-initdb.d") == DEPLOY / "mysql" / "initdb"
    for script in (DEPLOY / "mysql" / "initdb").glob("*.sh"):
        assert not script.stat().st_mode & 0o111, f"{script.name} must not be executable"


def test_team_pipeline_validates_with_the_config_model(isolated_env: pytest.MonkeyPatch) -> None:
    for name in ("LAKESYNC_S3_ACCESS_KEY", "LAKESYNC_S3_SECRET_KEY"):
        isolated_env.setenv(name, DOT_ENV[name])
    pipeline = load_pipeline_file(TEAM_PIPELINE)
    assert pipeline.name == "team"
    assert pipeline.delta.root.startswith("s3://")
    options = {key.lower(): value for key, value in pipeline.delta.storage_options.items()}
    # Concurrent committers (stream, full load, settlement) need conditional puts, never unsafe renames.
    assert options.get("aws_conditional_put") == "etag"
    assert options.get("aws_s3_allow_unsafe_rename", "false").lower() != "true"


def test_every_process_that_loads_the_pipeline_can_resolve_it(
    services: dict[str, dict], isolated_env: pytest.MonkeyPatch
) -> None:
    loaders = _pipeline_services(services)
    assert {"lakesync-relay", "airflow-scheduler", "airflow-dag-processor", "spark-worker"} <= set(loaders)
    for name, service in loaders.items():
        with pytest.MonkeyPatch.context() as patch:
            pipeline = _load_team_pipeline_as(service, patch)
            env = _env(service)
            for conn_id in (pipeline.source.conn_id, pipeline.kafka.conn_id):
                assert f"AIRFLOW_CONN_{str(conn_id).upper()}" in env, f"{name} lacks connection {conn_id}"


def test_connections_point_at_the_services_that_serve_them(
    services: dict[str, dict], isolated_env: pytest.MonkeyPatch
) -> None:
    mysql_password = _env(services["mysql"])["LAKESYNC_MYSQL_PASSWORD"]
    bucket_account = _env(services["minio-init"])
    advertised = _env(services["kafka"])["KAFKA_ADVERTISED_LISTENERS"]
    kafka_addresses = {listener.split("://", 1)[1] for listener in advertised.split(",")}
    minio_address = services["minio"]["command"][services["minio"]["command"].index("--address") + 1]

    for name, service in _pipeline_services(services).items():
        with pytest.MonkeyPatch.context() as patch:
            pipeline = _load_team_pipeline_as(service, patch)
            source = connections.mysql_connection(pipeline)
            bootstrap = connections.kafka_client_config(pipeline)["bootstrap.servers"]

        assert source.host == "mysql" and source.port in _served_ports(services["mysql"]), name
        assert (source.user, source.password.get_secret_value()) == (LAKESYNC_USER, mysql_password), name
        assert source.database == pipeline.source.database, name
        for address in bootstrap.split(","):
            assert address.split(":")[0] == "kafka" and address in kafka_addresses, f"{name}: {address}"
            assert int(address.split(":")[1]) in _served_ports(services["kafka"]), name

        options = pipeline.delta.storage_options
        endpoint = urlsplit(options["AWS_ENDPOINT_URL"])
        assert endpoint.hostname == "minio" and endpoint.port == int(minio_address.lstrip(":")), name
        assert endpoint.port in _served_ports(services["minio"]), name
        assert (options["AWS_ACCESS_KEY_ID"], options["AWS_SECRET_ACCESS_KEY"]) == (
            bucket_account["LAKESYNC_S3_ACCESS_KEY"], bucket_account["LAKESYNC_S3_SECRET_KEY"]), name


def test_delta_root_is_the_bucket_the_init_job_creates_and_the_policy_allows(
    isolated_env: pytest.MonkeyPatch,
) -> None:
    for name in ("LAKESYNC_S3_ACCESS_KEY", "LAKESYNC_S3_SECRET_KEY"):
        isolated_env.setenv(name, DOT_ENV[name])
    bucket = urlsplit(load_pipeline_file(TEAM_PIPELINE).delta.root).netloc
    assert re.search(rf"mc mb --ignore-existing local/{bucket}\n", (DEPLOY / "minio" / "create-bucket.sh").read_text())
    policy = json.loads((DEPLOY / "minio" / "lakesync-policy.json").read_text())
    resources = {resource for statement in policy["Statement"] for resource in statement["Resource"]}
    assert resources == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"}


def test_airflow_reaches_spark_postgres_and_its_api_server(services: dict[str, dict]) -> None:
    master = services["spark-master"]["command"]
    master_url = f"spark://spark-master:{master[master.index('--port') + 1]}"
    assert int(master_url.rsplit(":", 1)[1]) in _served_ports(services["spark-master"])
    assert master_url in services["spark-worker"]["command"]
    spark_defaults = dict(
        line.split(None, 1) for line in (DEPLOY / "spark" / "spark-defaults.conf").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert spark_defaults["spark.master"].strip() == master_url

    postgres = _env(services["postgres"])
    for name in ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        env = _env(services[name])
        assert env[f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}"] == master_url == env["LAKESYNC_SPARK_MASTER"], name
        assert _host_path(services[name], env["SPARK_CONF_DIR"]) == DEPLOY / "spark", name
        # Executors start the Python the driver names; both images provide it at this path.
        assert env["PYSPARK_PYTHON"] == spark_defaults["spark.pyspark.python"].strip(), name
        db = urlsplit(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        assert (db.hostname, db.username, db.password) == ("postgres", postgres["POSTGRES_USER"],
                                                           postgres["POSTGRES_PASSWORD"]), name
        assert db.port in _served_ports(services["postgres"]), name
        api = urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
        assert api.hostname == "airflow-api-server", name
        assert api.port in _served_ports(services["airflow-api-server"]), name
    for dockerfile in ("airflow.Dockerfile", "spark.Dockerfile"):
        assert "/opt/lakesync/venv" in (DEPLOY / dockerfile).read_text(), dockerfile


def test_the_dags_find_their_folders_where_the_repository_is_mounted(
    services: dict[str, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "airflow-api-server"):
        monkeypatch.setenv("LAKESYNC_REPO", _env(services[name])["LAKESYNC_REPO"])
        root = repo_root()
        for folder in ("dags", "plugins", "spark_apps"):
            assert _host_path(services[name], str(root / folder)) == REPO / folder, f"{name}: {folder}"


def test_kafka_is_a_single_kraft_node_without_zookeeper(services: dict[str, dict]) -> None:
    assert not [name for name, service in services.items()
                if "zookeeper" in name or "zookeeper" in str(service.get("image", ""))]
    env = _env(services["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not [key for key in env if "ZOOKEEPER" in key]
    controller_port = next(listener.rsplit(":", 1)[1] for listener in env["KAFKA_LISTENERS"].split(",")
                           if listener.startswith(env["KAFKA_CONTROLLER_LISTENER_NAMES"] + "://"))
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:{controller_port}"


def test_kafka_image_is_the_apache_kafka_version_the_embedded_stack_pins(services: dict[str, dict]) -> None:
    from lakesync.jvm.artifacts import jar_set

    pinned = {c.version for c in jar_set("kafka").roots if c.group == "org.apache.kafka" and c.artifact == "kafka_2.13"}
    image, _, tag = services["kafka"]["image"].partition(":")
    assert image == "apache/kafka" and {tag} == pinned, (services["kafka"]["image"], pinned)
    env = _env(services["kafka"])
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1" == env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"]


def test_relay_runs_the_team_pipeline_and_restarts(services: dict[str, dict]) -> None:
    relay = services["lakesync-relay"]
    assert relay["entrypoint"] + relay["command"] == ["lakesync", "relay", "--pipeline", "team"]
    assert relay["restart"] == "unless-stopped"
    assert relay["healthcheck"]["test"][-1] == "team"
    assert relay["image"] == services["airflow-scheduler"]["image"]


def test_bind_mounts_exist_in_the_repository(services: dict[str, dict]) -> None:
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name} mounts {source}, which does not exist"
        build = service.get("build")
        if build:
            assert (REPO / build["context"] / build["dockerfile"]).is_file(), name


def test_image_versions_satisfy_the_project_dependencies() -> None:
    requirements = {Requirement(spec).name: Requirement(spec) for spec in requires("lakesync") or []}
    defaults = yaml.safe_load(_compose_text())["x-build-args"]
    versions = {key: str(_interpolate(value, {})) for key, value in defaults.items()}
    assert requirements["apache-airflow"].specifier.contains(versions["AIRFLOW_VERSION"])
    assert requirements["pyspark"].specifier.contains(versions["SPARK_VERSION"])
    # Building a Dockerfile on its own gives the same versions as building it through compose.
    for dockerfile in ("airflow.Dockerfile", "spark.Dockerfile"):
        for arg, default in re.findall(r"^ARG (\w+)=(\S+)$", (DEPLOY / dockerfile).read_text(), re.MULTILINE):
            assert versions.get(arg) == default, f"{dockerfile}: ARG {arg}={default}"


def _literal_secret(value: str) -> bool:
    """A value that is a password itself rather than a reference to one."""
    value = value.strip().strip("'\"")
    return bool(value) and not value.startswith("$")


def test_no_literal_passwords_in_compose_or_deploy() -> None:
    found: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and _SECRET_NAME.search(str(key)) and not _REQUIRED_REF.match(value):
                    found.append(f"{where}.{key}")
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{where}[{index}]")
        elif isinstance(node, str):
            for password in re.findall(r"://[^:/@\s]+:([^@\s]+)@", node):
                if not _REQUIRED_REF.match(password):
                    found.append(f"{where}: URI password")
            if node.lstrip().startswith("{"):
                password = json.loads(node).get("password")
                if password is not None and not _REQUIRED_REF.match(password):
                    found.append(f"{where}: JSON password")

    walk(yaml.safe_load(_compose_text()), "docker-compose.yaml")

    assignment = re.compile(r"^\s*(?:export\s+)?([\w.-]+)\s*[=:]\s*(.*)$")
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.lstrip().startswith("#"):
                continue
            match = assignment.match(line)
            if match and _SECRET_NAME.search(match[1]) and _literal_secret(match[2].split(" #")[0]):
                found.append(f"{path.relative_to(REPO)}:{number}")
            for literal in re.findall(r"IDENTIFIED BY '([^']*)'", line):
                if _literal_secret(literal):
                    found.append(f"{path.relative_to(REPO)}:{number}: IDENTIFIED BY")
    assert found == []


def _relay_probe():
    spec = importlib.util.spec_from_file_location("relay_streaming", DEPLOY / "healthchecks" / "relay_streaming.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _FakeSource:
    """A connection whose SHOW PROCESSLIST returns ``commands`` (column 5 of each row, as MySQL does)."""

    def __init__(self, commands: list[str]) -> None:
        self.rows = [(index, "lakesync", "10.0.0.9:4711", None, command, 0, "", None)
                     for index, command in enumerate(commands)]

    def __enter__(self) -> _FakeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def cursor(self) -> _FakeSource:
        return self

    def execute(self, sql: str) -> None:
        assert sql == "SHOW PROCESSLIST"

    def fetchall(self) -> list[tuple]:
        return self.rows


@pytest.mark.parametrize(("commands", "healthy"), [
    (["Query", "Binlog Dump GTID"], True),
    (["Binlog Dump"], True),
    (["Query", "Sleep"], False),
])
def test_relay_healthcheck_is_healthy_only_while_a_binlog_stream_is_open(
    commands: list[str], healthy: bool, services: dict[str, dict], isolated_env: pytest.MonkeyPatch
) -> None:
    probe = _relay_probe()
    relay = services["lakesync-relay"]
    for name, value in _env(relay).items():
        isolated_env.setenv(name, value)
    isolated_env.setenv("LAKESYNC_PIPELINES_DIR", str(_host_path(relay, _env(relay)["LAKESYNC_PIPELINES_DIR"])))
    isolated_env.setattr(probe.pymysql, "connect", lambda **kwargs: _FakeSource(commands))
    assert probe.main(relay["healthcheck"]["test"][-1]) == (0 if healthy else 1)


def test_relay_healthcheck_fails_cleanly_when_the_source_is_down(
    services: dict[str, dict], isolated_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    probe = _relay_probe()
    relay = services["lakesync-relay"]
    for name, value in _env(relay).items():
        isolated_env.setenv(name, value)
    isolated_env.setenv("LAKESYNC_PIPELINES_DIR", str(_host_path(relay, _env(relay)["LAKESYNC_PIPELINES_DIR"])))

    def refuse(**kwargs: object) -> None:
        raise probe.pymysql.err.OperationalError(2003, "Can't connect to MySQL server on 'mysql'")

    isolated_env.setattr(probe.pymysql, "connect", refuse)
    assert probe.main("team") == 1
    error = capsys.readouterr().err
    assert "cannot reach lakesync@mysql:3306" in error
    assert DOT_ENV["LAKESYNC_MYSQL_PASSWORD"] not in error
