"""Time per test tier against its budget, printed at the end of every run (docs/testing.md).

A tier is a folder of tests/. The budgets add up to the 24.5 minutes of test time that keep CI (setup, lint
and tests) within 30 minutes on the 2-core reference machine. They are reported, not enforced by default:
tests check behaviour and a slower machine is not a defect (speed is proven by benchmarks). With
``LAKESYNC_TEST_BUDGETS=enforce`` a tier over its budget fails the run, for a machine like the reference.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

#: Seconds per tier (setup, call and teardown of its tests) on the reference machine.
TIER_BUDGET_S = {
    "unit": 45,
    "integration": 700,
    "faults": 240,
    "production": 210,
    "dags": 120,
    "e2e": 75,
    "bad_input": 50,
    "security": 30,
}
ENFORCE_ENV = "LAKESYNC_TEST_BUDGETS"

_seconds: Counter[str] = Counter()
_tests: Counter[str] = Counter()


def tier_of(nodeid: str) -> str:
    """``tests/<tier>/test_x.py::test_y`` -> ``<tier>``."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = tier_of(report.nodeid)
    _seconds[tier] += report.duration
    if report.when == "call":
        _tests[tier] += 1


def over_budget() -> dict[str, float]:
    """Seconds over budget per tier that ran past it (a tier without a budget has none)."""
    return {tier: spent - TIER_BUDGET_S[tier] for tier, spent in _seconds.items()
            if tier in TIER_BUDGET_S and spent > TIER_BUDGET_S[tier]}


def pytest_terminal_summary(terminalreporter) -> None:
    if not _seconds:
        return
    over = over_budget()
    terminalreporter.section("time per test tier (budget on the 2-core reference machine)")
    for tier, spent in sorted(_seconds.items(), key=lambda item: -item[1]):
        budget = TIER_BUDGET_S.get(tier)
        verdict = "no budget" if budget is None else (f"OVER by {over[tier]:.0f}s" if tier in over else "within")
        terminalreporter.write_line(f"{tier:<12} {_tests[tier]:>5} tests {spent:>8.0f}s   budget "
                                    f"{budget if budget is not None else '-':>5}s   {verdict}")
    terminalreporter.write_line(f"{'all':<12} {sum(_tests.values()):>5} tests {sum(_seconds.values()):>8.0f}s   "
                                f"budget {sum(TIER_BUDGET_S.values()):>5}s")
    if over and os.environ.get(ENFORCE_ENV) == "enforce":
        terminalreporter.write_line(f"{ENFORCE_ENV}=enforce: the run fails because {', '.join(over)} went over budget")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(ENFORCE_ENV) == "enforce" and over_budget() and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
