"""The Delta sink: snapshot writes, exactly-once position-versioned MERGE, tombstones (docs/sink.md)."""

from lakesync.core.table_layout import DELETED_MS, OP, POS, TS
from lakesync.sink.changes import ChangePlan, plan_changes
from lakesync.sink.delta import ApplyResult, DeltaSink, Semantics
from lakesync.sink.snapshot import snapshot_transaction
from lakesync.sink.tombstones import tombstone_uri

__all__ = [
    "DELETED_MS",
    "OP",
    "POS",
    "TS",
    "ApplyResult",
    "ChangePlan",
    "DeltaSink",
    "Semantics",
    "plan_changes",
    "snapshot_transaction",
    "tombstone_uri",
]
