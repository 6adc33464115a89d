"""What the status view shows per pipeline table: applied position, lag, last full load, last validated settlement.

When the library offers ``lakesync.status.pipeline_status(pipeline)`` the view uses it; until then this
module reads the same sources itself: the full load's ``full_load.json``, the stream's
``stream_progress.json``, and the Delta tables (newest ``_lakesync_pos``, settlement commits in the history).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

from lakesync.config import Pipeline
from lakesync.load_state import LoadState
from lakesync.stream.progress import StreamProgress
from lakesync_airflow.applied import delta_max_position

SETTLEMENT_START = "lakesync.settlement.interval_start"


def _delta_tables(pipeline: Pipeline) -> list[str]:
    root = pipeline.delta.root
    if "://" in root and not root.startswith("file://"):
        return []
    folder = Path(root.removeprefix("file://"))
    return sorted(p.name for p in folder.glob("*") if (p / "_delta_log").is_dir()) if folder.is_dir() else []


def _last_settlement(pipeline: Pipeline, table: str) -> dict[str, Any] | None:
    """The newest settlement commit of the table: the interval it settled (validated in the same task)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        history = DeltaTable(pipeline.delta.table_uri(table),
                             storage_options=pipeline.delta.storage_options or None).history(200)
    except TableNotFoundError:
        return None
    for commit in history:  # newest first
        if SETTLEMENT_START in commit:
            return {"interval_start": commit[SETTLEMENT_START],
                    "interval_end": commit.get("lakesync.settlement.interval_end"),
                    "run": commit.get("lakesync.settlement.run"), "committed_ms": commit.get("timestamp"),
                    "delta_version": commit.get("version")}
    return None


def pipeline_status(pipeline: Pipeline) -> dict[str, Any]:
    """``{"pipeline", "delta_root", "full_load": {...}, "tables": [{table, applied_position, lag_seconds, ...}]}``."""
    if importlib.util.find_spec("lakesync.status") is not None:
        from lakesync.status import pipeline_status as library_status

        return library_status(pipeline)
    load = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables
    names = sorted(set(load.tables) | set(progress) | set(_delta_tables(pipeline)))
    now_ms = int(time.time() * 1000)
    tables = []
    for name in names:
        loaded = load.tables.get(name)
        streamed = progress.get(name)
        positions = [k for k in (delta_max_position(pipeline, name), streamed and streamed.applied_position) if k]
        tables.append({
            "table": name,
            "semantics": pipeline.tables.settings_for(name).semantics or "exactly_once",
            "applied_position": max(positions) if positions else None,
            "lag_seconds": streamed.lag_seconds(now_ms) if streamed else None,
            "last_batch_ms": streamed.last_batch_at_ms if streamed else None,
            "full_load": {"status": loaded.status, "rows": loaded.rows, "position": loaded.position_key,
                          "finished_at": load.finished_at} if loaded else None,
            "last_settlement": _last_settlement(pipeline, name),
        })
    return {
        "pipeline": pipeline.name,
        "source": f"{pipeline.source.conn_id}/{pipeline.source.database}",
        "delta_root": pipeline.delta.root,
        "full_load": {"position": load.position.key() if load.position else None, "mode": load.mode,
                      "started_at": load.started_at, "finished_at": load.finished_at},
        "tables": tables,
    }
