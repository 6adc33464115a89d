"""run_concurrently: results in task order, tasks really overlap, and a failure waits for the rest."""

from __future__ import annotations

import threading
import time

import pytest

from lakesync.core.concurrency import run_concurrently


def test_results_come_back_in_task_order_and_the_tasks_overlap() -> None:
    barrier = threading.Barrier(3, timeout=10)  # passes only when three tasks wait on it at the same time

    def task(n: int):
        return lambda: (barrier.wait(), n)[1]

    assert run_concurrently([task(n) for n in range(3)], threads=3) == [0, 1, 2]


def test_one_thread_runs_the_tasks_one_after_another_in_order() -> None:
    seen: list[int] = []
    assert run_concurrently([lambda n=n: seen.append(n) or n for n in range(4)], threads=1) == [0, 1, 2, 3]
    assert seen == [0, 1, 2, 3]


def test_the_first_failure_is_raised_after_every_task_ran() -> None:
    finished: list[str] = []
    release = threading.Event()

    def fails() -> str:
        raise ValueError("table a failed")

    def slow() -> str:
        release.wait(10)
        time.sleep(0.2)  # still running well after the failure: the caller must wait for it
        finished.append("b")
        return "b"

    def releases() -> str:
        release.set()
        return "c"

    with pytest.raises(ValueError, match="table a failed"):
        run_concurrently([fails, slow, releases], threads=3)
    assert finished == ["b"]
