"""What a snapshot commit (the full load, or :meth:`lakesync.sink.DeltaSink.write_snapshot`) records.

The snapshot position is recorded twice in the commit: as the app transaction ``lakesync.snapshot`` whose
version is ``file_index * 10^12 + offset`` (durable: it survives checkpoints and log clean-up; the sink
reads it for the "snapshot floor"), and in the commit metadata (``lakesync.snapshot.*``, for people
reading the history). delta-rs 1.6 refuses table properties outside the ``delta.*`` set, so commit info
is the place for the readable form.
"""

from __future__ import annotations

from deltalake import CommitProperties, Transaction

from lakesync.core.errors import SinkError
from lakesync.core.positions import SourcePosition

#: The app id under which the snapshot commit records its position.
SNAPSHOT_APP_ID = "lakesync.snapshot"
_OFFSET_SPAN = 10**12


def encode_snapshot(position: SourcePosition) -> int:
    """A snapshot position as one int64 (file index * 10^12 + offset), the form a Delta txn version holds."""
    if position.row != 0 or position.offset >= _OFFSET_SPAN:
        raise SinkError(f"{position} is not a snapshot position", hint="snapshot positions have row 0")
    return position.file_index * _OFFSET_SPAN + position.offset


def decode_snapshot(version: int) -> str:
    """The position key of an :func:`encode_snapshot` version."""
    return SourcePosition(f"snapshot.{version // _OFFSET_SPAN:06d}", version % _OFFSET_SPAN).key()


def snapshot_transaction(position: SourcePosition) -> Transaction:
    """The app transaction a snapshot commit must carry so the sink knows the snapshot position.

    Without it the sink still converges, but it cannot drop changes at or before the snapshot up front
    (the "snapshot floor", docs/sink.md).
    """
    return Transaction(SNAPSHOT_APP_ID, encode_snapshot(position))


def snapshot_metadata(position: SourcePosition, *, ts_ms: int, table: str | None = None, mode: str | None = None
                      ) -> dict[str, str | int]:
    """The readable metadata of a snapshot commit (delta-rs's custom metadata, delta-spark's ``userMetadata``)."""
    metadata: dict[str, str | int] = {
        "lakesync.operation": "snapshot",
        "lakesync.snapshot.position": position.key(),
        "lakesync.snapshot.token": position.token(),
        "lakesync.snapshot.gtid": position.gtid or "",
        "lakesync.snapshot.ts_ms": ts_ms,
    }
    if mode is not None:
        metadata["lakesync.snapshot.mode"] = mode
    if table is not None:
        metadata["lakesync.table"] = table
    return metadata


def snapshot_commit(position: SourcePosition, *, ts_ms: int, table: str | None = None, mode: str | None = None
                    ) -> CommitProperties:
    """The commit properties of every delta-rs snapshot commit: the app transaction and the readable metadata."""
    return CommitProperties(app_transactions=[snapshot_transaction(position)],
                            custom_metadata=snapshot_metadata(position, ts_ms=ts_ms, table=table, mode=mode))
