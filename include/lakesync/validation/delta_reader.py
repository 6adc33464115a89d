"""The Delta side of a comparison: the target table streamed in batches, and the sink's tombstones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakesync.core.table_layout import DELETE_OP, OP, POS, TS
from lakesync.validation.chunks import ChunkPlan, Digest, chunk_digests, merge_digests
from lakesync.validation.fingerprints import conform, row_hashes


def live_mask(table: pa.Table | pa.RecordBatch) -> pa.Array:
    """True for rows that are not deletes (``_lakesync_op`` other than ``'d'``, or NULL)."""
    ops: Any = pc.cast(table[OP], pa.string())  # the stubs can't tell a column of a table from a batch's
    is_delete: Any = pc.fill_null(pc.equal(ops, pa.scalar(DELETE_OP)), False)
    return pc.invert(is_delete)


class DeltaSide:
    """The Delta table, streamed in batches, and its tombstones (the sink keeps live rows only in the table
    and ``(key, position)`` of each delete in a side table, see :mod:`lakesync.sink.tombstones`)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None, schema: pa.Schema, plan: ChunkPlan
                 ) -> None:
        from deltalake import DeltaTable

        from lakesync.sink.tombstones import TombstoneStore, tombstone_uri

        self.storage_options = storage_options
        self.table = DeltaTable(uri, storage_options=storage_options)
        names = set(self.table.schema().to_arrow().names)
        self.missing_columns = [name for name in schema.names if name not in names]
        self.extra_columns = sorted(names - set(schema.names) - {POS, OP, TS})
        self.schema = pa.schema([*schema, pa.field(POS, pa.string()), pa.field(OP, pa.string())])
        self.columns = [name for name in self.schema.names if name in names]
        self.key_schema = pa.schema([schema.field(name) for name in plan.key_columns])
        self.plan = plan
        self.tombstone_store = TombstoneStore(tombstone_uri(uri), key_columns=list(plan.key_columns),
                                              storage_options=storage_options)

    def tombstones(self, keys: pa.Table) -> pa.Table:
        """The tombstones of ``keys`` as rows of :attr:`schema` with ``_lakesync_op = 'd'``."""
        found = self.tombstone_store.matching(keys)
        found = found.append_column(OP, pa.array([DELETE_OP] * found.num_rows, pa.string()))
        return conform(found, self.schema)

    def batches(self, chunks: set[int] | None = None) -> Iterator[pa.Table]:
        if self.plan.by_range and chunks is not None:
            for chunk in sorted(chunks):
                yield self._scan(self.plan.delta_predicate(chunk))
            return
        reader = self._rows()
        for batch in reader:
            table = conform(batch, self.schema)  # Delta scans hand back view types, which few kernels take
            if chunks is not None:
                ids = self.plan.chunk_ids(conform(table, self.key_schema))
                table = table.filter(pa.array(np.isin(ids, list(chunks))))
            yield table

    def refresh(self) -> None:
        """Move to the table's newest version (the stream keeps committing while we compare)."""
        self.table.update_incremental()

    def _scan(self, predicate: str) -> pa.Table:
        return conform(self._rows(predicate).read_all(), self.schema)

    def _rows(self, predicate: str | None = None) -> pa.RecordBatchReader:
        """The table's rows (:attr:`columns`) at the version it holds: delta-rs's scan, or Spark's once a column
        was widened (:mod:`lakesync.sink.table_scan`)."""
        from lakesync.sink.table_scan import scan_rows

        return scan_rows(self.table, self.storage_options, columns=self.columns, predicate=predicate)


def delta_chunk_digests(side: DeltaSide, schema: pa.Schema) -> tuple[dict[int, Digest], int]:
    digests: dict[int, Digest] = {}
    rows = 0
    for batch in side.batches():
        if OP in batch.column_names:
            batch = batch.filter(live_mask(batch))
        conformed = conform(batch, schema)
        rows += conformed.num_rows
        merge_digests(digests, chunk_digests(side.plan.chunk_ids(conformed.select(list(side.plan.key_columns))),
                                              row_hashes(conformed)))
    return digests, rows


def concat_conformed(parts: Iterator[pa.Table], schema: pa.Schema) -> pa.Table:
    tables = [conform(part, schema) for part in parts]
    return pa.concat_tables(tables) if tables else schema.empty_table()
