"""Running independent pieces of work side by side, with results in a fixed order.

The stream's MERGEs of the tables in one micro-batch are independent (one Delta table each) and delta-rs does
its work outside the GIL, so they can overlap: a batch that changes five tables then costs about its largest
MERGE, not their sum (``concurrent_merge_ratio`` in ``lakesync bench stream``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def run_concurrently(tasks: Sequence[Callable[[], T]], *, threads: int) -> list[T]:
    """Run ``tasks`` on up to ``threads`` threads (one after another with one thread or one task) and return
    their results in task order. With threads every task runs to its end before the first failure, in task
    order, is raised: no piece of work is left running behind the caller's back."""
    if threads <= 1 or len(tasks) <= 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(max_workers=min(threads, len(tasks)), thread_name_prefix="lakesync-work") as pool:
        futures = [pool.submit(task) for task in tasks]
    return [future.result() for future in futures]
