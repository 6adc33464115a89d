"""The status view's data: :func:`lakesync.monitoring.status.pipeline_status` plus each table's last settled interval.

The library gives applied position, lag, last full load and last validation per table; the settlement
commits (found by their begin/end markers in the Delta history) add which interval was settled last.
"""

from __future__ import annotations

from typing import Any

from lakesync.core.config import Pipeline
from lakesync.monitoring.status import pipeline_status as library_status
from lakesync.settlement.windows import PROP_PREFIX

_START = f"{PROP_PREFIX}interval_start"


def last_settlement(pipeline: Pipeline, table: str, *, commits: int = 200) -> dict[str, Any] | None:
    """The latest settled interval (by interval, not by commit time: backfills settle old days late) among
    the table's last ``commits`` commits."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        history = DeltaTable(pipeline.delta.table_uri(table),
                             storage_options=pipeline.delta.storage_options or None).history(commits)
    except TableNotFoundError:
        return None
    settled = [commit for commit in history if _START in commit]
    if not settled:
        return None
    commit = max(settled, key=lambda c: (c[_START], c.get("version", 0)))
    return {"interval_start": commit[_START], "interval_end": commit.get(f"{PROP_PREFIX}interval_end"),
            "run": commit.get(f"{PROP_PREFIX}run"), "committed_ms": commit.get("timestamp"),
            "delta_version": commit.get("version")}


def pipeline_status(pipeline: Pipeline) -> dict[str, Any]:
    status = library_status(pipeline, relay=True, relay_timeout_s=2.0)
    for row in status["tables"]:
        row["last_settlement"] = last_settlement(pipeline, row["table"])
    return status
