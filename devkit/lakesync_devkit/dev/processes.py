"""Starting, finding and stopping the embedded stack's server processes.

The servers run detached (their own session) so they outlive the ``lakesync dev up`` that started them;
their pids live in the state folder, which is how ``status`` and ``down`` find them again.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lakesync.core.errors import StackError

#: Where the stack's ports come from: below the kernel's ephemeral range (Linux: 32768-60999). A port in that
#: range can be taken at any time by an outgoing connection, and a client reconnecting to a dead server on
#: such a port can even connect to itself and hold it, so a server restarting on its old port fails at random.
PORT_RANGE = (20000, 32000)
_handed_out: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port outside the kernel's ephemeral range that nobody listens on or holds right now.

    Random within :data:`PORT_RANGE` (so concurrent stacks rarely race for one), minus any overlap with the
    ephemeral range of this machine; the bind proves it is free now.
    """
    low, high = PORT_RANGE
    eph_low, eph_high = ephemeral_range()
    candidates = [port for port in range(low, high)
                  if not eph_low <= port <= eph_high and port not in _handed_out]
    for port in random.sample(candidates, k=min(len(candidates), 200)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)  # two servers set up together never get the same port
        return port
    raise StackError(f"no free TCP port on {host} in {low}-{high} outside the ephemeral range {eph_low}-{eph_high}")


def port_is_open(host: str, port: int, timeout: float = 0.3) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        return probe.connect_ex((host, port)) == 0


def ensure_port_free(host: str, port: int, what: str) -> None:
    if port_is_open(host, port):
        raise StackError(
            f"port {port} on {host} is already in use, so {what} cannot listen there",
            hint="stop whatever uses it, or run `lakesync dev down` then `lakesync dev up` to pick new ports",
        )


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not alive for our purposes.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def peak_rss_mb(pid: int | None) -> float | None:
    """A process's peak resident memory so far (``VmHWM``), in MB; None when it is not running.

    Not ``getrusage``'s ``ru_maxrss``: after fork and exec that also counts the parent's memory at the fork
    (Linux carries the old address space's high-water mark over), so a small child of a big parent reads big."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def spawn(argv: list[str], *, log_file: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
    """Start ``argv`` detached from our session, output to ``log_file``; return its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    return process.pid


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, log_file: Path | None = None) -> None:
    """Poll ``check`` until it is true; on time-out raise with the tail of the server's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    tail = ""
    if log_file and log_file.exists():
        tail = "\n    ".join(log_file.read_text(errors="replace").splitlines()[-15:])
        tail = f"\n  last lines of {log_file}:\n    {tail}"
    raise StackError(f"{what} did not become ready within {timeout:.0f}s{tail}")


def stop_pid(pid: int | None, *, timeout: float = 20.0) -> None:
    """SIGTERM, wait, then SIGKILL: servers get the chance to shut down cleanly first."""
    if not pid_alive(pid):
        return
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.1)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


@dataclass
class LocalServer:
    """A server of the embedded stack: its folder, where it listens, its pid file and log."""

    home: Path
    port: int
    host: str = "127.0.0.1"
    #: File stem of the pid file and log inside ``home`` (``mariadb.pid``, ``broker.log``).
    name: ClassVar[str] = "server"

    @property
    def log_file(self) -> Path:
        return self.home / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.home / f"{self.name}.pid"

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def is_running(self) -> bool:
        return pid_alive(self.pid()) and port_is_open(self.host, self.port)

    def listening_ports(self) -> list[int]:
        return [self.port]

    def kill(self) -> None:
        """SIGKILL (fault tests): no clean shutdown, as in a crash or an OOM kill. Returns once its ports are
        closed: a multi-threaded server's main thread can be a zombie while another thread (one in a disk
        write) still holds the listening socket, so a restart right away found its port in use."""
        pid = self.pid()
        if pid_alive(pid):
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: not pid_alive(pid), timeout=10, what=f"the killed {self.name} to exit")
        wait_until(lambda: not any(port_is_open(self.host, port) for port in self.listening_ports()), timeout=60,
                   what=f"the killed {self.name}'s ports to close")
        self.pid_file.unlink(missing_ok=True)
