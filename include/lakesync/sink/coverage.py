"""What a batch covered, recorded with its Delta commit, so that a replay is skipped only when it is the same work.

A batch id alone does not say what the batch held: a Spark checkpoint restored from an older copy re-plans
batch N over a different (usually larger) offset range, and skipping it because "batch N is committed" loses
the changes the first batch N did not have (issue 10). So every sink commit records its batch's
:class:`BatchCoverage` in the commit's custom metadata, and a batch whose id is already committed is skipped
only when the commit of that id recorded the very same coverage. Everything else is applied: for
``exactly_once`` tables the position rule makes re-applying harmless, and append logs drop the changes whose
position they already hold.

The coverage is the set of source positions of the batch's changes for this table (a position identifies
one row change), kept as count, first, last and a digest, plus the Kafka offset ranges when the caller
gives them (for people reading ``DESCRIBE HISTORY``; compared too when both sides have them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from lakesync.core.table_layout import POS

#: Commit metadata keys (``lakesync.batch.*``) the sink writes with every batch commit.
APP_ID_KEY = "lakesync.batch.app_id"
VERSION_KEY = "lakesync.batch.version"
CHANGES_KEY = "lakesync.batch.changes"
FIRST_KEY = "lakesync.batch.first_position"
LAST_KEY = "lakesync.batch.last_position"
DIGEST_KEY = "lakesync.batch.digest"
OFFSETS_KEY = "lakesync.batch.offsets"
#: How many commits back a replay looks for the commit of its batch id before it gives up and applies.
HISTORY_LIMIT = 500

#: Kafka offset ranges a batch read, ``{"topic:partition": (first offset, last offset)}``.
Offsets = Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class BatchCoverage:
    """The distinct source positions one batch carried for one table, summarised."""

    changes: int
    first: str | None
    last: str | None
    digest: str
    offsets: str | None = None

    @classmethod
    def of(cls, changes: pa.Table, offsets: Offsets | None = None) -> BatchCoverage:
        positions = pc.unique(changes.column(POS)) if changes.num_rows else pa.array([], pa.string())
        ordered = positions.take(pc.sort_indices(positions)).to_pylist()
        digest = hashlib.sha256("\n".join(str(key) for key in ordered).encode()).hexdigest()
        return cls(
            changes=len(ordered),
            first=ordered[0] if ordered else None,
            last=ordered[-1] if ordered else None,
            digest=digest,
            offsets=None if offsets is None else json.dumps(
                {name: [int(start), int(end)] for name, (start, end) in sorted(offsets.items())}),
        )

    def metadata(self, app_id: str, batch_version: int) -> dict[str, str]:
        """The commit metadata that records this coverage for ``(app_id, batch_version)``."""
        values = {APP_ID_KEY: app_id, VERSION_KEY: str(batch_version), CHANGES_KEY: str(self.changes),
                  DIGEST_KEY: self.digest, FIRST_KEY: self.first or "", LAST_KEY: self.last or ""}
        if self.offsets is not None:
            values[OFFSETS_KEY] = self.offsets
        return values

    @classmethod
    def from_commit(cls, info: Mapping[str, Any]) -> BatchCoverage:
        return cls(changes=int(info[CHANGES_KEY]), first=info.get(FIRST_KEY) or None,
                   last=info.get(LAST_KEY) or None, digest=str(info[DIGEST_KEY]), offsets=info.get(OFFSETS_KEY))

    def same_work(self, other: BatchCoverage) -> bool:
        """Provably the same changes: the same positions, and the same offsets where both recorded them."""
        same_offsets = self.offsets is None or other.offsets is None or self.offsets == other.offsets
        return self.digest == other.digest and self.changes == other.changes and same_offsets


def commit_metadata(info: Mapping[str, Any]) -> Mapping[str, Any]:
    """A commit's lakesync metadata, wherever its writer put it: delta-rs writes custom metadata as keys of the
    commit info, delta-spark as one JSON object in ``userMetadata`` (:mod:`lakesync.sink.spark_writes`)."""
    user = info.get("userMetadata")
    if not isinstance(user, str) or not user.startswith("{"):
        return info
    try:
        parsed = json.loads(user)
    except ValueError:
        return info
    return {**info, **parsed} if isinstance(parsed, dict) else info


def recorded_coverage(table: DeltaTable, app_id: str, batch_version: int) -> BatchCoverage | None:
    """The coverage the commit of ``(app_id, batch_version)`` recorded, or None when it cannot be found.

    None (a commit from before coverage was recorded, or older than :data:`HISTORY_LIMIT` commits) means
    "not provably the same", so the caller applies the batch.
    """
    version = str(batch_version)
    for info in map(commit_metadata, table.history(HISTORY_LIMIT)):
        if info.get(APP_ID_KEY) == app_id and str(info.get(VERSION_KEY)) == version and DIGEST_KEY in info:
            return BatchCoverage.from_commit(info)
    return None
