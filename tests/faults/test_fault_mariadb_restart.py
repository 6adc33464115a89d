"""MariaDB restarts (clean stop, or SIGKILL of the server) under a running relay and a busy workload.

The session's shared server must never go down, so this test starts its own embedded stack in a temporary
folder and stops it at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest
from lakesync_devkit.dev.processes import pid_alive
from lakesync_devkit.dev.stack import DevStack

from lakesync.full_load.load import FullLoad
from lakesync.stream.app import run_stream
from tests.faults.faultkit import FaultOutcome, FaultPipeline, Workload, kill_points, seeded_random

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def _wait_gone(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"MariaDB (pid {pid}) did not exit in {timeout}s"
        time.sleep(0.05)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # the server is our child: reap it


@pytest.fixture
def own_stack(tmp_path_factory):
    """A MariaDB and broker of this test's own; the session's stack keeps running untouched."""
    dev_stack = DevStack(tmp_path_factory.mktemp("restart-stack"))
    dev_stack.up()
    yield dev_stack
    dev_stack.down()


def test_mariadb_restarts_under_the_relay_lose_no_change(own_stack, tmp_path, monkeypatch, spark):
    env = own_stack.connection_env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    rng = seeded_random("mariadb restart")
    outcome = FaultOutcome("mariadb_restart", "mariadbd")
    server = own_stack.mariadb
    kit = FaultPipeline(tmp_path, server, "bank_restarts", env)
    kit.create_demo_data()
    FullLoad(kit.pipeline).run()
    relay = kit.relay()
    relay_restarts = 0
    try:
        with Workload(server, "bank_restarts", seed=rng.randrange(1_000)) as workload:
            for _ in range(kill_points()):
                time.sleep(rng.uniform(0.5, 4.0))
                pid = server.pid()
                assert pid is not None
                if rng.random() < 0.5:
                    server.stop()
                    outcome.notes.append("clean stop")
                else:
                    os.kill(pid, signal.SIGKILL)
                    outcome.notes.append("SIGKILL")
                _wait_gone(pid)
                time.sleep(rng.uniform(0.0, 2.0))
                server.start()
                outcome.kills += 1
                if relay.poll() is not None:  # the documented recovery: start the relay again
                    relay_restarts += 1
                    relay = kit.relay()
            assert workload.reconnects >= 1
        if relay.poll() is not None:
            relay_restarts += 1
            relay = kit.relay()
        kit.wait_relay_caught_up(timeout=180)
        run_stream(kit.pipeline, once=True, spark=spark)
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.notes = [f"{note}: {outcome.notes.count(note)}" for note in sorted(set(outcome.notes))]
    outcome.notes.append(f"relay restarted by the test: {relay_restarts}")
    outcome.publish()
