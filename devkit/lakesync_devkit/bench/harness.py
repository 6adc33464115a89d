"""What every benchmark runs on: an embedded stack, either the user's or a temporary one."""

from __future__ import annotations

import os
import resource
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psutil

from lakesync_devkit.dev.stack import DevStack


@contextmanager
def bench_stack(state_dir: str | None, *, prefix: str) -> Iterator[DevStack]:
    """The stack at ``state_dir`` (started if needed and left running), else a temporary one that is
    stopped and removed afterwards, so a benchmark never leaves servers or data behind by surprise."""
    if state_dir:
        stack = DevStack(state_dir)
        stack.up()
        yield stack
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as temp:
        stack = DevStack(temp)
        stack.up()
        try:
            yield stack
        finally:
            stack.down()


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports ru_maxrss in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _threads_of_spark(spark: Any) -> list[int]:
    """The thread ids of this process and of the Spark JVM this process launched (its Python workers too)."""
    processes = [psutil.Process()]
    gateway = getattr(spark.sparkContext._gateway, "proc", None)  # None: a JVM launched by spark-submit
    if gateway is not None:
        launcher = psutil.Process(gateway.pid)
        processes += [launcher, *launcher.children(recursive=True)]
    tids = []
    for process in processes:
        with suppress(psutil.Error):  # a Python worker that just ended
            tids += [thread.id for thread in process.threads()]
    return tids


def _pin(spark: Any, cpus: set[int], rounds: int = 10) -> None:
    """Pin every thread of ``spark`` to ``cpus``, listing the threads again until none is left elsewhere.

    Why more than one pass: a thread that a not-yet-pinned thread starts between the listing and the pinning
    inherits its parent's old set (seen on CI: one JVM thread stayed on one CPU after the bench put the rest
    back on both)."""
    for _ in range(rounds):
        strays = 0
        for tid in _threads_of_spark(spark):
            with suppress(OSError):  # a thread that just ended
                if os.sched_getaffinity(tid) != cpus:
                    os.sched_setaffinity(tid, cpus)
                    strays += 1
        if strays == 0:
            return


@contextmanager
def spark_on_cpus(spark: Any, count: int) -> Iterator[int]:
    """Run ``spark`` (its JVM, its Python workers, and this driver) on ``count`` CPUs of this process's set,
    and put every thread back on the whole set afterwards; yields how many CPUs it got.

    Why: ``local[1]`` is one task at a time, not one core. With Spark's Kafka reader a task's JVM thread reads
    and its Python worker decodes at the same time, so unpinned ``local[1]`` kept 1.4 of 2 cores busy, and
    ``local[2]`` over ``local[1]`` said little about what a second core brings. Threads started meanwhile
    inherit the set. The embedded stack's servers are not this process's Spark: they keep every CPU."""
    everything = os.sched_getaffinity(0)
    cpus = set(sorted(everything)[:count])
    _pin(spark, cpus)
    try:
        yield len(cpus)
    finally:
        _pin(spark, everything)
