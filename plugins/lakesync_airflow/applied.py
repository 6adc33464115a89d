"""How far the stream has applied each table: what the caught-up trigger polls.

The answer is :func:`lakesync.stream.progress.applied_position` (progress file, Delta and tombstone file
statistics, the largest wins), the same one validation waits on.
"""

from __future__ import annotations

from lakesync.core.config import Pipeline


def applied_positions(pipeline: Pipeline, tables: list[str]) -> dict[str, str | None]:
    """Per table, the newest source position the target reflects (None: nothing applied yet)."""
    from lakesync.stream.progress import applied_position

    return {table: applied_position(pipeline, table) for table in tables}


def lagging(applied: dict[str, str | None], targets: dict[str, str]) -> dict[str, str]:
    """The tables whose applied position is still behind their target: ``{table: target}``."""
    return {table: target for table, target in targets.items() if (applied.get(table) or "") < target}
