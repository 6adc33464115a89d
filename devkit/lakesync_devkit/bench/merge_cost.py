"""``merge_cost_growth``: does the MERGE get slower as the table grows?

Two Delta tables, SMALL and LARGE rows, written as the full load writes them (``DeltaSink.write_snapshot``,
rows in key order). Into each, the sink (``DeltaSink.apply_changes``, the stream's own commit path) applies
a few batches of updates, skewed (80% on the newest 10% of the keys, the OLTP shape) and uniform. The
figure is LARGE's changes/s over SMALL's: 1.0 means the MERGE cost does not grow with the table.
The sink alone is measured here, so the figure says what the table and the MERGE cost, not Kafka or Spark.
"""

from __future__ import annotations

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


def merge_rate(uri: str, rows: int, *, skewed: bool, seed: int = 7) -> float:
    """Changes/s the sink applies into the table at ``uri`` (``rows`` rows)."""
    from lakesync.sink import DeltaSink

    sink = DeltaSink(uri, key_columns=["id"])
    rng = np.random.default_rng(seed)
    batches = [changes_batch(update_keys(rows, BATCH_CHANGES, skewed=skewed, rng=rng), b) for b in range(BATCHES)]
    began = time.perf_counter()
    for number, batch in enumerate(batches):
        sink.apply_changes(batch, app_id=f"bench-merge-{'skewed' if skewed else 'uniform'}", batch_version=number)
    return BATCHES * BATCH_CHANGES / (time.perf_counter() - began)


def merge_cost_growth(folder: Path, sizes: tuple[int, int]) -> dict[str, Any]:
    """The figures for both sizes and both distributions, and the growth ratios (LARGE over SMALL)."""
    small, large = sizes
    rates: dict[str, float] = {}
    for rows in (small, large):
        for skewed in (True, False):
            uri = str(folder / f"t{rows}_{'skewed' if skewed else 'uniform'}")
            build_table(uri, rows)
            rates[f"{'skewed' if skewed else 'uniform'}_{rows}"] = round(merge_rate(uri, rows, skewed=skewed), 1)
    return {
        "small_rows": small, "large_rows": large, "batch_changes": BATCH_CHANGES, "changes_per_s": rates,
        "skewed": round(rates[f"skewed_{large}"] / rates[f"skewed_{small}"], 3),
        "uniform": round(rates[f"uniform_{large}"] / rates[f"uniform_{small}"], 3),
    }
