"""How far the stream has applied each table: what the caught-up trigger polls and the status view shows.

Two observations, the larger wins: the newest ``_lakesync_pos`` in the Delta table (the truth for rows the
table still holds) and the stream's progress file (which also counts deletes, whose rows are gone).
"""

from __future__ import annotations

from lakesync.config import Pipeline

POS = "_lakesync_pos"


def delta_max_position(pipeline: Pipeline, table: str) -> str | None:
    """The newest position in the table's ``_lakesync_pos`` column; None when the table or column is missing."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = DeltaTable(pipeline.delta.table_uri(table), storage_options=pipeline.delta.storage_options or None)
    except TableNotFoundError:
        return None
    if POS not in pa.schema(delta.schema().to_arrow()).names:
        return None
    column = delta.to_pyarrow_table(columns=[POS])[POS]
    return pc.max(column).as_py() if len(column) else None


def applied_positions(pipeline: Pipeline, tables: list[str]) -> dict[str, str | None]:
    """Per table, the newest source position the target reflects."""
    from lakesync.stream.progress import StreamProgress

    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables
    result: dict[str, str | None] = {}
    for table in tables:
        candidates = [delta_max_position(pipeline, table)]
        if table in progress:
            candidates.append(progress[table].applied_position)
        known = [key for key in candidates if key is not None]
        result[table] = max(known) if known else None
    return result


def lagging(applied: dict[str, str | None], targets: dict[str, str]) -> dict[str, str]:
    """The tables whose applied position is still behind their target: ``{table: target}``."""
    return {table: target for table, target in targets.items() if (applied.get(table) or "") < target}
