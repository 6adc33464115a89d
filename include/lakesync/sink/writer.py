"""How lakesync commits to Delta: one place for table properties, commit-conflict retries and maintenance.

Several writers share a table: the stream's MERGEs, the nightly settlement's repair, the maintenance DAG's
OPTIMIZE and VACUUM. delta-rs commits optimistically and raises :class:`deltalake.exceptions.CommitFailedError`
when a concurrent commit conflicts with what this one read (e.g. an OPTIMIZE removed a file the MERGE read);
with ``delta.writer: delta_spark`` Delta's own conflict exceptions play that part (``conflicts=``, see
:mod:`lakesync.sink.spark_writes`, whose maintenance is :mod:`lakesync.sink.spark_maintenance`).
Every lakesync write goes through :func:`commit_with_retry`: the whole step (read the table again, plan,
write) is re-run, a bounded number of times, each retry logged and its attempt number written into the
commit metadata (``lakesync.commit.attempt``), so the Delta log shows the retries. When the attempts run
out the step fails with a :class:`SinkError` that says re-running is safe (nothing was committed; every
lakesync write is idempotent by its app transaction and the position rule).

VACUUM rule: files are removed only when older than the table's ``delta.deletedFileRetentionDuration``
(delta-rs enforces it; lakesync never disables the check) and never below :data:`MIN_VACUUM_RETENTION_HOURS`.
A running reader or the stream needs at most the files of the versions since it started, and a stream
batch or a settlement run reads its version for minutes, not days, so a week keeps every file they can
still need, and time travel for a week besides.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

from lakesync.core.errors import SinkError

log = logging.getLogger(__name__)
T = TypeVar("T")

def delta_arrow_schema(table: DeltaTable) -> pa.Schema:
    """The table's schema as a pyarrow schema. delta-rs hands back an arro3 schema, which pyarrow takes through
    the Arrow C data interface (pyarrow-stubs do not know that ``pa.schema`` accepts such an object)."""
    return pa.schema(table.schema().to_arrow())  # type: ignore[arg-type]


#: Delta table properties every lakesync table carries (the change data feed shows each MERGE).
TABLE_PROPERTIES = {"delta.enableChangeDataFeed": "true"}
#: How many times a step is tried when its commit loses a race.
MAX_ATTEMPTS = 6
#: Commit metadata key: which attempt of its step this commit was (1 = no retry was needed).
ATTEMPT_KEY = "lakesync.commit.attempt"
#: VACUUM never removes files younger than this (hours).
MIN_VACUUM_RETENTION_HOURS = 168


def with_attempt(commit: CommitProperties | None, attempt: int) -> CommitProperties:
    """``commit`` with the attempt number added to its custom metadata."""
    if commit is None:
        return CommitProperties(custom_metadata={ATTEMPT_KEY: str(attempt)})
    return CommitProperties(custom_metadata={**(commit.custom_metadata or {}), ATTEMPT_KEY: str(attempt)},
                            app_transactions=commit.app_transactions, max_commit_retries=commit.max_commit_retries)


def commit_with_retry(step: Callable[[int], T], *, what: str, table_uri: str, attempts: int = MAX_ATTEMPTS,
                      base_delay_s: float = 0.05,
                      conflicts: tuple[type[BaseException], ...] = (CommitFailedError,)) -> T:
    """Run ``step(attempt)`` until its commit does not conflict; each attempt must re-read the table and re-plan.

    ``conflicts`` are the errors that mean "lost the commit race" (delta-rs's by default; the delta-spark
    writer adds Delta's concurrent-modification exceptions). Raises :class:`SinkError` (safe to re-run) after
    ``attempts`` conflicts.
    """
    for attempt in range(1, attempts + 1):
        try:
            return step(attempt)
        except conflicts as exc:
            if attempt == attempts:
                raise SinkError(
                    f"{what} on {table_uri} lost the commit race {attempts} times to concurrent writers; "
                    f"nothing of this attempt was committed: {exc}",
                    hint="re-running is safe (lakesync's writes are idempotent); if it keeps failing, run "
                         "maintenance (OPTIMIZE) outside the stream's busiest hours",
                ) from exc
            delay = base_delay_s * 2 ** (attempt - 1) * (1 + random.random())
            log.warning("%s on %s: commit conflict (attempt %d of %d), retrying in %.2fs: %s",
                        what, table_uri, attempt, attempts, delay, exc)
            time.sleep(delay)
    raise AssertionError("unreachable")


def optimize(table_uri: str, *, storage_options: dict[str, str] | None = None,
             z_order: list[str] | None = None) -> dict:
    """OPTIMIZE with conflict retries; returns delta-rs's metrics. With ``z_order`` (a keyed table's key) the
    files are rewritten clustered by key, so a MERGE of recent keys touches few of them (docs/stream.md);
    without it, small files are compacted."""

    def step(attempt: int) -> dict:
        table = DeltaTable(table_uri, storage_options=storage_options)
        commit = with_attempt(CommitProperties(custom_metadata={"lakesync.operation": "optimize"}), attempt)
        if z_order:
            return table.optimize.z_order(list(z_order), commit_properties=commit)
        return table.optimize.compact(commit_properties=commit)
    return commit_with_retry(step, what="OPTIMIZE", table_uri=table_uri)


def vacuum_retention_hours(table_uri: str, retention_hours: float) -> float:
    """``retention_hours``, raised to :data:`MIN_VACUUM_RETENTION_HOURS` (see above) with a warning."""
    if retention_hours < MIN_VACUUM_RETENTION_HOURS:
        log.warning("VACUUM of %s: retention %sh raised to %sh, so no running reader or stream loses a file it "
                    "still needs", table_uri, retention_hours, MIN_VACUUM_RETENTION_HOURS)
        return MIN_VACUUM_RETENTION_HOURS
    return retention_hours


def vacuum(table_uri: str, *, retention_hours: float, storage_options: dict[str, str] | None = None) -> list[str]:
    """VACUUM files older than ``retention_hours``, raised to :data:`MIN_VACUUM_RETENTION_HOURS` (see above)."""
    retention_hours = vacuum_retention_hours(table_uri, retention_hours)

    def step(attempt: int) -> list[str]:
        table = DeltaTable(table_uri, storage_options=storage_options)
        return table.vacuum(retention_hours=int(retention_hours), dry_run=False, enforce_retention_duration=True,
                            commit_properties=with_attempt(None, attempt))
    return commit_with_retry(step, what="VACUUM", table_uri=table_uri)
