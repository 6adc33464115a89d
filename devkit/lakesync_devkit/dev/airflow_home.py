"""The embedded stack's Airflow home: SQLite, the repository's ``dags/`` and ``plugins/``, the stack's connections.

Airflow reads its configuration from ``AIRFLOW__SECTION__KEY`` environment variables, so the home is an
environment (:func:`airflow_env`) plus a migrated metadata database (:func:`prepare_airflow_home`). Every
Airflow command of the demo, the tests and the README runs with that environment; nothing is written to a
global ``~/airflow``. The API server listens on loopback only, and every user is admin (a dev stack).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import lakesync_devkit
from lakesync.core.connections import SPARK_CONN_ID
from lakesync.core.errors import StackError
from lakesync.core.state_files import write_json_atomically
from lakesync_devkit.dev.processes import free_port

#: Where a home keeps the ports its scheduler and triggerer serve task logs on.
LOG_PORTS_FILE = "log_server_ports.json"


def repo_root() -> Path:
    """The project checkout that holds ``dags/``, ``plugins/`` and ``include/pipelines/``.

    The dev kit is installed editable from ``<repo>/devkit/lakesync_devkit``; ``$LAKESYNC_REPO`` overrides."""
    explicit = os.environ.get("LAKESYNC_REPO")
    return Path(explicit).resolve() if explicit else Path(lakesync_devkit.__file__).resolve().parents[2]


def log_server_ports(home: Path) -> dict[str, str]:
    """The home's log-server ports, picked free once and kept in it.

    Airflow's defaults (8793 for the scheduler's task logs, 8794 for the triggerer's) are fixed: a second
    Airflow on the machine (another stack, the test suite's parallel workers) could not serve its logs."""
    record = home / LOG_PORTS_FILE
    if record.exists():
        worker, trigger = json.loads(record.read_text())
    else:
        worker, trigger = free_port(), free_port()
        home.mkdir(parents=True, exist_ok=True)
        write_json_atomically(record, [worker, trigger])
    return {"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger)}


def airflow_env(home: str | os.PathLike[str], *, connections: dict[str, str] | None = None,
                root: Path | None = None, api_port: int = 8080) -> dict[str, str]:
    """The environment variables that make ``home`` the Airflow home of the embedded stack.

    ``connections`` are the stack's ``AIRFLOW_CONN_*`` variables (``DevStack.connection_env()``)."""
    home_path = Path(home).resolve()
    repo = root or repo_root()
    bin_dir = str(Path(sys.executable).parent)
    env = {
        "AIRFLOW_HOME": str(home_path),
        "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(repo / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home_path / 'airflow.db'}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "LAKESYNC_PIPELINES_DIR": str(repo / "include" / "pipelines"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # spark-submit and airflow from the venv, whoever starts the process.
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}": '{"conn_type": "spark", "host": "local[2]"}',
    }
    env.update(log_server_ports(home_path))
    env.update(connections or {})
    return env


def prepare_airflow_home(home: str | os.PathLike[str], *, connections: dict[str, str] | None = None,
                         root: Path | None = None, api_port: int = 8080) -> dict[str, str]:
    """Create ``home`` and migrate its SQLite database (about 2-3 s here; skipped when already done).

    Returns the environment to run Airflow commands with."""
    env = airflow_env(home, connections=connections, root=root, api_port=api_port)
    home_path = Path(env["AIRFLOW_HOME"])
    home_path.mkdir(parents=True, exist_ok=True)
    marker = home_path / ".migrated"
    if marker.exists():
        return env
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env={**os.environ, **env},
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise StackError(
            f"`airflow db migrate` failed in {home_path}:\n{done.stderr[-2000:]}",
            hint="delete the Airflow home folder and try again",
        )
    marker.write_text(f"{time.monotonic() - started:.2f}\n")
    return env


def main() -> None:
    """``eval "$(python -m lakesync_devkit.dev.airflow_home)"``: migrate the running stack's home, export its settings."""
    import shlex

    from lakesync_devkit.dev.stack import DevStack

    stack = DevStack()
    env = prepare_airflow_home(stack.airflow_home, connections=stack.connection_env())
    print("\n".join(f"export {name}={shlex.quote(value)}" for name, value in env.items()))


if __name__ == "__main__":
    main()
