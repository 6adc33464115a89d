"""The run's wall-clock time against its budget, and the test time of each tier, printed at the end of every run
(docs/testing.md).

The budget is wall-clock: 24.5 minutes of tests would keep CI (setup, lint and tests) within 30 minutes on the
2-core reference machine (not met yet: docs/testing.md). A tier's figure is its tests' time (set-up, call and
tear-down) summed over the parallel workers, so it shows where the work goes, not how long the run took. The budget is reported, not enforced by
default: tests check behaviour and a slower machine is not a defect (speed is proven by benchmarks). With
``LAKESYNC_TEST_BUDGETS=enforce`` a run over its budget fails, for a machine like the reference.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

#: Wall-clock seconds for the whole suite on the reference machine.
RUN_BUDGET_S = 1470
ENFORCE_ENV = "LAKESYNC_TEST_BUDGETS"

_seconds: Counter[str] = Counter()
_tests: Counter[str] = Counter()
_started: list[float] = []


def tier_of(nodeid: str) -> str:
    """``tests/<tier>/test_x.py::test_y`` -> ``<tier>``."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_sessionstart(session: pytest.Session) -> None:
    _started.append(time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = tier_of(report.nodeid)
    _seconds[tier] += report.duration
    if report.when == "call":
        _tests[tier] += 1


def wall_seconds() -> float:
    return time.monotonic() - _started[0] if _started else 0.0


def pytest_terminal_summary(terminalreporter) -> None:
    if not _seconds:
        return
    wall = wall_seconds()
    workers = terminalreporter.config.getoption("numprocesses", None) or 0
    terminalreporter.section("time of the run against its budget, and test time per tier")
    verdict = f"OVER by {wall - RUN_BUDGET_S:.0f}s" if wall > RUN_BUDGET_S else "within"
    terminalreporter.write_line(f"wall clock {wall:.0f}s (-n {workers}), budget {RUN_BUDGET_S}s "
                                f"on the 2-core reference machine: {verdict}")
    for tier, spent in sorted(_seconds.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{tier:<12} {_tests[tier]:>5} tests {spent:>8.0f}s of test time")
    if wall > RUN_BUDGET_S and os.environ.get(ENFORCE_ENV) == "enforce":
        terminalreporter.write_line(f"{ENFORCE_ENV}=enforce: the run fails because it went over its budget")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(ENFORCE_ENV) == "enforce" and wall_seconds() > RUN_BUDGET_S and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
