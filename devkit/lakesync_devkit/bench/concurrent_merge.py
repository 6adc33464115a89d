"""``concurrent_merge_ratio``: the tables one micro-batch changed, MERGEd at once over one after another.

Five Delta tables written as the full load writes them; into each, the sink of a ``delta.writer``
(``apply_changes``, the stream's own commit path; delta-spark's in a session of the running Spark) applies a batch of updates (skewed, the OLTP shape), all five one after another and
then all five at once through :func:`lakesync.core.concurrency.run_concurrently`, as the stream runs them
(``stream.merge_threads``). Alternating rounds after a warm-up one; medians. The figure is the wall time at
once over one after another: 1.0 means nothing overlaps, 0.2 that five MERGEs cost one.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from lakesync_devkit.bench.merge_cost import build_table, changes_batch, update_keys, writer_sink

TABLES = 5
ROWS = 200_000
CHANGES = 5_000
ROUNDS = 3


def concurrent_merge_ratio(folder: Path, *, threads: int, writer: str = "delta_spark") -> dict[str, Any]:
    from lakesync.core.concurrency import run_concurrently

    uris = [str(folder / f"table_{n}") for n in range(TABLES)]
    for uri in uris:
        build_table(uri, ROWS)
    sinks = [writer_sink(uri, writer) for uri in uris]
    rng = np.random.default_rng(11)
    batches = iter(range(1, 2 * ROUNDS + 2))

    def one_round(round_threads: int) -> float:
        batch = next(batches)
        work = [partial(sink.apply_changes, changes_batch(update_keys(ROWS, CHANGES, skewed=True, rng=rng), batch),
                        app_id="lakesync-bench-concurrent", batch_version=batch) for sink in sinks]
        began = time.perf_counter()
        run_concurrently(work, threads=round_threads)
        return time.perf_counter() - began

    one_round(1)  # warm-up: the writer's runtime, the tables' first snapshot reads (and deletion vectors on)
    one_by_one, at_once = [], []
    for _ in range(ROUNDS):
        one_by_one.append(one_round(1))
        at_once.append(one_round(threads))
    sequential, concurrent = statistics.median(one_by_one), statistics.median(at_once)
    return {"writer": writer, "tables": TABLES, "rows_per_table": ROWS, "changes_per_table": CHANGES, "threads": threads,
            "one_by_one_s": round(sequential, 3), "at_once_s": round(concurrent, 3),
            "ratio": round(concurrent / sequential, 3)}
