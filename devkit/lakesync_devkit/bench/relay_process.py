"""One relay run in a process of its own, for the benchmark: its memory is the relay's alone.

Why a process: the benchmark process also generates the workload, decodes the binlog for the baseline and
reads every record back; its peak RSS says nothing about the relay's. Run as
``python -m lakesync_devkit.bench.relay_process`` with a JSON request on stdin (the pipeline document, the
start position, how many changes to relay); it prints one JSON line with the run's counts, its commit times and
its own peak RSS. The connections come from the environment (``AIRFLOW_CONN_*``), as for every lakesync process.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from lakesync.core.errors import StackError
from lakesync.core.positions import SourcePosition
from lakesync_devkit.dev.processes import peak_rss_mb


@dataclass
class RelayRun:
    """What one relay process did."""

    launched_at: float
    events: int
    transactions: int
    commit_seconds: list[float]
    peak_rss_mb: float


def run_relay_process(pipeline: dict[str, Any], start: SourcePosition, max_events: int, *,
                      timeout: float = 900.0) -> RelayRun:
    """Relay ``max_events`` changes from ``start`` in a child process; raises with its stderr when it fails."""
    request = json.dumps({"pipeline": pipeline, "start": start.to_json(), "max_events": max_events})
    launched = time.time()
    done = subprocess.run([sys.executable, "-m", __name__], input=request, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))
    if done.returncode != 0 or not done.stdout.strip():
        raise StackError(f"the benchmark's relay process failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return RelayRun(launched_at=launched, **report)


def main() -> int:
    from lakesync.core.config import parse_pipeline
    from lakesync.relay.worker import Relay

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    request = json.loads(sys.stdin.read())
    relay = Relay(parse_pipeline(request["pipeline"], source_name="bench"), log_every_seconds=3600)
    stats = relay.run(from_position=SourcePosition.from_json(request["start"]), max_events=request["max_events"])
    print(json.dumps({
        "events": stats.events,
        "transactions": stats.transactions,
        "commit_seconds": relay.commit_seconds,
        "peak_rss_mb": peak_rss_mb(os.getpid()),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
