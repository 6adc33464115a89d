"""The production shape on loopback: the embedded stack plus a Spark standalone cluster, Airflow's four
services on PostgreSQL with the LocalExecutor, and the demo pipeline's Delta tables on an S3 endpoint.

``lakesync dev up --shape production`` starts it; the production-shape tests use the same class. Its settings
(ports, generated passwords and keys) live in ``<state>/production.json`` (mode 0600), its files in
``<state>/production/``. The source (MariaDB) and the broker are the embedded stack's: MySQL 8 and Apache
Kafka are what only docker-compose runs.

:func:`deployment_env` is the one list of the settings this shape proves; docker-compose.yaml and
docs/deployment.md are checked against it (tests/unit/test_docker_compose.py).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

from lakesync.core.connections import SPARK_CONN_ID
from lakesync_devkit.dev.airflow_home import prepare_airflow_home, repo_root
from lakesync_devkit.dev.airflow_services import AirflowService, AirflowServices
from lakesync_devkit.dev.object_store import REGION, ObjectStore
from lakesync_devkit.dev.postgres import PostgresServer
from lakesync_devkit.dev.processes import free_port
from lakesync_devkit.dev.spark_cluster import SparkCluster
from lakesync_devkit.dev.stack import DevStack

BUCKET = "lakesync"
AIRFLOW_DB = "airflow"
AIRFLOW_DB_USER = "airflow"
S3_ENDPOINT_ENV = "LAKESYNC_S3_ENDPOINT"

#: The demo pipeline's Delta settings on object storage, the same keys as deploy/pipelines/team.yaml. Secrets
#: stay in the environment (``${VAR}``). delta-rs 1.x commits each log entry with a conditional put
#: (``If-None-Match: *``), so concurrent writers need no lock table; ``aws_conditional_put: etag`` is what
#: MinIO and R2 need for it (delta-rs' docs), and moto honours it too. ``AWS_S3_ALLOW_UNSAFE_RENAME`` would
#: give up the guarantee and is never set.
S3_STORAGE_OPTIONS = {
    "AWS_ENDPOINT_URL": "${" + S3_ENDPOINT_ENV + "}",
    "AWS_REGION": "${AWS_REGION}",
    "AWS_ACCESS_KEY_ID": "${AWS_ACCESS_KEY_ID}",
    "AWS_SECRET_ACCESS_KEY": "${AWS_SECRET_ACCESS_KEY}",
    "AWS_ALLOW_HTTP": "true",
    "aws_conditional_put": "etag",
}


def deployment_env() -> dict[str, str]:
    """The Airflow settings (values or ``<placeholders>``) every Airflow service of the shape runs with."""
    return {
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg2://<user>:<password>@<host>:<port>/airflow",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": "<shared secret>",
        "AIRFLOW__API__SECRET_KEY": "<shared secret>",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://<api-server>:<port>/execution/",
        f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}": '{"conn_type": "spark", "host": "spark://<master>:7077"}',
    }


@dataclass
class ProductionSettings:
    postgres_port: int
    postgres_password: str
    airflow_db_password: str
    s3_port: int
    s3_access_key: str
    s3_secret_key: str
    spark_master_port: int
    spark_worker_ports: list[int]
    jwt_secret: str
    api_secret_key: str

    @classmethod
    def fresh(cls) -> ProductionSettings:
        return cls(
            postgres_port=free_port(), postgres_password=secrets.token_urlsafe(18),
            airflow_db_password=secrets.token_urlsafe(18), s3_port=free_port(),
            s3_access_key="lakesync" + secrets.token_hex(4), s3_secret_key=secrets.token_urlsafe(24),
            spark_master_port=free_port(), spark_worker_ports=[free_port(), free_port()],
            jwt_secret=secrets.token_urlsafe(64), api_secret_key=secrets.token_urlsafe(64),
        )


class ProductionStack(DevStack):
    """The embedded stack and the production shape's servers, rooted at ``state_dir``."""

    @property
    def production_file(self) -> Path:
        return self.state_dir / "production.json"

    def has_production(self) -> bool:
        return self.production_file.exists()

    @property
    def production(self) -> ProductionSettings:
        if not self.has_production():
            settings = ProductionSettings.fresh()
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.production_file.write_text(json.dumps(asdict(settings), indent=2))
            self.production_file.chmod(0o600)
            return settings
        document = json.loads(self.production_file.read_text())
        return ProductionSettings(**{f.name: document[f.name] for f in fields(ProductionSettings)})

    @property
    def home(self) -> Path:
        return self.state_dir / "production"

    # -- components -----------------------------------------------------------------------------------
    @property
    def postgres(self) -> PostgresServer:
        p = self.production
        return PostgresServer(home=self.home / "postgres", port=p.postgres_port, password=p.postgres_password)

    @property
    def object_store(self) -> ObjectStore:
        p = self.production
        return ObjectStore(home=self.home / "object_store", port=p.s3_port, access_key=p.s3_access_key,
                           secret_key=p.s3_secret_key)

    @property
    def spark(self) -> SparkCluster:
        p = self.production
        return SparkCluster(home=self.home / "spark", master_port=p.spark_master_port,
                            worker_ports=list(p.spark_worker_ports))

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def airflow(self) -> AirflowServices:
        return AirflowServices(self.airflow_home, f"http://127.0.0.1:{self.settings.airflow_port}")

    @property
    def relay(self) -> AirflowService:
        """The relay of the demo pipeline, a service of its own as in docker-compose (``lakesync-relay``)."""
        return AirflowService(self.home / "relay", "relay", module="lakesync.cli.main", args=("--pipeline", "demo"))

    def start_relay(self) -> None:
        """Start the relay (once the demo database exists: it checks the source's tables at start)."""
        self.relay.start({**os.environ, **self.airflow_env()})

    @property
    def pipelines_dir(self) -> Path:
        return self.home / "pipelines"

    @property
    def delta_root(self) -> str:  # type: ignore[override]
        return f"s3://{BUCKET}/demo"

    def storage_options(self) -> dict[str, str]:
        """The demo pipeline's storage options with the variables filled in (for readers outside Airflow)."""
        options = dict(S3_STORAGE_OPTIONS)
        for name, value in self.s3_env().items():
            options = {key: option.replace("${" + name + "}", value) for key, option in options.items()}
        return options

    # -- environment ----------------------------------------------------------------------------------
    def s3_env(self) -> dict[str, str]:
        p = self.production
        return {S3_ENDPOINT_ENV: self.object_store.endpoint, "AWS_REGION": REGION,
                "AWS_ACCESS_KEY_ID": p.s3_access_key, "AWS_SECRET_ACCESS_KEY": p.s3_secret_key}

    def _overrides(self) -> dict[str, str]:
        """What the production shape sets on top of the embedded stack's Airflow environment."""
        p = self.production
        db = self.postgres.uri(AIRFLOW_DB, AIRFLOW_DB_USER, p.airflow_db_password)
        return {
            **self.connection_env(),
            **self.s3_env(),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db,
            "AIRFLOW__API_AUTH__JWT_SECRET": p.jwt_secret,
            "AIRFLOW__API__SECRET_KEY": p.api_secret_key,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__PARALLELISM": "6",
            f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}": json.dumps({"conn_type": "spark",
                                                                 "host": self.spark.master.url}),
            "LAKESYNC_PIPELINES_DIR": str(self.pipelines_dir),
        }

    def airflow_env(self) -> dict[str, str]:
        from lakesync_devkit.dev.airflow_home import airflow_env

        return airflow_env(self.airflow_home, connections=self._overrides(), api_port=self.settings.airflow_port)

    # -- lifecycle ------------------------------------------------------------------------------------
    def write_pipeline(self) -> Path:
        """The demo pipeline with its Delta tables on the object store and its own state folder."""
        document = yaml.safe_load((repo_root() / "include" / "pipelines" / "demo.yaml").read_text())
        document["description"] = "Demo bank into Delta on the production shape's object store."
        document["delta"] = {"root": self.delta_root, "storage_options": dict(S3_STORAGE_OPTIONS)}
        document["state_dir"] = "${LAKESYNC_STATE_DIR:-.lakesync}/production/pipelines"
        self.pipelines_dir.mkdir(parents=True, exist_ok=True)
        target = self.pipelines_dir / "demo.yaml"
        target.write_text(yaml.safe_dump(document, sort_keys=False))
        return target

    def prepare_airflow(self) -> dict[str, str]:
        """PostgreSQL and the object store first (the pipeline file names both), then migrate Airflow's database."""
        p = self.production
        self.postgres.start()
        self.postgres.ensure_database(AIRFLOW_DB, AIRFLOW_DB_USER, p.airflow_db_password)
        self.object_store.start()
        self.object_store.ensure_bucket(BUCKET)
        self.write_pipeline()
        return prepare_airflow_home(self.airflow_home, connections=self._overrides(),
                                    api_port=self.settings.airflow_port)

    def up(self) -> None:
        """The embedded stack, PostgreSQL and the object store, then the Spark cluster and Airflow's services."""
        super().up()
        self.spark.start()
        self.airflow.start({**os.environ, **self.airflow_env()})

    def down(self) -> None:
        if self.has_production():
            self.relay.stop()
            self.airflow.stop()
            self.spark.stop()
            self.object_store.stop()
            self.postgres.stop()
        super().down()

    def status(self) -> dict[str, dict[str, object]]:
        found = super().status()
        if not found or not self.has_production():
            return found
        found.pop("airflow", None)
        found["delta"] = {"root": self.delta_root}
        found["postgres"] = {"running": self.postgres.is_running(), "address": f"127.0.0.1:{self.postgres.port}",
                             "pid": self.postgres.pid(), "log": str(self.postgres.log_file)}
        found["object store (S3)"] = {"running": self.object_store.is_running(),
                                      "address": self.object_store.endpoint, "pid": self.object_store.pid(),
                                      "log": str(self.object_store.log_file)}
        spark = self.spark
        for daemon in [spark.master, *spark.workers]:
            found[f"spark {daemon.home.name}"] = {"running": daemon.is_running(),
                                                  "address": f"{daemon.host}:{daemon.port}",
                                                  "pid": daemon.pid(), "log": str(daemon.log_file)}
        relay = self.relay
        found["relay"] = {"running": relay.is_running(), "address": f"pid {relay.pid()}", "log": str(relay.log_file)}
        for name, info in self.airflow.status().items():
            found[name] = {**info, "address": self.airflow.api.url if "api" in name else f"pid {info['pid']}"}
        return found
