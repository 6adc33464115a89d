"""The stream bench's scaling keys compare cores: a session is pinned, JVM and Python workers included, to as
many CPUs as its cores, and every thread gets the whole set back afterwards."""

from __future__ import annotations

import os
from contextlib import suppress

import psutil
import pytest
from lakesync_devkit.bench.harness import spark_on_cpus

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _cpu_sets_of_spark(spark) -> set[frozenset[int]]:
    launcher = psutil.Process(spark.sparkContext._gateway.proc.pid)
    threads = []
    for process in [launcher, *launcher.children(recursive=True)]:
        with suppress(psutil.Error):  # a Python worker that ended after it was listed
            threads += [t.id for t in process.threads()]
    cpu_sets = set()
    for tid in threads:
        with suppress(ProcessLookupError):  # a JVM thread that ended after it was listed (seen on CI)
            cpu_sets.add(frozenset(os.sched_getaffinity(tid)))
    return cpu_sets


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin to one")
def test_a_session_runs_on_one_cpu_inside_and_on_every_cpu_after(spark):
    everything = frozenset(os.sched_getaffinity(0))
    with spark_on_cpus(spark, 1) as cpus:
        assert spark.sparkContext.parallelize(range(4), 2).map(lambda x: x + 1).sum() == 10  # workers started inside
        inside = _cpu_sets_of_spark(spark)
        driver = os.sched_getaffinity(0)
    after = _cpu_sets_of_spark(spark)

    assert cpus == 1 and len(driver) == 1
    assert inside == {frozenset(driver)}  # every JVM thread and Python worker, none left on the whole set
    assert after == {everything} and os.sched_getaffinity(0) == everything
