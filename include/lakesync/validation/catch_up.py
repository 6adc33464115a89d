"""Waiting for the stream: how far it has applied a table, and why it stopped applying one.

Validation re-checks differing keys after the stream has applied the source up to a new snapshot; how far
the stream got is :func:`lakesync.stream.progress.applied_position`, the one answer every part uses.
"""

from __future__ import annotations

import time

from lakesync.core.config import Pipeline
from lakesync.stream.progress import StreamProgress, applied_position

_POLL_SECONDS = 0.25


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
