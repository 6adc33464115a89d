"""The rows of a full load as Delta stores them: the source columns plus the position columns
(the schema comes from :func:`lakesync.core.table_layout.with_lakesync_columns`, the table properties and
the commit info from the sink's write path: ``lakesync.sink.writer`` and ``lakesync.sink.snapshot``)."""

from __future__ import annotations

import pyarrow as pa

from lakesync.core.positions import SourcePosition

SNAPSHOT_OP = "r"


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
