"""``merge_cost_growth`` and ``merge_vs_delta_rs``: does the MERGE get slower as the table grows, and how do the
stream's two writers (``delta.writer``) compare on the same work?

Two Delta tables, SMALL and LARGE rows, written as the full load writes them (``DeltaSink.write_snapshot``,
rows in key order), and a copy of each per writer, so both start from the same files. Into each, the sink
(``apply_changes``, the stream's own commit path: delta-rs's :class:`DeltaSink` or delta-spark's
:class:`SparkDeltaSink`, which switches deletion vectors on at its first write) applies the same few batches
of updates, skewed (80% on the newest 10% of the keys, the OLTP shape) and uniform. ``growth`` is LARGE's
changes/s over SMALL's per writer (1.0: the MERGE cost does not grow with the table); ``merge_vs_delta_rs``
is delta-spark's changes/s over delta-rs's per table. The sink alone is measured, not Kafka; delta-spark's
session is warmed by one MERGE into a scratch table first, so its JVM start is not counted.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from lakesync.core.positions import SourcePosition

BATCH_CHANGES = 20_000
BATCHES = 3
_CHUNK = 1_000_000
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("amount", pa.float64()), ("memo", pa.string())])


def _rows(first: int, count: int) -> pa.RecordBatch:
    ids = np.arange(first, first + count, dtype=np.int64)
    return pa.RecordBatch.from_arrays([pa.array(ids), pa.array(ids % 100_000 / 100.0),
                                       pa.array(np.char.add("memo ", (ids % 1000).astype(str)))], schema=SCHEMA)


def build_table(uri: str, rows: int) -> None:
    from lakesync.sink import DeltaSink

    batches = (_rows(first, min(_CHUNK, rows - first + 1)) for first in range(1, rows + 1, _CHUNK))
    DeltaSink(uri, key_columns=["id"]).write_snapshot(batches, schema=SCHEMA,
                                                      position=SourcePosition("binlog.000001", 4), snapshot_ts_ms=0)


def update_keys(rows: int, count: int, *, skewed: bool, rng: np.random.Generator) -> np.ndarray:
    """``count`` keys to update: uniform over the table, or 80% in the newest 10% of the keys."""
    if not skewed:
        return rng.integers(1, rows + 1, count)
    recent = int(count * 0.8)
    return np.concatenate([rng.integers(rows - rows // 10 + 1, rows + 1, recent),
                           rng.integers(1, rows + 1, count - recent)])


def changes_batch(keys: np.ndarray, batch: int) -> pa.Table:
    n = len(keys)
    positions = [f"{2:08d}.{batch * BATCH_CHANGES + i + 4:012d}.000001" for i in range(n)]
    return pa.table({
        "id": pa.array(keys, pa.int64()), "amount": pa.array(np.full(n, 1.5)), "memo": pa.array(["updated"] * n),
        "_lakesync_pos": pa.array(positions), "_lakesync_op": pa.array(["u"] * n),
        "_lakesync_ts_ms": pa.array(np.zeros(n, dtype=np.int64)),
    })


WRITERS = ("delta_rs", "delta_spark")


def writer_sink(uri: str, writer: str):
    """The sink of ``delta.writer`` ``writer`` for the keyed bench table at ``uri``."""
    from lakesync.sink import DeltaSink
    from lakesync.sink.spark_writes import SparkDeltaSink

    return (SparkDeltaSink if writer == "delta_spark" else DeltaSink)(uri, key_columns=["id"])


def merge_rate(uri: str, rows: int, *, skewed: bool, writer: str = "delta_rs", seed: int = 7) -> float:
    """Changes/s the ``writer``'s sink applies into the table at ``uri`` (``rows`` rows)."""
    sink = writer_sink(uri, writer)
    rng = np.random.default_rng(seed)
    batches = [changes_batch(update_keys(rows, BATCH_CHANGES, skewed=skewed, rng=rng), b) for b in range(BATCHES)]
    began = time.perf_counter()
    for number, batch in enumerate(batches):
        sink.apply_changes(batch, app_id=f"bench-merge-{'skewed' if skewed else 'uniform'}", batch_version=number)
    return BATCHES * BATCH_CHANGES / (time.perf_counter() - began)


def _warm_spark(folder: Path) -> None:
    """A Spark session, and one MERGE into a scratch table, before delta-spark is timed."""
    from lakesync.spark.session import build_spark_session

    build_spark_session("lakesync-bench-merge")
    uri = str(folder / "warm-up")
    build_table(uri, 1_000)
    merge_rate(uri, 1_000, skewed=True, writer="delta_spark")


def merge_cost_growth(folder: Path, sizes: tuple[int, int]) -> dict[str, Any]:
    """The figures of both writers for both sizes and both distributions, the growth ratios (LARGE over SMALL)
    and delta-spark over delta-rs."""
    small, large = sizes
    _warm_spark(folder)
    rates: dict[str, dict[str, float]] = {writer: {} for writer in WRITERS}
    for rows in (small, large):
        for skewed in (True, False):
            name = f"{'skewed' if skewed else 'uniform'}_{rows}"
            built = str(folder / f"t{name}")
            build_table(built, rows)
            for writer in WRITERS:
                uri = f"{built}_{writer}"
                shutil.copytree(built, uri)
                rates[writer][name] = round(merge_rate(uri, rows, skewed=skewed, writer=writer), 1)
                shutil.rmtree(uri)
            shutil.rmtree(built)
    growth = {writer: {dist: round(rates[writer][f"{dist}_{large}"] / rates[writer][f"{dist}_{small}"], 3)
                       for dist in ("skewed", "uniform")} for writer in WRITERS}
    return {
        "small_rows": small, "large_rows": large, "batch_changes": BATCH_CHANGES, "batches": BATCHES,
        "changes_per_s": rates, "growth": growth,
        "merge_vs_delta_rs": {name: round(rates["delta_spark"][name] / rates["delta_rs"][name], 3)
                              for name in rates["delta_rs"]},
    }
