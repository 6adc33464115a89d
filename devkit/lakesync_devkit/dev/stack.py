"""The embedded stack: MariaDB, the broker and an Airflow home, all on loopback, all state in one folder.

``lakesync dev up|down|status`` and the pytest fixtures both use :class:`DevStack`. The state folder holds
``stack.json`` (ports and generated passwords, mode 0600), each server's files and logs, and the Delta
tables of the demo pipeline. Starting twice is harmless: a running server is found by its pid and port.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from urllib.parse import quote

from lakesync.core.errors import StackError
from lakesync.core.state_files import write_json_atomically
from lakesync_devkit.dev.airflow_home import airflow_env, prepare_airflow_home
from lakesync_devkit.dev.broker import Broker
from lakesync_devkit.dev.debezium import DEBEZIUM_GRANTS, ConnectorSettings, DebeziumConnect, SourceDatabase
from lakesync_devkit.dev.mariadb import MariaDBServer
from lakesync_devkit.dev.processes import free_port

DEFAULT_STATE_DIR = ".lakesync"
STATE_DIR_ENV = "LAKESYNC_STATE_DIR"
LAKESYNC_USER = "lakesync"
DEBEZIUM_USER = "debezium"
#: Connection ids the demo pipeline names; the stack defines them for the CLI and for Airflow.
MYSQL_CONN_ID = "lakesync_demo_mysql"
KAFKA_CONN_ID = "lakesync_demo_kafka"


def state_dir_from_env(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``explicit``, else ``$LAKESYNC_STATE_DIR``, else ``./.lakesync``; always absolute."""
    raw = explicit or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR
    return Path(raw).expanduser().resolve()


@dataclass
class StackSettings:
    """What ``stack.json`` keeps between commands: fixed once at the first ``up``."""

    mariadb_port: int
    broker_port: int
    server_id: int
    root_password: str
    lakesync_password: str
    demo_database: str = "bank"
    #: Port of the Airflow API server and UI (`airflow standalone` / `airflow api-server` with env.sh).
    airflow_port: int = 0
    #: Port of the Kafka node's KRaft controller listener.
    broker_controller_port: int = 0
    #: Port of Kafka Connect's REST listener (Debezium, `lakesync dev debezium up`).
    debezium_port: int = 0
    #: Password of the ``debezium`` database user the connector reads as.
    debezium_password: str = ""

    @classmethod
    def from_json(cls, document: dict[str, object]) -> StackSettings:
        """Settings from ``stack.json``, ignoring keys an older or newer lakesync wrote."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in document.items() if key in known})  # type: ignore[arg-type]

    @classmethod
    def fresh(cls) -> StackSettings:
        return cls(
            mariadb_port=free_port(),
            broker_port=free_port(),
            server_id=1,
            root_password=secrets.token_urlsafe(18),
            lakesync_password=secrets.token_urlsafe(18),
            airflow_port=free_port(),
            broker_controller_port=free_port(),
            debezium_port=free_port(),
            debezium_password=secrets.token_urlsafe(18),
        )


class DevStack:
    """Everything ``lakesync dev`` manages, rooted at ``state_dir``."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None) -> None:
        self.state_dir = state_dir_from_env(state_dir)
        self._settings: StackSettings | None = None

    # -- settings -------------------------------------------------------------------------------------
    @property
    def settings_file(self) -> Path:
        return self.state_dir / "stack.json"

    def exists(self) -> bool:
        return self.settings_file.exists()

    @property
    def settings(self) -> StackSettings:
        if self._settings is None:
            if not self.exists():
                raise StackError(
                    f"no embedded stack in {self.state_dir}",
                    hint="start one with `lakesync dev up` (or set LAKESYNC_STATE_DIR to the folder of yours)",
                )
            self._settings = StackSettings.from_json(json.loads(self.settings_file.read_text()))
            if not self._settings.airflow_port:  # a stack made before the Airflow home existed
                self._settings.airflow_port = free_port()
                self._save(self._settings)
            if not self._settings.broker_controller_port:  # a stack made before the broker was Apache Kafka
                self._settings.broker_controller_port = free_port()
                self._save(self._settings)
            if not self._settings.debezium_port:  # a stack made before Debezium ran beside it
                self._settings.debezium_port = free_port()
                self._settings.debezium_password = secrets.token_urlsafe(18)
                self._save(self._settings)
        return self._settings

    def _save(self, settings: StackSettings) -> None:
        write_json_atomically(self.settings_file, asdict(settings), private=True)
        self._settings = settings

    # -- components -----------------------------------------------------------------------------------
    @property
    def mariadb(self) -> MariaDBServer:
        s = self.settings
        return MariaDBServer(
            home=self.state_dir / "mariadb", port=s.mariadb_port, server_id=s.server_id,
            root_password=s.root_password,
        )

    @property
    def broker(self) -> Broker:
        return Broker(home=self.state_dir / "broker", port=self.settings.broker_port,
                      controller_port=self.settings.broker_controller_port)

    @property
    def debezium_home(self) -> Path:
        return self.state_dir / "debezium"

    def debezium(self, connector: ConnectorSettings | None = None, *, home: Path | None = None) -> DebeziumConnect:
        """The Kafka Connect worker running Debezium beside the stack: with ``connector``'s settings, else with
        those of its last start (kept in its home). ``home`` gives another worker its own folder (the
        benchmark's), on a fresh REST port."""
        s = self.settings
        return DebeziumConnect(
            home=home or self.debezium_home, port=free_port() if home else s.debezium_port,
            bootstrap=self.broker.bootstrap, connector=connector,
            source=SourceDatabase("127.0.0.1", s.mariadb_port, DEBEZIUM_USER, s.debezium_password),
        )

    def start_debezium(self, connector: ConnectorSettings, *, home: Path | None = None,
                       timeout: float = 120.0) -> DebeziumConnect:
        """Create the connector's database user and start Debezium; returns the running worker."""
        self.mariadb.create_user(DEBEZIUM_USER, self.settings.debezium_password, DEBEZIUM_GRANTS)
        connect = self.debezium(connector, home=home)
        connect.start(timeout=timeout)
        return connect

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def delta_root(self) -> Path:
        return self.state_dir / "delta"

    # -- lifecycle ------------------------------------------------------------------------------------
    def up(self) -> None:
        """Start MariaDB and the broker and create the lakesync user; harmless when already up."""
        if not self.exists():
            self._save(StackSettings.fresh())
        self.mariadb.start()
        self.mariadb.create_lakesync_user(LAKESYNC_USER, self.settings.lakesync_password)
        self.broker.start()
        self.prepare_airflow()
        self.write_env_file()

    def prepare_airflow(self) -> dict[str, str]:
        """Migrate the Airflow home's metadata database; returns the environment Airflow commands run with."""
        return prepare_airflow_home(self.airflow_home, connections=self.connection_env(),
                                    api_port=self.settings.airflow_port)

    def down(self) -> None:
        """Stop the servers; their data stays in the state folder (``--purge`` in the CLI removes it)."""
        if not self.exists():
            return
        if self.debezium_home.exists():
            self.debezium().stop()  # before the broker and MariaDB it writes to and reads from
        self.broker.stop()
        self.mariadb.stop()

    def status(self) -> dict[str, dict[str, object]]:
        """What runs where, for ``lakesync dev status`` (no secrets)."""
        if not self.exists():
            return {}
        return {
            "mariadb": {
                "running": self.mariadb.is_running(),
                "address": f"127.0.0.1:{self.settings.mariadb_port}",
                "pid": self.mariadb.pid(),
                "log": str(self.mariadb.log_file),
            },
            "broker": {
                "running": self.broker.is_running(),
                "address": self.broker.bootstrap,
                "pid": self.broker.pid(),
                "log": str(self.broker.log_file),
            },
            "airflow": {
                "home": str(self.airflow_home),
                "address": f"http://127.0.0.1:{self.settings.airflow_port}",
                "log": f"UI: source {self.env_file} && airflow standalone",
            },
            "delta": {"root": str(self.delta_root)},
            **({"debezium": self.debezium_status()} if (self.debezium_home / "connector.json").exists() else {}),
        }

    def debezium_status(self) -> dict[str, object]:
        """Debezium's worker and connector state, for ``status`` (the task's state comes from Connect's REST API)."""
        connect = self.debezium()
        report = connect.connector_status() if connect.is_running() else None
        tasks = [str(task.get("state")) for task in (report or {}).get("tasks", [])]
        return {
            "running": connect.is_running(),
            "address": connect.rest_url,
            "pid": connect.pid(),
            "log": str(connect.log_file),
            "connector": connect.settings.name,
            "topic_prefix": connect.settings.topic_prefix,
            "databases": list(connect.settings.databases),
            "tasks": tasks,
        }

    # -- connections ----------------------------------------------------------------------------------
    def mysql_uri(self, *, user: str = LAKESYNC_USER) -> str:
        s = self.settings
        password = s.lakesync_password if user == LAKESYNC_USER else s.root_password
        return f"mysql://{quote(user)}:{quote(password, safe='')}@127.0.0.1:{s.mariadb_port}/{s.demo_database}"

    def connection_env(self) -> dict[str, str]:
        """Airflow-style ``AIRFLOW_CONN_*`` variables for the demo pipeline's connection ids.

        lakesync resolves a pipeline's ``conn_id`` from these variables (the way Airflow does), so the CLI,
        Spark apps and Airflow tasks all see the same connections.
        """
        kafka = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": self.broker.bootstrap}})
        return {
            f"AIRFLOW_CONN_{MYSQL_CONN_ID.upper()}": self.mysql_uri(),
            f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}": kafka,
            STATE_DIR_ENV: str(self.state_dir),
        }

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env.sh"

    def airflow_env(self) -> dict[str, str]:
        """The settings that make Airflow commands use the stack's Airflow home and connections."""
        return airflow_env(self.airflow_home, connections=self.connection_env(), api_port=self.settings.airflow_port)

    def write_env_file(self) -> None:
        """``source .lakesync/env.sh`` gives a shell the stack's connections and Airflow home (mode 0600: it has
        passwords), so `lakesync ...` and `airflow ...` commands use the embedded stack."""
        env = self.airflow_env()
        bin_dir = env.pop("PATH").split(os.pathsep)[0]
        lines = [f"export {name}={_shell_quote(value)}" for name, value in env.items()]
        lines.append(f'export PATH={_shell_quote(bin_dir)}:"$PATH"')
        self.env_file.write_text("\n".join(lines) + "\n")
        self.env_file.chmod(0o600)


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"
