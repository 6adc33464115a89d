"""Shared parts of the fault-injection suite: a demo pipeline on its own database, real processes, SIGKILL.

Every process the suite kills runs as a subprocess in its own process group (the CLI for the relay and the
full load, ``spark_apps/stream.py`` for the stream, whose JVM is a child of the Python driver), and a kill
is ``SIGKILL`` to the whole group: nothing gets a chance to clean up, as in a crash or an OOM kill.

How many kill points each test runs comes from ``LAKESYNC_FAULT_KILLS`` (default 3, so CI stays quick; the
full run uses 20 or more). Every test prints its seed; ``LAKESYNC_FAULT_SEED=<seed>`` replays the same kill
delays. With ``LAKESYNC_FAULT_REPORT=<file>`` each test appends one JSON line with its kill points and
what the oracle compared, which is how the full run's totals are reported.

The verdict "Delta equals the source" comes from the independent oracle (tests/oracle.py), never from
``lakesync validate``, the code under test.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pymysql
import yaml
from lakesync_devkit.demo.database import create_demo_database, seed_demo_data
from lakesync_devkit.demo.load import DemoWorkload, LoadReport
from lakesync_devkit.dev.mariadb import MariaDBServer
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.source.server_checks import current_position
from tests.oracle import Comparison, compare_table, source_key

REPO_ROOT = Path(__file__).resolve().parents[2]
STREAM_APP = REPO_ROOT / "spark_apps" / "stream.py"
KILLS_ENV = "LAKESYNC_FAULT_KILLS"
SEED_ENV = "LAKESYNC_FAULT_SEED"
REPORT_ENV = "LAKESYNC_FAULT_REPORT"


def kill_points(default: int = 3) -> int:
    """Kill points per process for this run (``LAKESYNC_FAULT_KILLS``)."""
    return max(1, int(os.environ.get(KILLS_ENV, default)))


def seeded_random(test: str) -> random.Random:
    """The run's random source; its seed is printed so a failing run can be replayed."""
    seed = int(os.environ.get(SEED_ENV) or time.time_ns() % 2**32)
    print(f"[faults] {test}: seed {seed} (replay with {SEED_ENV}={seed})", flush=True)
    return random.Random(seed)


@dataclass
class FaultOutcome:
    """What one test did and what the oracle found; appended to ``LAKESYNC_FAULT_REPORT`` when set."""

    test: str
    process: str
    kills: int = 0
    notes: list[str] = field(default_factory=list)
    tables_checked: int = 0
    rows_compared: int = 0
    mismatches: int = 0

    def record(self, comparisons: list[Comparison]) -> None:
        self.tables_checked += len(comparisons)
        self.rows_compared += sum(c.source_rows for c in comparisons)
        self.mismatches += sum(len(c.differing_keys()) + len(c.missing_columns) for c in comparisons)

    def publish(self) -> None:
        print(f"[faults] {json.dumps(asdict(self))}", flush=True)
        if target := os.environ.get(REPORT_ENV):
            with open(target, "a") as out:
                out.write(json.dumps(asdict(self)) + "\n")


def kill_group(process: subprocess.Popen) -> bool:
    """SIGKILL ``process`` and everything it started; False when it had already exited."""
    if process.poll() is not None:
        return False
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    process.wait(30)
    return True


class FaultPipeline:
    """A demo-shaped pipeline on ``database``: its YAML, its processes, its checks.

    ``env`` holds the connections (``AIRFLOW_CONN_*``) and ``LAKESYNC_STATE_DIR`` the subprocesses get;
    the caller puts the same into ``os.environ`` (monkeypatch) for the in-process library calls.
    """

    def __init__(self, root: Path, admin: MariaDBServer, database: str, env: dict[str, str], *,
                 name: str = "faults", trigger_seconds: float = 1.0) -> None:
        self.root, self.admin, self.database, self.name = root, admin, database, name
        self.env = {**os.environ, **env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        self.pipelines_dir = root / "pipelines"
        self.logs = root / "logs"
        self.pipelines_dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        server_id = random.randrange(5_000, 60_000)
        (self.pipelines_dir / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": name,
            "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
            "tables": {"include": ["*"], "overrides": {"audit_log": {"semantics": "append_log"}}},
            "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"faults{server_id}", "partitions": 1},
            "delta": {"root": str(root / "delta")},
            "state_dir": str(root / "state"),
            "stream": {"trigger_seconds": trigger_seconds},
        }))
        self._spawned = 0
        self.processes: list[subprocess.Popen] = []

    @property
    def pipeline(self) -> Pipeline:
        return load_pipeline(self.name, self.pipelines_dir)

    def create_demo_data(self, *, transactions: int = 2_000) -> None:
        with self.admin.connect() as conn:
            create_demo_database(conn, self.database)
            seed_demo_data(conn, self.database, transactions=transactions)

    # -- processes ------------------------------------------------------------------------------------
    def _spawn(self, kind: str, argv: list[str]) -> subprocess.Popen:
        self._spawned += 1
        log = open(self.logs / f"{self._spawned:03d}-{kind}.log", "wb")  # noqa: SIM115 (the child owns it)
        process = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                   start_new_session=True)
        log.close()
        process.log_path = log.name  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def _cli(self, command: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "lakesync.cli.main", command, "--pipeline", self.name,
                "--pipelines-dir", str(self.pipelines_dir), *extra]

    def relay(self, *extra: str) -> subprocess.Popen:
        return self._spawn("relay", self._cli("relay", "--log-every", "5", *extra))

    def snapshot(self, *extra: str) -> subprocess.Popen:
        return self._spawn("snapshot", self._cli("snapshot", *extra))

    def recover(self, *extra: str) -> subprocess.Popen:
        return self._spawn("recover", self._cli("recover", *extra))

    def stream(self, *, once: bool = False) -> subprocess.Popen:
        argv = [sys.executable, str(STREAM_APP), "--pipeline", self.name, "--pipelines-dir", str(self.pipelines_dir)]
        return self._spawn("stream", argv + (["--once"] if once else []))

    @staticmethod
    def output(process: subprocess.Popen) -> str:
        return Path(process.log_path).read_text(errors="replace")  # type: ignore[attr-defined]

    def finish(self, process: subprocess.Popen, *, timeout: float = 300) -> subprocess.Popen:
        """Wait for ``process`` and require success (its log in the failure message)."""
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired as timeout_error:
            kill_group(process)
            raise AssertionError(f"{process.args} did not finish in {timeout}s:\n{self.output(process)[-4000:]}"
                                 ) from timeout_error
        assert process.returncode == 0, f"{process.args} exited {process.returncode}:\n{self.output(process)[-4000:]}"
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            kill_group(process)

    # -- progress and checks --------------------------------------------------------------------------
    def wait_relay_caught_up(self, *, timeout: float = 120) -> None:
        """Until the relay's stored progress reaches the binlog's current end.

        A marker transaction (an audit row) is written first and the target read after it, so only a relay
        that is running now can reach it: a relay killed earlier may have stored progress up to the end of
        a binlog the workload had stopped writing to, which would otherwise count as caught up."""
        from lakesync.relay import covered_range

        with self.admin.connect(database=self.database) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO audit_log (actor, action, details) VALUES ('faults', 'marker', NULL)")
            conn.commit()
            target = current_position(conn).key()
        deadline = time.monotonic() + timeout
        while (covered := covered_range(self.pipeline)) is None or covered[1] < target:
            assert time.monotonic() < deadline, f"the relay did not reach {target} in {timeout}s (covers {covered})"
            time.sleep(0.5)

    def verify(self, outcome: FaultOutcome) -> list[Comparison]:
        """The oracle compares every keyed table (the append-only change log is not comparable row for row);
        the test fails with the differing keys if any table differs. Call it with the source quiet and the
        stream caught up: the oracle compares once, it does not wait for the stream."""
        pipeline = self.pipeline
        with self.admin.connect(database=self.database) as conn:
            with conn.cursor() as cur:
                cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                            "ORDER BY TABLE_NAME", (self.database,))
                tables = [str(name) for (name,) in cur.fetchall()]
            keyed = [t for t in tables if pipeline.tables.selects(t) and source_key(conn, self.database, t)
                     and pipeline.tables.settings_for(t).semantics != "append_log"]
            comparisons = [compare_table(conn, self.database, t, pipeline.delta.table_uri(t)) for t in keyed]
        outcome.record(comparisons)
        assert all(c.identical for c in comparisons), "\n".join(c.describe() for c in comparisons if not c.identical)
        assert outcome.tables_checked >= 4, [c.describe() for c in comparisons]
        return comparisons


class Workload:
    """The demo workload (inserts, updates, deletes on several tables) in a thread until stopped.

    A lost connection (MariaDB restarting) is retried with a new connection, as an application would."""

    def __init__(self, admin: MariaDBServer, database: str, *, rate: float = 40, seed: int = 7) -> None:
        self.admin, self.database, self.rate, self.seed = admin, database, rate, seed
        self.report = LoadReport()
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-workload", daemon=True)

    def __enter__(self) -> Workload:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop_after(self, seconds: float) -> LoadReport:
        self._stop.wait(seconds)
        return self.stop()

    def stop(self) -> LoadReport:
        self._stop.set()
        self._thread.join(60)
        return self.report

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                with self.admin.connect(autocommit=False) as conn:
                    workload = DemoWorkload(conn, self.database, seed=self.seed + attempt)
                    while not self._stop.wait(1 / self.rate):
                        workload.step(self.report)
            except pymysql.err.MySQLError:
                attempt += 1
                self.reconnects += 1
                self._stop.wait(0.5)
