"""How far the stream has applied each table: what the caught-up trigger polls.

Two observations, the larger wins: the newest ``_lakesync_pos`` in the Delta table (from the log's file
statistics, no data scan) and the stream's progress file (which also counts deletes, whose rows are gone).
"""

from __future__ import annotations

from lakesync.core.config import Pipeline


def applied_positions(pipeline: Pipeline, tables: list[str]) -> dict[str, str | None]:
    """Per table, the newest source position the target reflects (None: nothing applied yet)."""
    from lakesync.monitoring.status import delta_summary
    from lakesync.stream.progress import StreamProgress

    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables
    result: dict[str, str | None] = {}
    for table in tables:
        summary = delta_summary(pipeline.delta.table_uri(table), pipeline.delta.storage_options or None)
        candidates = [summary and summary.get("max_position"), table in progress and progress[table].applied_position]
        known = [key for key in candidates if isinstance(key, str)]
        result[table] = max(known) if known else None
    return result


def lagging(applied: dict[str, str | None], targets: dict[str, str]) -> dict[str, str]:
    """The tables whose applied position is still behind their target: ``{table: target}``."""
    return {table: target for table, target in targets.items() if (applied.get(table) or "") < target}
