"""Tagged rows written as one Parquet data file in a Delta table's folder, with the add-action statistics
MERGE prunes by. The file is invisible to readers until a commit adds it."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakesync.core.errors import SinkError
from lakesync.core.table_layout import OP, POS


def _table_filesystem(table_uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in table_uri:
        return pafs.FileSystem.from_uri(table_uri)
    return pafs.LocalFileSystem(), os.path.abspath(table_uri)


def _stats_value(value: Any) -> Any:
    """A min/max in Delta's JSON stats form, or None where an exact form is not worth the trouble."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | str):
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    return None


class _FileStats:
    """Delta add-action statistics: row count, and exact min/max/null count of the columns MERGE prunes by
    (the key and ``_lakesync_pos``), so the stream's MERGE can skip files of a big table."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self.rows = 0
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.nulls: dict[str, int] = {}
        self.exact = set(self.columns)

    def add(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for name in self.columns:
            column = table.column(name)
            self.nulls[name] = self.nulls.get(name, 0) + column.null_count
            if column.null_count == len(column) or name not in self.exact:
                continue
            extremes = pc.min_max(column)
            low, high = _stats_value(extremes["min"].as_py()), _stats_value(extremes["max"].as_py())
            if low is None or high is None:
                self.exact.discard(name)
                continue
            self.low[name] = low if name not in self.low else min(self.low[name], low)
            self.high[name] = high if name not in self.high else max(self.high[name], high)

    def to_json(self) -> str:
        kept = [name for name in self.columns if name in self.exact and name in self.low]
        return json.dumps({
            "numRecords": self.rows,
            "minValues": {name: self.low[name] for name in kept},
            "maxValues": {name: self.high[name] for name in kept},
            "nullCount": {name: self.nulls.get(name, 0) for name in kept},
        })


def write_part(table_uri: str, schema: pa.Schema, parts: Iterable[pa.Table], *, stats_columns: Sequence[str]
               ) -> tuple[str, int, int, str]:
    """Write tagged rows as one Parquet file in the table folder; ``(relative path, bytes, rows, stats)``.

    The file is invisible to readers until a commit adds it; a load that fails leaves it for VACUUM.
    """
    filesystem, root = _table_filesystem(table_uri)
    name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
    stats = _FileStats(stats_columns)
    try:
        filesystem.create_dir(root, recursive=True)
        # Dictionary encoding only for the constant columns: on the source columns it costs half the encoding
        # time and, for mostly unique values, makes the file bigger, not smaller.
        with filesystem.open_output_stream(f"{root}/{name}") as sink, \
                pq.ParquetWriter(sink, schema, compression="snappy",
                                 use_dictionary=[POS, OP]) as writer:  # type: ignore[arg-type]  # stubs: bool only
            for part in parts:
                writer.write_table(part)
                stats.add(part)
        size = filesystem.get_file_info(f"{root}/{name}").size or 0
    except OSError as exc:  # a full disk, a missing permission, an unreachable object store
        raise SinkError(
            f"writing a data file of {table_uri} failed: {exc}; nothing of this table was committed",
            hint="free space or fix access under delta.root, then run the load again (it resumes; files "
            "written but never committed are invisible and VACUUM removes them)",
        ) from exc
    return name, int(size), stats.rows, stats.to_json()
