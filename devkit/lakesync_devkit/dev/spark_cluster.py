"""A Spark standalone cluster on loopback: one master and workers, from the pyspark distribution's own jars.

``bin/spark-class org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker spark://HOST:PORT``
are what a cluster's images run. Executors are launched by the workers in their own JVMs and working
directories and start their own Python workers with ``PYSPARK_PYTHON``; they inherit the worker's
environment, so ``PYTHONPATH`` given here reaches the executors' Python (a deployment installs lakesync in
the image instead).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from lakesync.core.errors import StackError
from lakesync_devkit.dev.processes import (
    LocalServer,
    ensure_port_free,
    free_port,
    port_is_open,
    spawn,
    stop_pid,
    wait_until,
)


def spark_home() -> Path:
    """The pyspark package folder, which carries ``bin/spark-class`` and the jars (``$SPARK_HOME`` overrides)."""
    explicit = os.environ.get("SPARK_HOME")
    if explicit:
        return Path(explicit)
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists():
        raise StackError(f"no bin/spark-class in {home}", hint="reinstall pyspark, or set SPARK_HOME")
    return home


#: Each application gets at most this many cores unless it asks (``spark.cores.max``): two applications (the
#: stream and a full load) can then run side by side on two workers of two cores each.
DEFAULT_APP_CORES = 2


def _spark_env() -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "SPARK_MASTER_OPTS": f"-Dspark.deploy.defaultCores={DEFAULT_APP_CORES}"}


@dataclass
class _SparkDaemon(LocalServer):
    web_port: int = 0

    def _spawn(self, *args: str) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        pid = spawn([str(spark_home() / "bin" / "spark-class"), *args], log_file=self.log_file,
                    env=_spark_env(), cwd=self.home)
        self.pid_file.write_text(str(pid))
        wait_until(lambda: port_is_open(self.host, self.port), timeout=90, what=f"the Spark {self.name}",
                   log_file=self.log_file)

    def stop(self) -> None:
        stop_pid(self.pid())
        self.pid_file.unlink(missing_ok=True)


@dataclass
class SparkMaster(_SparkDaemon):
    name: ClassVar[str] = "master"

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def start(self) -> None:
        if self.is_running():
            return
        ensure_port_free(self.host, self.port, "the Spark master")
        self._spawn("org.apache.spark.deploy.master.Master", "--host", self.host, "--port", str(self.port),
                    "--webui-port", str(self.web_port or free_port()))


@dataclass
class SparkWorker(_SparkDaemon):
    master_url: str = ""
    cores: int = 2
    memory: str = "2g"
    name: ClassVar[str] = "worker"

    def start(self) -> None:
        if self.is_running():
            return
        ensure_port_free(self.host, self.port, "a Spark worker")
        self._spawn("org.apache.spark.deploy.worker.Worker", "--host", self.host, "--port", str(self.port),
                    "--webui-port", str(self.web_port or free_port()), "--cores", str(self.cores),
                    "--memory", self.memory, "--work-dir", str(self.home / "work"), self.master_url)


@dataclass
class SparkCluster:
    """The master and its workers (each worker in its own folder, as on separate hosts)."""

    home: Path
    master_port: int
    worker_ports: list[int] = field(default_factory=list)

    @property
    def master(self) -> SparkMaster:
        return SparkMaster(home=self.home / "master", port=self.master_port)

    @property
    def workers(self) -> list[SparkWorker]:
        return [SparkWorker(home=self.home / f"worker{i}", port=port, master_url=self.master.url)
                for i, port in enumerate(self.worker_ports, start=1)]

    def start(self) -> None:
        self.master.start()
        for worker in self.workers:
            worker.start()

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.master.stop()
