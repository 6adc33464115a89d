"""The embedded broker: Apache Kafka (KRaft, one combined broker and controller) from its Maven Central jars.

The jars are the ``kafka`` set of ``lakesync/jvm/jars.toml``, fetched once into lakesync's jar cache
(:mod:`lakesync.jvm.fetch`). The node keeps its logs under ``<state>/broker/data``, so topics, consumer
offsets and transactions survive ``lakesync dev down`` / ``up`` and a crash of the broker. It is formatted
once (``StorageTool format --standalone``, a dynamic single-voter quorum) with a cluster id kept beside it.

Sized for a laptop or a CI machine: heap ``-Xmx512m`` (:data:`HEAP`), every replication factor and ISR 1
(one node), every listener on 127.0.0.1. docs/operations.md says the same for people.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lakesync.core.errors import StackError
from lakesync.jvm.fetch import classpath
from lakesync_devkit.dev.processes import (
    LocalServer,
    ensure_port_free,
    port_is_open,
    spawn,
    stop_pid,
    wait_until,
)

JAR_SET = "kafka"
#: The broker JVM's heap: enough for the demo, the tests and the benchmarks' backlogs (measured ~350 MB RSS).
HEAP = ("-Xms128m", "-Xmx512m")

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
"""


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    candidates = [str(Path(home) / "bin" / "java")] if home else []
    candidates.append(shutil.which("java") or "")
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise StackError("Java is not installed: the embedded Kafka broker needs a Java 17 runtime",
                     hint="sudo apt-get install -y openjdk-17-jre-headless (./quickstart.sh installs it)")


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding, as ``kafka-storage random-uuid``
    makes it (which, like this, never starts with ``-``: a command line would read that as an option)."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


@dataclass
class Broker(LocalServer):
    """One Apache Kafka node; ``port`` is the client listener, ``controller_port`` the KRaft controller's."""

    controller_port: int = 0
    name: ClassVar[str] = "broker"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def listening_ports(self) -> list[int]:
        return [self.port, self.controller_port]

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"

    def properties(self) -> dict[str, str]:
        """The node's configuration (server.properties)."""
        client, controller = f"{self.host}:{self.port}", f"{self.host}:{self.controller_port}"
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": controller,
            "listeners": f"PLAINTEXT://{client},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{client},CONTROLLER://{controller}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            # one node: every internal topic has one replica, and one in-sync replica is enough
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            # abort transactions past their transaction.timeout.ms within a second (default: every 10 s), so
            # a relay that overruns its timeout fails here as it would on a busy cluster
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            # records up to 256 MB (a LONGBLOB row): the producer's own message.max.bytes (1 MB by default,
            # kafka.settings) is what refuses big events first, with a message saying which setting to raise
            "message.max.bytes": str(256 * 1024 * 1024),
        }

    def _write_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.home / "log4j2.properties").write_text(LOG4J2)

    def _java(self, main_class: str, *args: str, heap: tuple[str, ...] = HEAP) -> list[str]:
        return [java_binary(), *heap, "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}", "-cp", classpath(JAR_SET),
                main_class, *args]

    def _format(self) -> None:
        """Format the log directory once (a KRaft node refuses to start on an unformatted one)."""
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_file = self.home / "cluster.id"
        if not cluster_file.exists():
            cluster_file.write_text(new_cluster_id())
        done = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "--standalone",
                       f"--cluster-id={cluster_file.read_text().strip()}",
                       "-c", str(self.config_file), heap=("-Xmx256m",)),
            capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"formatting the Kafka log directory {self.data_dir} failed:\n{done.stdout}{done.stderr}")

    def start(self, *, timeout: float = 60.0) -> None:
        if self.is_running():
            return
        if not self.controller_port:
            raise StackError("the broker has no controller port (a stack.json from an older lakesync?)",
                             hint="run `lakesync dev down --purge`, then `lakesync dev up`")
        ensure_port_free(self.host, self.port, "the broker")
        ensure_port_free(self.host, self.controller_port, "the broker's controller")
        self._write_config()
        self._format()
        pid = spawn(self._java("kafka.Kafka", str(self.config_file)), log_file=self.log_file)
        self.pid_file.write_text(str(pid))
        wait_until(self._serving, timeout=timeout, what="the Kafka broker", log_file=self.log_file)

    def _serving(self) -> bool:
        """The node answers a metadata request naming itself (the port opens before it is ready)."""
        if not port_is_open(self.host, self.port):
            return False
        from confluent_kafka.admin import AdminClient

        try:
            metadata = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
        except Exception:  # not ready yet: whatever the client raised, try again
            return False
        return bool(metadata.brokers)

    def stop(self) -> None:
        stop_pid(self.pid(), timeout=30.0)
        self.pid_file.unlink(missing_ok=True)

