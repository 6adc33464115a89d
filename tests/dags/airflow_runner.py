"""Run Airflow commands for the DAG tests in a child process with a throwaway Airflow home.

Airflow reads its configuration once, at import; a child process keeps each test's home, DAG folder and
pipelines folder out of the pytest process (and out of the other tests' Airflow, if any).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lakesync.dev.airflow_home import prepare_airflow_home

_DAG_TEST = """
import json, sys
from datetime import datetime
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
dag = bag.dags[sys.argv[2]]
mark_success = sys.argv[3] or None
results = []
for day in sys.argv[4:]:
    run = dag.test(logical_date=datetime.fromisoformat(day), mark_success_pattern=mark_success)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    results.append({"state": str(run.state), "interval": [run.data_interval_start.isoformat(),
                    run.data_interval_end.isoformat()], "tasks": states})
print("RESULT " + json.dumps(results))
"""


class AirflowRunner:
    """An Airflow home (migrated once) plus the environment its commands run with."""

    def __init__(self, home: Path, *, connections: dict[str, str], pipelines_dir: Path, api_port: int = 8080
                 ) -> None:
        started = time.monotonic()
        self.env = {**os.environ, **prepare_airflow_home(home, connections=connections, api_port=api_port),
                    "LAKESYNC_PIPELINES_DIR": str(pipelines_dir)}
        self.migrate_seconds = time.monotonic() - started
        self.dags_folder = self.env["AIRFLOW__CORE__DAGS_FOLDER"]

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def dag_test(self, dag_id: str, *logical_dates: str, mark_success: str = "") -> list[dict[str, object]]:
        """``dag.test()`` for each logical date, in order, in one child process (tasks matching the
        ``mark_success`` regex are marked successful instead of run)."""
        done = self.run("-c", _DAG_TEST, self.dags_folder, dag_id, mark_success, *logical_dates, timeout=600)
        for line in done.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line.removeprefix("RESULT "))
        raise AssertionError(f"dag.test of {dag_id} failed:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}")
