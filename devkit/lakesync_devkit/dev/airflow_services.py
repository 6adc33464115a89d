"""Airflow as a team runs it: ``api-server``, ``scheduler``, ``dag-processor`` and ``triggerer`` as separate
processes on one metadata database (PostgreSQL), with the ``LocalExecutor``.

Each service is started detached with the same environment (the stack's ``airflow_env``), its pid in
``<home>/<service>.pid`` and its output in ``<home>/<service>.log``. The processes share what must be shared
between separate Airflow components: the JWT secret that signs task tokens and the API secret key.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from lakesync.core.errors import StackError
from lakesync_devkit.dev.processes import pid_alive, spawn, stop_pid, wait_until

SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")


@dataclass
class AirflowService:
    """One long-running command (``python -m <module> <command...>``) with its pid file and log in ``home``."""

    home: Path
    command: str
    module: str = "airflow"
    args: tuple[str, ...] = ()

    @property
    def log_file(self) -> Path:
        return self.home / f"{self.command}.log"

    @property
    def pid_file(self) -> Path:
        return self.home / f"{self.command}.pid"

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def is_running(self) -> bool:
        return pid_alive(self.pid())

    def start(self, env: dict[str, str]) -> None:
        if self.is_running():
            return
        self.home.mkdir(parents=True, exist_ok=True)
        pid = spawn([sys.executable, "-m", self.module, self.command, *self.args], log_file=self.log_file, env=env,
                    cwd=self.home)
        self.pid_file.write_text(str(pid))

    def stop(self) -> None:
        stop_pid(self.pid(), timeout=30)
        self.pid_file.unlink(missing_ok=True)


class AirflowServices:
    """The four services of one Airflow home."""

    def __init__(self, home: Path, api_url: str) -> None:
        self.home = home
        self.api = AirflowApi(api_url)
        self.services = [AirflowService(home, command) for command in SERVICES]

    def start(self, env: dict[str, str], *, timeout: float = 240) -> None:
        for service in self.services:
            service.start(env)

        def ready() -> bool:
            for service in self.services:
                if not service.is_running():
                    tail = "\n    ".join(service.log_file.read_text(errors="replace").splitlines()[-12:])
                    raise StackError(f"airflow {service.command} stopped while starting:\n    {tail}",
                                     hint=f"the whole log is {service.log_file}")
            return self.api.all_healthy()

        wait_until(ready, timeout=timeout, what="Airflow's api-server, scheduler, dag-processor and triggerer",
                   log_file=self.services[0].log_file)

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()

    def status(self) -> dict[str, dict[str, object]]:
        return {f"airflow {s.command}": {"running": s.is_running(), "pid": s.pid(), "log": str(s.log_file)}
                for s in self.services}


class AirflowApi:
    """The REST API (``/api/v2``) as the UI uses it, authenticated with the simple auth manager's token.

    Every user is admin in the dev stack, so ``GET /auth/token`` hands out a token without credentials."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._token: str | None = None

    def _request(self, method: str, path: str, body: object | None = None, *, auth: bool = True) -> object:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:1000]
            raise StackError(f"Airflow API {method} {path} answered {exc.code}: {detail}") from exc
        return json.loads(payload) if payload else None

    def token(self) -> str:
        if self._token is None:
            self._token = str(self._request("GET", "/auth/token", auth=False)["access_token"])  # type: ignore[index]
        return self._token

    def all_healthy(self) -> bool:
        try:
            health = self._request("GET", "/api/v2/monitor/health", auth=False)
        except (StackError, OSError):
            return False
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return all((health or {}).get(part, {}).get("status") == "healthy" for part in parts)  # type: ignore[union-attr]

    def get(self, path: str) -> dict:
        return self._request("GET", path)  # type: ignore[return-value]

    def wait_for_dag(self, dag_id: str, *, timeout: float = 180) -> None:
        """Until the dag-processor has parsed ``dag_id`` into the database."""
        def parsed() -> bool:
            try:
                self.get(f"/api/v2/dags/{dag_id}")
            except StackError:
                return False
            return True
        wait_until(parsed, timeout=timeout, what=f"the DAG {dag_id} to be parsed")

    def unpause(self, dag_id: str) -> None:
        self._request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, *, logical_date: str | None = None, conf: dict | None = None) -> str:
        """``POST /api/v2/dags/{dag_id}/dagRuns`` (what the UI's trigger button does); returns the run id."""
        run = self._request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                            {"logical_date": logical_date, "conf": conf or {}})
        return str(run["dag_run_id"])  # type: ignore[index]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout: float = 600) -> str:
        """Until the run is finished; returns ``success`` or ``failed``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise StackError(f"DAG run {dag_id}/{run_id} did not finish within {timeout:.0f}s")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        found = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: str(ti["state"]) for ti in found["task_instances"]}
