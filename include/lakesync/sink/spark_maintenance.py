"""Table maintenance on delta-spark (``delta.writer: delta_spark``): OPTIMIZE, deletion vectors purged, VACUUM.

Why these three, in this order. The stream's delta-spark MERGEs mark the rows they replace or delete in
deletion vectors instead of rewriting files: reads skip them, but their bytes stay in the files. OPTIMIZE
(Z-ORDER by the key of a keyed table, so each file covers a narrow key range and a MERGE of recent keys
prunes to few files, docs/stream.md "Table layout"; compaction otherwise) rewrites the small files it
touches without those rows. ``REORG TABLE ... APPLY (PURGE)`` rewrites the files that still carry deletion
vectors, so no current file holds a deleted row's bytes (what an erasure request needs). VACUUM then removes
the files no version within the retention needs, never below
:data:`~lakesync.sink.writer.MIN_VACUUM_RETENTION_HOURS` (a running reader or the stream keeps its files).

A table delta-rs created is first made writable by delta-spark (:func:`~lakesync.sink.spark_writes.
make_writable`: names it can't write are refused, missing writer features listed, deletion vectors on).

OPTIMIZE and the stream's MERGE on one table conflict (both rewrite files). Each step here is retried after
a lost commit race (:func:`~lakesync.sink.writer.commit_with_retry` with Delta's conflict exceptions), as
the stream's batch is re-planned after its own, so neither fails the other. Every commit's
``commitInfo.userMetadata`` names the operation and the attempt, as delta-rs's custom metadata does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from deltalake import DeltaTable

from lakesync.sink.merge import quote
from lakesync.sink.spark_writes import (
    USER_METADATA,
    delta_conflicts,
    delta_spark_session,
    make_writable,
    run_on_delta_spark,
    session_settings,
)
from lakesync.sink.writer import ATTEMPT_KEY, commit_with_retry, vacuum_retention_hours
from lakesync.spark.storage import spark_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: VACUUM records what it removed in the table's log (its ``VACUUM END`` commit), where the count is read.
VACUUM_LOGGING = "spark.databricks.delta.vacuum.logging.enabled"
#: How many tasks VACUUM lists the table's files with. Spark's default (10,000, meant for discovering the
#: partitions of huge tables) made VACUUM of a small unpartitioned table take 51 s on two cores, 4 s with the
#: executors' core count (measured); lakesync's tables are unpartitioned, one folder to list.
VACUUM_LISTING_TASKS = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
#: Delta's error class when a Z-ORDER column has no statistics.
ZORDER_WITHOUT_STATS = "DELTA_ZORDERING_ON_COLUMN_WITHOUT_STATS"
MAINTENANCE_HINT = ("nothing of this step was committed and the table is unchanged by it; the next maintenance run "
                    "tries again (set delta.writer: delta_rs to maintain the table with delta-rs meanwhile)")


def maintain_table(table_uri: str, *, key_columns: list[str] | None, retention_hours: float,
                   storage_options: dict[str, str] | None = None) -> dict[str, int]:
    """OPTIMIZE (Z-ORDER by ``key_columns`` when given), purge deletion vectors, then VACUUM the table at
    ``table_uri``, each step in its own commit; returns how many files each step added, rewrote or removed."""
    session = delta_spark_session(storage_options)
    make_writable(DeltaTable(table_uri, storage_options=storage_options), table_uri, session)
    path = spark_path(table_uri)
    compacted = _step(session, table_uri, "OPTIMIZE", lambda: optimize_table(session, path, key_columns))
    purged = _step(session, table_uri, "REORG TABLE APPLY (PURGE)", lambda: purge_deletion_vectors(session, path))
    hours = vacuum_retention_hours(table_uri, retention_hours)
    listing = str(max(1, session.sparkContext.defaultParallelism))
    _step(session, table_uri, "VACUUM", lambda: session.sql(f"VACUUM delta.{quote(path)} RETAIN {hours:g} HOURS"),
          settings={VACUUM_LOGGING: "true", VACUUM_LISTING_TASKS: listing})
    return {"files_added_by_optimize": compacted.get("numFilesAdded", 0),
            "files_removed_by_optimize": compacted.get("numFilesRemoved", 0),
            "files_rewritten_by_purge": purged.get("numFilesRemoved", 0),
            "files_vacuumed": _vacuumed_files(session, path)}


def optimize_table(session: SparkSession, path: str, key_columns: list[str] | None) -> DataFrame:
    """OPTIMIZE: Z-ORDER by the key, or compaction when there is no key, when a key column has a dot in its
    name (Delta resolves Z-ORDER names by splitting on dots), or when Delta collects no statistics for a key
    column (past ``delta.dataSkippingNumIndexedCols``: Delta refuses to Z-ORDER by it)."""
    from delta.tables import DeltaTable as SparkDeltaTable
    from pyspark.errors import AnalysisException

    table = SparkDeltaTable.forPath(session, path)
    if key_columns and not any("." in name for name in key_columns):
        try:
            return table.optimize().executeZOrderBy(*key_columns)
        except AnalysisException as exc:
            if ZORDER_WITHOUT_STATS not in str(exc):
                raise
            log.warning("%s: Delta keeps no statistics for key %s, so OPTIMIZE compacts instead of Z-ORDER",
                        path, key_columns)
    return table.optimize().executeCompaction()


def purge_deletion_vectors(session: SparkSession, path: str) -> DataFrame:
    """Rewrite the files that still carry deletion vectors (those OPTIMIZE left: large enough, few deleted)."""
    return session.sql(f"REORG TABLE delta.{quote(path)} APPLY (PURGE)")


def _step(session: SparkSession, table_uri: str, what: str, run: Callable[[], DataFrame],
          settings: dict[str, str] | None = None) -> dict[str, int]:
    """One maintenance commit with conflict retries; the metrics Delta returns for it (OPTIMIZE's and
    REORG's ``metrics`` struct), empty for a step that returns none."""

    def attempt(number: int) -> dict[str, int]:
        metadata = json.dumps({"lakesync.operation": what.split()[0].lower(), ATTEMPT_KEY: str(number)})
        with session_settings(session, {USER_METADATA: metadata, **(settings or {})}):
            result = run_on_delta_spark(run, what, table_uri, hint=MAINTENANCE_HINT)
            row = result.first() if "metrics" in result.columns else None
        return row["metrics"].asDict() if row is not None and row["metrics"] is not None else {}

    return commit_with_retry(attempt, what=what, table_uri=table_uri, conflicts=delta_conflicts())


def _vacuumed_files(session: SparkSession, path: str) -> int:
    """How many files the last VACUUM removed (its ``VACUUM END`` commit's metrics; 0 when it logged none)."""
    from delta.tables import DeltaTable as SparkDeltaTable

    for entry in SparkDeltaTable.forPath(session, path).history(5).collect():
        if entry["operation"] == "VACUUM END":
            return int((entry["operationMetrics"] or {}).get("numDeletedFiles", 0))
    return 0
