"""Tombstones: where a deleted key was deleted, kept in a side Delta table until a retention horizon.

The target table holds live rows only, so once a row is deleted nothing in it remembers the delete. A late
or replayed insert older than the delete would then look new and bring the row back. The tombstone table
remembers ``(key, position)`` of every delete so the sink can drop such inserts.

Location: a Delta table directory may not hold another table, so tombstones live beside the target, at
``<parent of the table>/_lakesync/tombstones/<table dir name>`` (see :func:`tombstone_uri`).

Tombstones are appended, never updated: a key deleted twice has two rows, and readers take the greatest
position. Each append carries the stream's app transaction, so a replayed batch does not append twice.
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from lakesync.core.errors import SchemaChangeError, SinkError
from lakesync.core.table_layout import DELETED_MS, POS, TS
from lakesync.sink.merge import quote
from lakesync.sink.table_scan import delta_rs_scans, scan_rows, spark_rows_with_keys
from lakesync.sink.writer import commit_with_retry


def tombstone_uri(table_uri: str) -> str:
    """The tombstone table of ``table_uri``: ``<parent>/_lakesync/tombstones/<name>``.

    Works for local paths and object-store URIs alike (``s3://bucket/lake/orders`` ->
    ``s3://bucket/lake/_lakesync/tombstones/orders``).
    """
    trimmed = table_uri.rstrip("/")
    parent, _, name = trimmed.rpartition("/")
    if not name or not parent or parent.endswith(":/"):
        raise SinkError(
            f"cannot place the tombstone table beside {table_uri!r}",
            hint="give the Delta table a path with a parent folder, e.g. /lake/orders or s3://bucket/lake/orders",
        )
    return f"{parent}/_lakesync/tombstones/{name}"


class TombstoneStore:
    """The tombstone table of one target table."""

    def __init__(self, uri: str, *, key_columns: list[str], storage_options: dict[str, str] | None = None):
        self.uri = uri
        self.key_columns = list(key_columns)
        self._storage_options = storage_options

    def _open(self) -> DeltaTable | None:
        if not DeltaTable.is_deltatable(self.uri, storage_options=self._storage_options):
            return None
        return DeltaTable(self.uri, storage_options=self._storage_options)

    def committed_batch_version(self, app_id: str) -> int | None:
        table = self._open()
        return None if table is None else table.transaction_version(app_id)

    def record(self, deletes: pa.Table, *, app_id: str, batch_version: int) -> int:
        """Append one tombstone per delete, in one commit tagged with ``(app_id, batch_version)``.

        When that batch id is already recorded (a replay after a crash between this write and the target's
        MERGE, or a batch re-planned from a restored checkpoint, possibly with more deletes), only the
        tombstones not there yet are appended, so nothing doubles and nothing the new plan holds is missed.
        The recorded version never moves backwards.
        """
        if deletes.num_rows == 0:
            return 0
        committed = self.committed_batch_version(app_id)
        if committed is not None and committed >= batch_version:
            present = self.matching(deletes).cast(deletes.select([*self.key_columns, POS]).schema)
            deletes = deletes.join(present, keys=[*self.key_columns, POS], join_type="left anti")
            batch_version = committed
            if deletes.num_rows == 0:
                return 0
        rows = deletes.select([*self.key_columns, POS]).append_column(
            pa.field(DELETED_MS, pa.int64()), deletes.column(TS).cast(pa.int64())
        )
        self._append(rows, app_id=app_id, batch_version=batch_version, new_work=committed is None or
                     committed < batch_version)
        return rows.num_rows

    def _append(self, rows: pa.Table, *, app_id: str, batch_version: int, new_work: bool) -> None:
        """The append of :meth:`record`, by delta-rs, tagged with ``(app_id, batch_version)`` (delta-rs records an
        equal version again, so the tag goes on also when the batch id was recorded before)."""
        try:
            write_deltalake(
                self.uri,
                rows,
                mode="append",
                storage_options=self._storage_options,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(app_id, batch_version)],
                    custom_metadata={"lakesync.operation": "tombstones"},
                ),
            )
        except DeltaError as exc:
            raise SinkError(f"could not record {rows.num_rows} tombstone(s) in {self.uri}: {exc}") from exc

    def matching(self, keys: pa.Table) -> pa.Table:
        """The tombstones (key columns and position) of the keys in ``keys``.

        Streams the tombstone table through delta-rs's own scan (not a pyarrow dataset, see docs/sink.md on
        the exit abort; Spark's once a key column was widened, :mod:`lakesync.sink.table_scan`) and keeps only
        matching keys, so memory holds the matches, not the whole table.
        """
        table = self._open()
        columns = [*self.key_columns, POS]
        empty = pa.table({name: pa.array([], keys.schema.field(name).type) for name in self.key_columns}
                         | {POS: pa.array([], pa.string())})
        if table is None or keys.num_rows == 0:
            return empty
        wanted = keys.select(self.key_columns)
        if not delta_rs_scans(table):  # a widened key: the semi-join runs in Spark
            found = spark_rows_with_keys(table, self._storage_options, columns=columns, keys=wanted)
            return pa.concat_tables([empty, found.cast(empty.schema)])
        matches = [empty]
        try:
            for batch in scan_rows(table, self._storage_options, columns=columns):
                chunk = pa.Table.from_batches([batch]).cast(empty.schema)
                matches.append(chunk.join(wanted, keys=self.key_columns, join_type="left semi"))
        except DeltaError as exc:
            raise SinkError(f"could not read the tombstone table {self.uri}: {exc}") from exc
        return pa.concat_tables(matches)

    def widen_columns(self, fields: list[pa.Field]) -> None:
        """Widen key columns in place, as their target table's (only delta-spark can: see
        :meth:`lakesync.sink.DeltaSink.widen_columns`)."""
        raise SchemaChangeError(f"{self.uri}: delta-rs can't widen column types in place",
                                hint="set delta.writer: delta_spark, or re-run the full load of this table")

    def clear(self) -> int:
        """Delete every tombstone (after a new snapshot, see :meth:`lakesync.sink.DeltaSink.write_snapshot`)."""
        return self._delete(older_than_ms=None)

    def purge(self, older_than_ms: int) -> int:
        """Delete tombstones of deletes that happened at the source before ``older_than_ms``.

        Only safe once no change older than that can still arrive (Kafka retention, stream lag).
        """
        return self._delete(older_than_ms=int(older_than_ms))

    def _delete(self, *, older_than_ms: int | None) -> int:
        """Delete the tombstones older than ``older_than_ms`` (all with None) by delta-rs; returns how many (0
        when there is no tombstone table yet). A lost commit race is retried on the table read again: the
        maintenance DAG compacts the side table, which removes every file a concurrent delete (a full load's
        clear) planned against."""
        if self._open() is None:
            return 0
        what = "clear the tombstones" if older_than_ms is None else "purge tombstones"
        predicate = None if older_than_ms is None else f"{quote(DELETED_MS)} < {int(older_than_ms)}"

        def delete(attempt: int) -> int:
            table = self._open()
            if table is None:
                return 0
            try:
                metrics = table.delete(predicate)
            except CommitFailedError:
                raise
            except DeltaError as exc:
                raise SinkError(f"could not {what} in {self.uri}: {exc}") from exc
            return int(metrics.get("num_deleted_rows", 0))

        return commit_with_retry(delete, what=what, table_uri=self.uri)


def tombstone_store(table_uri: str, *, key_columns: list[str], storage_options: dict[str, str] | None,
                    writer: str) -> TombstoneStore:
    """The tombstone table of ``table_uri``, written by the pipeline's ``delta.writer``."""
    if writer == "delta_spark":
        from lakesync.sink.spark_tombstones import SparkTombstoneStore

        return SparkTombstoneStore(tombstone_uri(table_uri), key_columns=key_columns, storage_options=storage_options)
    return TombstoneStore(tombstone_uri(table_uri), key_columns=key_columns, storage_options=storage_options)
