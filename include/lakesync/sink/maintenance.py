"""One table's maintenance by the pipeline's ``delta.writer``: the table, then its tombstone side table.

The table: OPTIMIZE (Z-ORDER by its key), deletion vectors purged (delta-spark) and VACUUM, by
:mod:`lakesync.sink.spark_maintenance` or delta-rs (:mod:`lakesync.sink.writer`). Then its tombstones of
deletes older than the cut-off are purged, and **the side table is maintained the same way**: every stream
batch with deletes appends one small file to it and every batch's tombstone lookup reads all of it, so without
compaction its file count, and the lookup's cost, grows with the stream's age. Once it holds
:data:`SIDE_TABLE_MIN_FILES` files it is compacted, not Z-ORDERed (the lookup reads it whole, never pruned by
key), after the purge so that the compaction rewrites only the tombstones kept. The stream's appends don't
conflict with the compaction, and the deletes that do (a purge, a full load's clear) are retried after a lost
race, as the maintenance commits are, so running beside the stream or a load fails neither.
"""

from __future__ import annotations

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from lakesync.sink.tombstones import tombstone_store, tombstone_uri

#: Prefix of the report's figures for the tombstone side table.
TOMBSTONE_TABLE = "tombstone_table_"
#: A side table is maintained once it has this many files (Delta's own auto-compaction waits for 50 small
#: files too): fewer cost the lookup little, and each maintenance step is a Spark job and a commit.
SIDE_TABLE_MIN_FILES = 50


def maintain_with_tombstones(writer: str, table_uri: str, *, key_columns: list[str] | None,
                             retention_hours: float, tombstones_before_ms: int,
                             storage_options: dict[str, str] | None = None,
                             side_table_min_files: int = SIDE_TABLE_MIN_FILES) -> dict[str, int]:
    """Maintain ``table_uri``, purge its tombstones of deletes before ``tombstones_before_ms``, then maintain
    its tombstone side table when it has at least ``side_table_min_files`` files; returns each step's file
    counts (the side table's prefixed :data:`TOMBSTONE_TABLE`, with its file count) and ``tombstones_purged``."""
    report = maintain(writer, table_uri, key_columns=key_columns, retention_hours=retention_hours,
                      storage_options=storage_options)
    store = tombstone_store(table_uri, key_columns=[], storage_options=storage_options, writer=writer)
    report["tombstones_purged"] = store.purge(tombstones_before_ms)
    side = tombstone_uri(table_uri)
    try:  # one read of the side table's log, not a check and then an open
        side_files = len(DeltaTable(side, storage_options=storage_options).file_uris())
    except TableNotFoundError:
        return report
    report[TOMBSTONE_TABLE + "files"] = side_files
    if report[TOMBSTONE_TABLE + "files"] >= side_table_min_files:
        side_steps = maintain(writer, side, key_columns=None, retention_hours=retention_hours,
                              storage_options=storage_options)
        report |= {TOMBSTONE_TABLE + step: files for step, files in side_steps.items()}
    return report


def maintain(writer: str, table_uri: str, *, key_columns: list[str] | None, retention_hours: float,
             storage_options: dict[str, str] | None = None) -> dict[str, int]:
    """OPTIMIZE (Z-ORDER by ``key_columns`` when given) and VACUUM one table by ``writer``; delta-spark also
    purges deletion vectors in between, in a Spark session of this process."""
    if writer == "delta_spark":
        from lakesync.sink.spark_maintenance import maintain_table

        return maintain_table(table_uri, key_columns=key_columns, retention_hours=retention_hours,
                              storage_options=storage_options)
    from lakesync.sink.writer import optimize, vacuum

    compacted = optimize(table_uri, storage_options=storage_options, z_order=key_columns)
    vacuumed = vacuum(table_uri, retention_hours=retention_hours, storage_options=storage_options)
    return {"files_added_by_optimize": compacted.get("numFilesAdded", 0),
            "files_removed_by_optimize": compacted.get("numFilesRemoved", 0), "files_vacuumed": len(vacuumed)}
