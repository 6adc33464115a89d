"""Waiting for the stream: how far it has applied a table, and why it stopped applying one.

Validation re-checks differing keys after the stream has applied the source up to a new snapshot; these
read the stream's progress file and the ``_lakesync_pos`` statistics of the Delta tables (metadata only).
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc

from lakesync.core.config import Pipeline
from lakesync.core.table_layout import POS
from lakesync.stream.progress import StreamProgress

_POLL_SECONDS = 0.25


def applied_position(pipeline: Pipeline, table: str) -> str | None:
    """The stream's applied position for ``table``: the largest of the progress file's and the largest
    ``_lakesync_pos`` in the file statistics of the Delta table and of its tombstone table (metadata only)."""
    from lakesync.sink.tombstones import tombstone_uri

    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables.get(table)
    uri, storage = pipeline.delta.table_uri(table), pipeline.delta.storage_options or None
    found = [progress.applied_position if progress else None, delta_max_position(uri, storage),
             delta_max_position(tombstone_uri(uri), storage)]
    return max((key for key in found if key is not None), default=None)


def delta_max_position(uri: str, storage_options: dict[str, str] | None = None) -> str | None:
    """The largest ``_lakesync_pos`` in the table, from the add actions' statistics (None when unknown)."""
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


def stopped_reason(pipeline: Pipeline, table: str) -> str | None:
    """Why the stream stopped applying ``table`` (a schema change it can't follow...), or None."""
    progress = StreamProgress.load(pipeline.pipeline_state_dir).tables.get(table)
    return progress.stopped_reason if progress else None


def wait_for_stream(pipeline: Pipeline, table: str, position_key: str, deadline: float) -> bool:
    """Poll until the stream has applied ``table`` up to ``position_key`` or the monotonic ``deadline``
    passes; True when it got there. Returns False at once when the stream has stopped the table."""
    if stopped_reason(pipeline, table):
        return False
    while True:
        applied = applied_position(pipeline, table)
        if applied is not None and applied >= position_key:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_SECONDS)
