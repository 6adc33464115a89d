"""The rows of a full load as Delta stores them: the source columns plus the position columns, and the
table settings and commit info every load commit carries."""

from __future__ import annotations

import pyarrow as pa

from lakesync.core.positions import SourcePosition
from lakesync.core.table_layout import OP, POS, TS

SNAPSHOT_OP = "r"
#: Delta table settings every lakesync table gets, the same as the sink gives the tables it creates: with the
#: change data feed on, readers of the lake can see every later MERGE as inserts, updates and deletes
#: (``DeltaTable.load_cdf()``). lakesync itself does not read the feed.
TABLE_CONFIGURATION = {"delta.enableChangeDataFeed": "true"}


def delta_schema(source_schema: pa.Schema) -> pa.Schema:
    """The source columns plus the position columns the sink compares (see :mod:`lakesync.core.positions`)."""
    return source_schema.append(pa.field(POS, pa.string(), nullable=False)).append(
        pa.field(OP, pa.string(), nullable=False)).append(pa.field(TS, pa.int64(), nullable=False))


class RowTagger:
    """Adds the position columns to parts of one table. Their values are the same for every row, so the
    arrays are built once and sliced (zero-copy) per part, instead of costing ~0.1 s per million rows."""

    def __init__(self, schema: pa.Schema, position: SourcePosition, ts_ms: int) -> None:
        self.schema = schema
        self._values = (pa.scalar(position.key()), pa.scalar(SNAPSHOT_OP), pa.scalar(ts_ms, pa.int64()))
        self._constants = [pa.repeat(value, 0) for value in self._values]

    def __call__(self, table: pa.Table) -> pa.Table:
        rows = table.num_rows
        constants = self._constants
        if len(constants[0]) < rows:  # a benign race between worker threads: both build the same arrays
            constants = self._constants = [pa.repeat(value, rows) for value in self._values]
        return pa.Table.from_arrays([*table.columns, *(array.slice(0, rows) for array in constants)],
                                    schema=self.schema)


def commit_metadata(position: SourcePosition, *, table: str, mode: str, ts_ms: int) -> dict[str, str | int]:
    """What each load commit carries in its commit info (the same keys as ``DeltaSink.write_snapshot``), so
    people can read the position from the table's history. delta-rs 1.6 refuses table properties outside
    the ``delta.*`` set, so commit info is the place; the sink itself reads the app transaction."""
    return {
        "lakesync.operation": "snapshot",
        "lakesync.snapshot.position": position.key(),
        "lakesync.snapshot.token": position.token(),
        "lakesync.snapshot.gtid": position.gtid or "",
        "lakesync.snapshot.ts_ms": ts_ms,
        "lakesync.snapshot.mode": mode,
        "lakesync.table": table,
    }
