"""Running Airflow commands and ``dag.test()`` in a child process with a given Airflow home.

Airflow reads its configuration once, at import; a child process keeps each home, DAG folder and pipelines
folder out of the calling process. ``lakesync demo run`` drives its DAG runs through this, and so do the
DAG tests (each with a throwaway home).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lakesync.core.errors import StackError
from lakesync_devkit.dev.airflow_home import prepare_airflow_home

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

    def dag_test(self, dag_id: str, *logical_dates: str, mark_success: str = "", log_file: Path | None = None
                 ) -> list[dict[str, object]]:
        """``dag.test()`` for each logical date, in order, in one child process (tasks matching the
        ``mark_success`` regex are marked successful instead of run). Returns each run's state and task
        states; Airflow's own output goes to ``log_file`` when given."""
        done = self.run("-c", _DAG_TEST, self.dags_folder, dag_id, mark_success, *logical_dates, timeout=900)
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            log_file.write_text(done.stdout + "\n" + done.stderr)
        for line in done.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line.removeprefix("RESULT "))
        raise StackError(f"dag.test of {dag_id} did not finish:\n{done.stderr[-3000:]}",
                         hint=f"the whole Airflow output is in {log_file}" if log_file else None)
