"""What the stream has applied, per table: the state behind ``lakesync status`` and the Airflow view.

Written after each committed micro-batch (atomically: temp file + rename) to
``<pipeline state dir>/stream_progress.json``. Most of it is observation (batch counts, the newest applied
change and its commit time, what status shows; not the lag, which is what the stream has *not* applied:
:mod:`lakesync.stream.lag`): the Delta tables' own ``_lakesync_pos`` columns and app transactions decide which changes are
applied, and a stale position here only delays what status and the caught-up trigger report.

The stop flags are state, not observation: ``stopped_reason`` is the only record that a table met a DDL
it can't follow. While it is set the stream applies none of that table's changes and validation skips the
table; lose the file and the stream resumes applying changes made after that DDL to the old table. A
full load of the table after its stop (the command of its message) is what resumes it: the stream clears
the flag itself when it sees that load (docs/schema_changes.md).

:func:`applied_position` is the one answer to "how far has the stream applied this table" (validation's
wait, the Airflow caught-up trigger): the largest of the progress file's position and the largest
``_lakesync_pos`` in the file statistics of the Delta table and of its tombstone table, so a batch whose
newest change is a delete counts as applied as soon as its tombstone is written.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lakesync.core.state_files import write_json_atomically
from lakesync.core.table_layout import POS

if TYPE_CHECKING:
    from lakesync.core.config import Pipeline

PROGRESS_FILE = "stream_progress.json"


@dataclass
class TableProgress:
    applied_position: str | None = None
    applied_source_ts_ms: int | None = None
    last_batch_id: int | None = None
    last_batch_rows: int = 0
    last_batch_at_ms: int | None = None
    rows_total: int = 0
    stopped_reason: str | None = None
    #: position key of the change (usually a DDL) from which the table's changes were no longer applied
    stopped_at: str | None = None
    #: the newest position of a change skipped while stopped: a re-load must be at or after it to resume
    skipped_through: str | None = None
    #: the last automatic re-load after a schema change: when, at which position, and why
    last_reload: str | None = None
    #: a selected table that appeared after the full load and is not streamed (yet): why (stream/new_tables.py)
    not_synced: str | None = None
    #: how a table that appeared after the full load joined the stream: when, and from where
    joined: str | None = None
    #: a position key before which every change of the table is applied: recovery replays from here
    #: (lakesync.stream.consumed)
    consumed_through: str | None = None

    def reloaded_by(self, load_position: str | None) -> bool:
        """Whether a full load at ``load_position`` came after this table stopped (so it may resume)."""
        since = self.stopped_at or self.applied_position
        return bool(load_position and since and load_position > since)


@dataclass
class StreamProgress:
    tables: dict[str, TableProgress] = field(default_factory=dict)

    @classmethod
    def load(cls, state_dir: Path) -> StreamProgress:
        file = state_dir / PROGRESS_FILE
        try:
            raw = json.loads(file.read_text())
        except (OSError, ValueError):
            return cls()
        return cls({name: TableProgress(**values) for name, values in raw.get("tables", {}).items()})

    def save(self, state_dir: Path) -> None:
        write_json_atomically(state_dir / PROGRESS_FILE, {"tables": {name: asdict(p) for name, p in self.tables.items()}})

    def record(self, table: str, *, batch_id: int, rows: int, position: str | None, source_ts_ms: int | None
               ) -> None:
        progress = self.tables.setdefault(table, TableProgress())
        progress.last_batch_id = batch_id
        progress.last_batch_rows = rows
        progress.last_batch_at_ms = int(time.time() * 1000)
        progress.rows_total += rows
        if position is not None and (progress.applied_position is None or position > progress.applied_position):
            progress.applied_position = position
        if source_ts_ms is not None:
            progress.applied_source_ts_ms = max(source_ts_ms, progress.applied_source_ts_ms or 0)


def delta_max_position(uri: str, storage_options: dict[str, str] | None = None) -> str | None:
    """The largest ``_lakesync_pos`` in the table, from the add actions' statistics (None when unknown)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        actions = pa.table(DeltaTable(uri, storage_options=storage_options).get_add_actions(flatten=True))
    except TableNotFoundError:
        return None
    column = f"max.{POS}"
    if column not in actions.column_names or actions.num_rows == 0:
        return None
    return pc.max(actions[column]).as_py()


def applied_position(pipeline: Pipeline, table: str) -> str | None:
    """The newest source position the stream has applied to ``table`` (None: nothing yet); see the module doc."""
    from lakesync.sink.tombstones import tombstone_uri

    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables.get(table)
    uri, storage = pipeline.delta.table_uri(table), pipeline.delta.storage_options or None
    return applied_from(progress, delta_max_position(uri, storage), delta_max_position(tombstone_uri(uri), storage))


def applied_from(progress: TableProgress | None, table_max: str | None, tombstones_max: str | None) -> str | None:
    """:func:`applied_position` from what a caller has read already: the table's progress entry, the largest
    position in its Delta table and in its tombstone table (a delete leaves its position only there)."""
    found = (progress.applied_position if progress else None, table_max, tombstones_max)
    return max((key for key in found if key is not None), default=None)


def stopped_since_load(state_dir: Path, loaded: dict[str, str | None], tables: list[str]) -> dict[str, str]:
    """Of ``tables`` (name -> the position key of its last full load), those the stream stopped after that
    load, with the reason: their Delta table no longer follows the source, so a full load must not count
    them as done."""
    progress = StreamProgress.load(state_dir).tables
    return {name: progress[name].stopped_reason or "" for name in tables
            if name in progress and progress[name].stopped_reason and name in loaded
            and not progress[name].reloaded_by(loaded[name])}
