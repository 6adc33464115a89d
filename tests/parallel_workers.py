"""How pytest-xdist shares the suite out among its workers (``LAKESYNC_TEST_WORKERS=auto ./quickstart.sh test``
starts one more worker than the cores, memory allowing; ``=N`` sets the number; docs/testing.md).

Each worker is a pytest session of its own: its own embedded MariaDB and broker (``stack``), its own Spark
session. **A unit of work is a test file**, so a module's set-up (the DDL matrix's pipeline, a DAG module's
Airflow home) runs once, on one worker; and the whole ``production`` tier is one unit, because its files share
one session-scoped production shape (Spark cluster, PostgreSQL, S3 endpoint) that two workers would each start.
Units are handed out as xdist orders them, those with the most tests first: the long tests, most of them alone
in their file, come at the end. Starting them first was measured slower (docs/testing.md): side by side on two
cores they slow each other down more than they slow the short tests.
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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """For ``-n`` with xdist's default ``--dist load``: its file scheduling with :func:`unit_of` as the unit.
    Another ``--dist`` the user asks for is left to xdist."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)
