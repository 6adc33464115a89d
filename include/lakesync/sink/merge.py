"""The one MERGE lakesync runs (the stream's sink and the settlement's repair), and the one quoting rule.

Every clause is guarded by "the source position is newer than the stored one", which is what makes
replays, duplicates and concurrent repair harmless (docs/sink.md). ``streamed_exec=False`` lets delta-rs
derive an early pruning predicate from the source's key range, so a MERGE of a few keys rewrites few files.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable

from lakesync.core.table_layout import DELETE_OP, OP, POS


def quote(name: str) -> str:
    """Quote a column name for a delta-rs SQL predicate or expression (backticks, doubled inside)."""
    return "`" + name.replace("`", "``") + "`"


def merge_changes(table: DeltaTable, source: pa.Table, *, key_columns: list[str], commit: CommitProperties,
                  allow_equal: bool = False) -> dict[str, Any]:
    """MERGE ``source`` (at most one change per key, ops c/u/r/d) into ``table``; returns delta-rs's metrics.

    ``allow_equal`` lets a change overwrite a row with the same position (settlement of a source without a
    binlog, where every position is the minimum and settlement is the only writer).
    """
    on = " AND ".join(f"t.{quote(name)} = s.{quote(name)}" for name in key_columns)
    newer = f"s.{quote(POS)} {'>=' if allow_equal else '>'} t.{quote(POS)}"
    is_delete = f"s.{quote(OP)} = '{DELETE_OP}'"
    not_delete = f"s.{quote(OP)} <> '{DELETE_OP}'"
    values = {quote(name): f"s.{quote(name)}" for name in source.column_names}
    return (
        table.merge(source, on, source_alias="s", target_alias="t", streamed_exec=False, commit_properties=commit)
        .when_matched_update(values, predicate=f"{not_delete} AND {newer}")
        .when_matched_delete(predicate=f"{is_delete} AND {newer}")
        .when_not_matched_insert(values, predicate=not_delete)
        .execute()
    )
