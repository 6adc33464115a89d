"""Which keys differ between a group of source rows and the Delta rows of the same chunks.

Rows are joined on the fingerprint of their key (:mod:`lakesync.validation.fingerprints`) and compared by the
fingerprint of the whole row. A Delta row or tombstone positioned after the source snapshot changed after the
source was read: it is "in flight", explained by its position, not a difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from lakesync.core.positions import MIN_KEY
from lakesync.core.table_layout import OP, POS
from lakesync.validation.chunks import ChunkPlan
from lakesync.validation.delta_reader import live_mask
from lakesync.validation.fingerprints import conform, row_hashes
from lakesync.validation.report import SAMPLE_KEYS, TableComparison, key_dicts


@dataclass
class KeyDiff:
    """Key-level differences within some chunks."""

    missing: pa.Table
    extra: pa.Table
    different: pa.Table
    in_flight: int

    @property
    def count(self) -> int:
        return self.missing.num_rows + self.extra.num_rows + self.different.num_rows

    def keys(self) -> pa.Table:
        return pa.concat_tables([self.missing, self.extra, self.different])

    def fill(self, result: TableComparison) -> None:
        result.missing_in_delta = key_dicts(self.missing, SAMPLE_KEYS)
        result.extra_in_delta = key_dicts(self.extra, SAMPLE_KEYS)
        result.different = key_dicts(self.different, SAMPLE_KEYS)
        result.mismatched_keys = self.count
        result.in_flight_keys = self.in_flight


@dataclass
class Findings:
    """Key-level differences gathered over groups of chunks: counts, samples, and the chunks that hold the
    differing keys (re-checked next round; keys in flight are explained by their positions and are not)."""

    missing: list[dict] = field(default_factory=list)
    extra: list[dict] = field(default_factory=list)
    different: list[dict] = field(default_factory=list)
    count: int = 0
    in_flight: int = 0
    recheck: set[int] = field(default_factory=set)

    def add(self, diff: KeyDiff, plan: ChunkPlan, key_schema: pa.Schema) -> None:
        for sample, keys in ((self.missing, diff.missing), (self.extra, diff.extra),
                             (self.different, diff.different)):
            sample.extend(key_dicts(keys, SAMPLE_KEYS - len(sample)))
        self.count += diff.count
        self.in_flight += diff.in_flight
        self.recheck.update(int(c) for c in plan.chunk_ids(conform(diff.keys(), key_schema)))

    def fill(self, result: TableComparison) -> None:
        result.missing_in_delta, result.extra_in_delta, result.different = self.missing, self.extra, self.different
        result.mismatched_keys, result.in_flight_keys = self.count, self.in_flight


def diff_keys(source: pa.Table, delta: pa.Table, schema: pa.Schema, key_columns: list[str], *,
          snapshot_key: str | None) -> KeyDiff:
    """Join on the key. ``delta`` may carry ``_lakesync_pos``/``_lakesync_op`` (tombstones included): a Delta
    row or tombstone positioned after ``snapshot_key`` changed after the source was read, so it is counted as
    in flight instead of as a difference. A key live twice in Delta is reported as different."""
    key_schema = pa.schema([schema.field(name) for name in key_columns])
    src = conform(source, schema)
    dst = conform(delta, schema)
    pos = delta[POS] if POS in delta.column_names else pa.nulls(delta.num_rows, pa.string())
    live = (live_mask(delta).to_numpy(zero_copy_only=False) if OP in delta.column_names
            else np.ones(delta.num_rows, dtype=bool))
    s = pd.DataFrame({"k": row_hashes(src.select(key_columns)), "h": row_hashes(src), "i": np.arange(src.num_rows)})
    d = pd.DataFrame({"k": row_hashes(dst.select(key_columns)), "h": row_hashes(dst), "j": np.arange(dst.num_rows),
                      "pos": pos.to_pandas(), "live": live})
    newer = (d["pos"].fillna(MIN_KEY) > snapshot_key) if snapshot_key else pd.Series(False, index=d.index)
    d["newer"] = newer.to_numpy(dtype=bool)
    in_flight_keys = set(d.loc[d["newer"], "k"])
    d = d[d["live"]]
    duplicated = set(d.loc[d["k"].duplicated(keep=False), "k"])
    merged = s.merge(d.drop_duplicates("k"), on="k", how="outer", suffixes=("_s", "_d"), indicator=True)
    merged["flight"] = merged["k"].isin(in_flight_keys)
    settled = merged[~merged["flight"]]
    missing = settled[settled["_merge"] == "left_only"]
    extra = settled[settled["_merge"] == "right_only"]
    both = settled[settled["_merge"] == "both"]
    different = both[(both["h_s"] != both["h_d"]) | both["k"].isin(duplicated)]

    def keys_of(frame: pd.DataFrame, side: str) -> pa.Table:
        rows = frame[side].astype("int64").to_numpy()
        table = (src if side == "i" else dst).select(key_columns).take(pa.array(rows, pa.int64()))
        return table.cast(key_schema)

    missing_keys, extra_keys, different_keys = keys_of(missing, "i"), keys_of(extra, "j"), keys_of(different, "i")
    return KeyDiff(missing_keys, extra_keys, different_keys, int(merged["flight"].sum()))
