"""MariaDB SIGKILLed three times under a running relay and a busy workload: the relay rides it out by itself.

The relay is started once and never again: after each restart of the server it must still be running, and it
must reach a marker written after the restart (it reconnected and resumed from its committed progress, not
merely survived in its backoff). At the end the oracle finds Delta equal to the source.

The session's shared server must never go down, so this test starts its own embedded stack in a temporary
folder and stops it at the end."""

from __future__ import annotations

import time

import pytest
from lakesync_devkit.dev.stack import DevStack

from lakesync.full_load.load import FullLoad
from lakesync.stream.app import run_stream
from tests.faults.faultkit import FaultOutcome, FaultPipeline, Workload, seeded_random

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

SIGKILLS = 3


@pytest.fixture
def own_stack(tmp_path_factory):
    """A MariaDB and broker of this test's own; the session's stack keeps running untouched."""
    dev_stack = DevStack(tmp_path_factory.mktemp("restart-stack"))
    dev_stack.up()
    yield dev_stack
    dev_stack.down()


def test_relay_rides_out_three_mariadb_sigkills_under_writes_without_a_restart(own_stack, tmp_path, monkeypatch,
                                                                                spark):
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
    try:
        with Workload(server, "bank_restarts", seed=rng.randrange(1_000)) as workload:
            for kill in range(1, SIGKILLS + 1):
                time.sleep(rng.uniform(0.5, 4.0))
                server.kill()
                time.sleep(rng.uniform(0.0, 2.0))
                server.start()
                outcome.kills += 1
                assert relay.poll() is None, (f"the relay exited ({relay.returncode}) after SIGKILL {kill} of "
                                              f"MariaDB:\n{kit.output(relay)[-4000:]}")
                kit.wait_relay_caught_up(timeout=180)  # it reconnected and resumed, not only waited
                assert relay.poll() is None, f"the relay exited ({relay.returncode}):\n{kit.output(relay)[-4000:]}"
            assert workload.reconnects >= SIGKILLS
        kit.wait_relay_caught_up(timeout=180)
        assert relay.poll() is None, f"the relay exited ({relay.returncode}):\n{kit.output(relay)[-4000:]}"
        assert kit.output(relay).count("to resume from the committed progress") >= SIGKILLS, kit.output(relay)[-4000:]
        assert len(kit.processes) == 1, "the relay was started more than once"
        run_stream(kit.pipeline, once=True, spark=spark)
        kit.verify(outcome)
    finally:
        kit.stop_all()
    outcome.notes.append(f"SIGKILL of mariadbd: {outcome.kills}, relay restarts: 0")
    outcome.publish()
