"""How pytest-xdist shares the suite out among its workers (``./quickstart.sh test`` runs three; docs/testing.md).

Each worker is a pytest session of its own: its own embedded MariaDB and broker (``stack``), its own Spark
session. Two rules keep the shared set-ups shared and the run short:

* **A unit of work is a test file**, so a module's set-up (the DDL matrix's pipeline, a DAG module's Airflow
  home) runs once, on one worker; and the whole ``production`` tier is one unit, because its files share one
  session-scoped production shape (Spark cluster, PostgreSQL, S3 endpoint) that two workers would start twice.
* **Units holding a test marked ``slow`` go first**, the rest in collection order: on two cores every test is
  CPU-bound, so a long test left for the end would run alone while the other workers have finished.
"""

from __future__ import annotations

import pytest

#: Tiers whose files share session-scoped set-ups of their own: one unit of work each.
TIERS_SHARING_A_SESSION = ("tests/production/",)


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: its tier when the tier shares a session, else its file."""
    path = nodeid.split("::", 1)[0]
    for tier in TIERS_SHARING_A_SESSION:
        if path.startswith(tier):
            return tier
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Units with a ``slow`` test first (stable: each unit's tests keep their order and stay together)."""
    slow_units = {unit_of(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: unit_of(item.nodeid) not in slow_units)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's file scheduling with :func:`unit_of` as the unit, in collection order (xdist would otherwise
    hand out the units with the most tests first, which puts the long single-test files last)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False
    return UnitScheduling(config, log)
