"""The Delta sink: snapshot writes and exactly-once, position-versioned MERGE with delta-rs.

Target tables hold the user columns plus ``_lakesync_pos`` (position key), ``_lakesync_op`` (``r``, ``c``,
``u``) and ``_lakesync_ts_ms`` (source commit time), live rows only, with the change data feed on.

Exactly-once rests on three rules, each enforced here (docs/sink.md has the full argument):

1. a change applies to a key only if its position is greater than the stored one (the MERGE predicates);
   changes at or before the snapshot position are already in the snapshot and are dropped up front;
2. a delete leaves a tombstone, written *before* the target's MERGE, and upserts at or before a tombstone
   of their key are dropped, so a late or replayed insert never brings a deleted row back;
3. each batch's commit carries the app transaction ``(app_id, batch_version)`` and what the batch covered
   (:mod:`lakesync.sink.coverage`); a batch whose version is committed is skipped whole only when it is
   provably the same work, else applied (rules 1 and 2 make that harmless).

Concurrent writers (settlement, OPTIMIZE) are fine: a commit that loses the race is re-planned and retried
(:mod:`lakesync.sink.writer`). Run one stream per checkpoint (Spark's one query per checkpoint gives this).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.schema import Field as DeltaField

from lakesync.core.errors import ConfigError, SchemaChangeError, SinkError
from lakesync.core.positions import SourcePosition
from lakesync.core.table_layout import POS, with_lakesync_columns
from lakesync.sink import schema_evolution
from lakesync.sink.changes import (
    check_changes,
    drop_superseded,
    last_change_per_key,
    plan_changes,
)
from lakesync.sink.conform import check_not_reserved, conform
from lakesync.sink.coverage import BatchCoverage, Offsets, recorded_coverage
from lakesync.sink.merge import merge_changes, quote
from lakesync.sink.snapshot import SNAPSHOT_APP_ID, decode_snapshot, snapshot_commit
from lakesync.sink.table_scan import scan_rows
from lakesync.sink.tombstones import tombstone_store
from lakesync.sink.writer import ATTEMPT_KEY, TABLE_PROPERTIES, commit_with_retry, delta_arrow_schema

log = logging.getLogger(__name__)

Semantics = Literal["exactly_once", "append_log"]


@dataclass(frozen=True)
class ApplyResult:
    """What :meth:`DeltaSink.apply_changes` did with one batch.

    ``skipped`` is True when the batch's app transaction was already committed (a replay). ``stale``
    counts changes that could not win: duplicates in the batch, changes at or before the snapshot
    position, and upserts behind a tombstone. The ``rows_*`` come from the MERGE (or the append).
    """

    skipped: bool
    changes: int
    upserts: int = 0
    deletes: int = 0
    stale: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    table_version: int | None = None


@dataclass(frozen=True)
class BatchCommit:
    """What a batch's commit records: its app transaction ``(app_id, version)`` (None when the table already
    records that version or a later one) and its commit metadata (coverage, operation, attempt)."""

    transaction: tuple[str, int] | None
    metadata: dict[str, str]


def _commit_properties(commit: BatchCommit) -> CommitProperties:
    """``commit`` as delta-rs writes it."""
    transactions = [Transaction(*commit.transaction)] if commit.transaction else None
    return CommitProperties(app_transactions=transactions, custom_metadata=commit.metadata)


class DeltaSink:
    """Writes one lakesync table to Delta with delta-rs.

    ``semantics="exactly_once"`` merges by ``key_columns``; ``"append_log"`` (tables without a key) appends
    every change with its op and position, at-least-once, and leaves de-duplication to readers.
    """

    #: the ``delta.writer`` this class is (its tombstone table is written by the same writer)
    writer = "delta_rs"
    #: whether :meth:`widen_columns` can widen a column's type in place (delta-rs can't)
    widens_in_place = False

    def __init__(
        self,
        table_uri: str,
        *,
        key_columns: list[str],
        semantics: Semantics = "exactly_once",
        storage_options: dict[str, str] | None = None,
    ) -> None:
        if semantics not in ("exactly_once", "append_log"):
            raise ConfigError(f"unknown sink semantics {semantics!r}", hint="use exactly_once or append_log")
        if semantics == "exactly_once" and not key_columns:
            raise ConfigError(
                f"{table_uri}: exactly_once needs key columns",
                hint="give the primary key, or choose semantics append_log for tables without a key",
            )
        self.table_uri = table_uri
        self.key_columns = list(key_columns)
        self.semantics = semantics
        self._storage_options = storage_options
        self.tombstones = tombstone_store(table_uri, key_columns=self.key_columns, storage_options=storage_options,
                                          writer=self.writer)

    # -- reading the table's state ------------------------------------------------------------------------

    def _open(self) -> DeltaTable:
        try:
            return DeltaTable(self.table_uri, storage_options=self._storage_options)
        except TableNotFoundError as exc:
            raise SinkError(
                f"there is no Delta table at {self.table_uri}",
                hint="run the full load first: it creates the table",
            ) from exc

    def _exists(self) -> bool:
        return DeltaTable.is_deltatable(self.table_uri, storage_options=self._storage_options)

    def committed_batch_version(self, app_id: str) -> int | None:
        """The last batch version committed under ``app_id``, or None if none was."""
        return self._open().transaction_version(app_id)

    def snapshot_position(self) -> str | None:
        """The position key the last :meth:`write_snapshot` recorded, or None before any snapshot."""
        if not self._exists():
            return None
        version = self._open().transaction_version(SNAPSHOT_APP_ID)
        return None if version is None else decode_snapshot(version)

    def scan(self, columns: list[str] | None = None, predicate: str | None = None) -> pa.RecordBatchReader:
        """Stream the table's rows with delta-rs's own engine (with Spark where a column was widened:
        :mod:`lakesync.sink.table_scan`).

        Prefer this (or ``DeltaTable.scan``) over ``DeltaTable.to_pyarrow_table``/``to_pyarrow_dataset``:
        those run pyarrow's thread pool over a Python filesystem handler, which can abort the interpreter
        at exit with "terminate called without an active exception" (docs/sink.md).
        """
        return scan_rows(self._open(), self._storage_options, columns=columns, predicate=predicate)

    # -- snapshot -----------------------------------------------------------------------------------------

    def write_snapshot(
        self,
        batches: Iterable[pa.RecordBatch] | pa.RecordBatchReader,
        *,
        schema: pa.Schema,
        position: SourcePosition,
        snapshot_ts_ms: int,
        properties: dict[str, str] | None = None,
    ) -> int:
        """Replace the whole table with the snapshot in ONE Delta commit; returns the row count.

        Batches stream through (memory holds a few batches, not the table). Rows get ``_lakesync_pos`` =
        ``position.key()`` and op ``r``. The commit records the position twice: as the app transaction
        ``lakesync.snapshot`` (durable, read by :meth:`snapshot_position`) and in the commit metadata
        (``lakesync.snapshot.position`` / ``.token`` / ``.ts_ms``, for people reading the history).
        ``properties`` are Delta table properties (``delta.*``; delta-rs rejects other keys).
        The table's tombstones are cleared once the snapshot has committed.
        """
        self._check_user_schema(schema)
        key = position.key()
        commit = snapshot_commit(position, ts_ms=snapshot_ts_ms)
        out_schema = with_lakesync_columns(schema)
        written = 0

        def tagged() -> Iterator[pa.RecordBatch]:
            nonlocal written
            for batch in batches:
                if batch.schema != schema:
                    batch = batch.cast(schema)
                n = batch.num_rows
                written += n
                yield pa.RecordBatch.from_arrays(
                    [*batch.columns, pa.repeat(pa.scalar(key), n), pa.repeat(pa.scalar("r"), n),
                     pa.repeat(pa.scalar(snapshot_ts_ms, pa.int64()), n)],
                    schema=out_schema,
                )

        configuration = {**TABLE_PROPERTIES, **(properties or {})}
        exists = self._exists()
        if exists:
            self._ensure_properties(configuration)
        try:
            write_deltalake(
                self.table_uri,
                pa.RecordBatchReader.from_batches(out_schema, tagged()),
                mode="overwrite",
                schema_mode="overwrite" if exists else None,
                configuration=None if exists else configuration,
                storage_options=self._storage_options,
                commit_properties=commit,
            )
        except DeltaError as exc:
            raise SinkError(f"the snapshot of {self.table_uri} was not written: {exc}") from exc
        # After a snapshot at P every old tombstone is either <= P (the snapshot floor already covers it) or
        # from an older position space (failover, RESET MASTER), where it would wrongly block new changes.
        # Cleared after the commit, so a snapshot that fails leaves the tombstones as they were.
        self.tombstones.clear()
        return written

    def _check_user_schema(self, schema: pa.Schema) -> None:
        check_not_reserved(schema.names)
        missing = [name for name in self.key_columns if name not in schema.names]
        if missing:
            raise SinkError(f"the key column(s) {missing} are not in the snapshot schema {schema.names}")

    def _ensure_properties(self, configuration: dict[str, str]) -> None:
        """Set table properties an existing table lacks (a metadata-only commit before the snapshot)."""
        table = self._open()
        current = table.metadata().configuration
        needed = {name: value for name, value in configuration.items() if current.get(name) != value}
        if needed:
            table.alter.set_table_properties(needed)

    # -- changes ------------------------------------------------------------------------------------------

    def apply_changes(self, changes: pa.Table, *, app_id: str, batch_version: int,
                      offsets: Offsets | None = None) -> ApplyResult:
        """Apply one batch of changes exactly once (see the module docstring for the rules).

        ``changes`` holds user columns (a subset of the table's; deletes need only the key) plus
        ``_lakesync_pos``, ``_lakesync_op`` (c/u/d/r) and ``_lakesync_ts_ms``. ``offsets`` are the Kafka
        offset ranges the batch read (recorded with the commit, and compared on a replay).

        A batch whose ``(app_id, batch_version)`` is already committed is skipped only when that commit
        recorded the same coverage (:mod:`lakesync.sink.coverage`); otherwise it is applied, which the
        position rule makes harmless (append logs drop the positions they already hold). A batch id below
        the committed one means the checkpoint is behind the table: that is logged, and the recorded
        version never moves backwards. A commit that loses a race to a concurrent writer is re-planned
        and retried (:mod:`lakesync.sink.writer`).
        """
        def attempt(number: int) -> ApplyResult:
            return self._apply_once(changes, app_id=app_id, batch_version=batch_version, offsets=offsets,
                                    attempt=number)
        return commit_with_retry(attempt, what=f"batch {batch_version} of {app_id}", table_uri=self.table_uri,
                                 conflicts=self._commit_conflicts())

    def _commit_conflicts(self) -> tuple[type[BaseException], ...]:
        """The errors that mean a commit lost the race to a concurrent writer (re-plan and retry)."""
        return (CommitFailedError,)

    def _apply_once(self, changes: pa.Table, *, app_id: str, batch_version: int, offsets: Offsets | None,
                    attempt: int) -> ApplyResult:
        table = self._open()
        coverage = BatchCoverage.of(changes, offsets) if POS in changes.column_names else BatchCoverage.of(
            pa.table({POS: pa.array([], pa.string())}), offsets)
        committed = table.transaction_version(app_id)
        if committed is not None and committed >= batch_version:
            if committed > batch_version:
                log.warning(
                    "%s: the stream's checkpoint is behind the table's recorded progress: batch %d arrives but "
                    "batch %d is already committed under %s (a checkpoint restored from an older copy?); "
                    "batches are re-applied unless provably the same work", self.table_uri, batch_version,
                    committed, app_id)
            recorded = recorded_coverage(table, app_id, batch_version)
            if recorded is not None and recorded.same_work(coverage):
                return ApplyResult(skipped=True, changes=changes.num_rows, table_version=table.version())
            log.warning("%s: batch %d of %s was committed with other changes (%s) than it holds now (%s); "
                        "applying it", self.table_uri, batch_version, app_id,
                        "unknown" if recorded is None else f"{recorded.changes} from {recorded.first}",
                        f"{coverage.changes} from {coverage.first}")
        # The app transaction only moves forwards: delta-spark skips, silently, a commit whose version is not
        # above the recorded one, so a batch re-applied at or below it is written without one (for both writers).
        commit = BatchCommit(
            transaction=(app_id, batch_version) if committed is None or committed < batch_version else None,
            metadata={"lakesync.operation": f"apply_changes:{self.semantics}",
                      **coverage.metadata(app_id, batch_version), ATTEMPT_KEY: str(attempt)})
        self.prepare_to_write(table)
        if self.semantics == "append_log":
            return self._append(table, changes, commit)
        return self._merge(table, changes, app_id=app_id, batch_version=batch_version, commit=commit)

    def prepare_to_write(self, table: DeltaTable) -> None:
        """Before anything of a batch is written (tombstones included): delta-rs writes any lakesync table."""

    def _merge(
        self, table: DeltaTable, changes: pa.Table, *, app_id: str, batch_version: int, commit: BatchCommit
    ) -> ApplyResult:
        check_changes(changes, self.key_columns)
        target = delta_arrow_schema(table)
        source = conform(changes, target)
        snapshot = table.transaction_version(SNAPSHOT_APP_ID)
        if snapshot is not None:
            source = source.filter(pc.greater(source.column(POS), pa.scalar(decode_snapshot(snapshot))))
        plan = plan_changes(source, self.key_columns)
        # Tombstones first: if we crash before the MERGE commits, the batch is replayed (its app transaction
        # is not on the target) and the tombstones are already there; the reverse order could lose them.
        self.tombstones.record(plan.deletes, app_id=app_id, batch_version=batch_version)
        upserts = drop_superseded(plan.upserts, self.tombstones.matching(plan.upserts), self.key_columns)
        merged = pa.concat_tables([upserts, self._present(plan.deletes)])
        metrics = self._write_merge(table, merged, commit)
        return ApplyResult(
            skipped=False,
            changes=changes.num_rows,
            upserts=upserts.num_rows,
            deletes=plan.deletes.num_rows,
            stale=changes.num_rows - merged.num_rows,
            rows_inserted=metrics.get("num_target_rows_inserted", 0),
            rows_updated=metrics.get("num_target_rows_updated", 0),
            rows_deleted=metrics.get("num_target_rows_deleted", 0),
            table_version=table.version(),
        )

    def _write_merge(self, table: DeltaTable, merged: pa.Table, commit: BatchCommit) -> dict[str, Any]:
        """MERGE the batch's winning changes (one per key) in one commit, or record the batch when none is left;
        returns the MERGE's metrics (``num_target_rows_*``). ``table`` is brought up to the new version."""
        version_before = table.version()
        metrics: dict[str, Any] = {}
        properties = _commit_properties(commit)
        if merged.num_rows:
            metrics = self._execute_merge(table, merged, properties)
        if table.version() == version_before:
            self._commit_marker(table, properties)
        return metrics

    def _present(self, deletes: pa.Table) -> pa.Table:
        """The deletes whose key the table holds.

        With the change data feed on, delta-rs 1.6 turns a MERGE source row that no clause applies to (a delete
        of a key the table doesn't have, e.g. a row inserted and deleted between two batches) into an all-null
        change row that fails the table's NOT NULL check, failing the whole MERGE. Such deletes change nothing
        in the table (their tombstones are recorded separately), so they are left out of the MERGE.
        """
        if deletes.num_rows == 0:
            return deletes
        predicate = None
        if len(self.key_columns) == 1 and pa.types.is_integer(deletes.schema.field(self.key_columns[0]).type):
            keys = deletes.column(self.key_columns[0])
            bounds = pc.min_max(keys)
            predicate = (f"{quote(self.key_columns[0])} >= {bounds['min'].as_py()} AND "
                         f"{quote(self.key_columns[0])} <= {bounds['max'].as_py()}")
        existing = self.scan(columns=self.key_columns, predicate=predicate).read_all()
        existing = existing.cast(pa.schema([deletes.schema.field(name) for name in self.key_columns]))
        return deletes.join(existing, keys=self.key_columns, join_type="left semi")

    def _execute_merge(self, table: DeltaTable, source: pa.Table, commit: CommitProperties) -> dict[str, Any]:
        try:
            return merge_changes(table, source, key_columns=self.key_columns, commit=commit)
        except CommitFailedError:
            raise  # a lost commit race: commit_with_retry re-plans the batch
        except DeltaError as exc:
            raise SinkError(f"the MERGE into {self.table_uri} failed; nothing was committed: {exc}") from exc

    def _commit_marker(self, table: DeltaTable, commit: CommitProperties) -> None:
        """Record the app transaction when the batch changed no row (delta-rs skips empty commits)."""
        try:
            table.create_write_transaction([], mode="append", schema=table.schema(), commit_properties=commit)
        except CommitFailedError:
            raise
        except DeltaError as exc:
            raise SinkError(f"could not record the batch in {self.table_uri}: {exc}") from exc
        table.update_incremental()

    def _append(self, table: DeltaTable, changes: pa.Table, commit: BatchCommit) -> ApplyResult:
        check_changes(changes, [])
        rows = self._not_logged_yet(conform(changes, delta_arrow_schema(table), fill=True))
        self._write_append(table, rows, commit)
        return ApplyResult(skipped=False, changes=changes.num_rows, rows_inserted=rows.num_rows,
                           table_version=table.version())

    def _write_append(self, table: DeltaTable, rows: pa.Table, commit: BatchCommit) -> None:
        """Append ``rows`` in one commit, or record the batch when there are none; ``table`` is brought up to
        the new version."""
        version_before = table.version()
        properties = _commit_properties(commit)
        if rows.num_rows:
            try:
                write_deltalake(table, rows, mode="append", commit_properties=properties)
            except CommitFailedError:
                raise
            except DeltaError as exc:
                raise SinkError(f"the append to {self.table_uri} failed; nothing was committed: {exc}") from exc
            table.update_incremental()
        if table.version() == version_before:
            self._commit_marker(table, properties)

    def _not_logged_yet(self, rows: pa.Table) -> pa.Table:
        """One row per position, minus the positions the log already holds, in position order.

        A position identifies one row change, so a position already in the log is the same change replayed
        (a re-planned batch, a restored checkpoint, a relay resend). Only the batch's position range is read.
        """
        if rows.num_rows == 0:
            return rows
        rows = last_change_per_key(rows, [POS])
        bounds = pc.min_max(rows.column(POS))
        low, high = (str(bounds[name].as_py()).replace("'", "''") for name in ("min", "max"))
        logged = self.scan(columns=[POS], predicate=f"{quote(POS)} >= '{low}' AND {quote(POS)} <= '{high}'")
        fresh = rows.join(logged.read_all().cast(pa.schema([pa.field(POS, pa.string())])), keys=[POS],
                          join_type="left anti")
        return fresh.take(pc.sort_indices(fresh, sort_keys=[(POS, "ascending")]))

    # -- schema and housekeeping --------------------------------------------------------------------------

    def add_columns(self, fields: list[pa.Field]) -> None:
        """Add new columns (always nullable: existing rows have no value). Idempotent for DDL replays.

        A field that exists with another type is a type change, which cannot be applied in place here.
        """
        check_not_reserved([field.name for field in fields])
        table = self._open()
        current = {field.name: field for field in table.schema().fields}
        new = []
        for field in fields:
            delta_type = DeltaField.from_arrow(field.with_nullable(True)).type
            existing = current.get(field.name)
            if existing is None:
                new.append(field.with_nullable(True))
            elif repr(existing.type) != repr(delta_type):
                raise SchemaChangeError(
                    f"column {field.name!r} of {self.table_uri} is {existing.type}, the source now says "
                    f"{delta_type}",
                    hint="lakesync cannot change a column's type in place (docs/schema_changes.md); re-run "
                         "the full load of this table",
                )
        if new:
            self._commit_added_columns(table, new)

    def _commit_added_columns(self, table: DeltaTable, fields: list[pa.Field]) -> None:
        """The ADD COLUMNS commit, by delta-rs."""
        try:
            table.alter.add_columns([DeltaField.from_arrow(field) for field in fields])
        except DeltaError as exc:
            raise SchemaChangeError(f"could not add columns to {self.table_uri}: {exc}") from exc

    def make_nullable(self, names: list[str]) -> None:
        """Let columns hold NULL (see :func:`lakesync.sink.schema_evolution.not_null_columns`). Idempotent."""
        table = self._open()
        relaxed = schema_evolution.not_null_columns(table, names, keep=self.key_columns)
        if relaxed:
            self._commit_nullable(table, relaxed)

    def _commit_nullable(self, table: DeltaTable, names: list[str]) -> None:
        """The DROP NOT NULL commits, by delta-rs."""
        schema_evolution.make_nullable(table, names, uri=self.table_uri)

    def widen_columns(self, fields: list[pa.Field]) -> None:
        """Widen columns to the types of ``fields`` in place (Delta's type widening): delta-rs can't write such a
        table, so this writer refuses. The stream asks only writers that :attr:`widens_in_place`; with delta-rs a
        type change re-loads the table (docs/schema_changes.md)."""
        raise SchemaChangeError(f"{self.table_uri}: delta-rs can't widen column types in place "
                                f"({[field.name for field in fields]})",
                                hint="set delta.writer: delta_spark (it widens in place), or re-run the full load "
                                     "of this table")

    def fill_columns(self, values: dict[str, pa.Scalar], *, before_position: str) -> None:
        """Fill rows older than a DDL (see :func:`lakesync.sink.schema_evolution.fill_columns`)."""
        schema_evolution.fill_columns(self._open(), values, before_position=before_position, uri=self.table_uri)

    def purge_tombstones(self, older_than_ms: int) -> int:
        """Drop tombstones of deletes older than ``older_than_ms`` (source time); returns how many."""
        return self.tombstones.purge(older_than_ms)
