"""Comparing the source with Delta, table by table: counts, chunk checksums, and the keys that differ.

How a table is checked (:func:`validate_pipeline`):

1. **Chunks** (:mod:`~lakesync.validation.chunks`). Rows are grouped into chunks by key: a single integer
   key is cut into key ranges, any other key is bucketed by the fingerprint of the key.
2. **Checksums.** Both sides are brought to the source's Arrow schema (the source through the type map:
   :mod:`~lakesync.validation.source_reader`; Delta: :mod:`~lakesync.validation.delta_reader`), every row
   gets a 64-bit fingerprint over all its source columns that depends on that row's values alone
   (:mod:`~lakesync.validation.fingerprints` says what it covers), and each chunk gets ``(rows, XOR, sum)``.
   Fingerprinting Arrow values rather than server-side ``CRC32(CONCAT_WS(...))`` text is deliberate: the
   server's text of a FLOAT, a TIMESTAMP or a DECIMAL can't be reproduced robustly from Delta's values,
   while both sides already meet in the type map's Arrow form. Memory stays at one chunk (or one batch).
3. **Keys** (:mod:`~lakesync.validation.key_diff`). Only chunks whose checksums differ are read again, row
   by row, in groups of at most :data:`DIFF_ROWS` rows per side, and joined on the key: keys missing in
   Delta, extra in Delta, or different. The sink's tombstones (its side table,
   :mod:`lakesync.sink.tombstones`) count as deletes.
4. **No crying wolf.** The source is read inside a consistent snapshot whose binlog position P is known
   (:mod:`~lakesync.validation.snapshot`). A Delta row or tombstone whose ``_lakesync_pos`` is after P was
   changed after the snapshot: it is "in flight", explained by its position, not a mismatch. Keys that
   still differ are re-checked in later rounds: each round opens a new snapshot, waits (bounded by
   ``settle_timeout_s`` over the whole table) until the stream's applied position for the table has
   reached it (:mod:`~lakesync.validation.catch_up`), and re-reads only the chunks that held differing
   keys. What still differs after the last round is reported (:mod:`~lakesync.validation.report`), with a
   sample of keys, and the run raises :class:`~lakesync.core.errors.ValidationMismatch` (exit code 3)
   through :meth:`ValidationReport.raise_for_mismatch`. The applied position of a table with no change
   after P never reaches P, so a real difference in a quiet table costs the whole ``settle_timeout_s`` and
   is flagged ``stream_behind``.

Tables with an append-only change log (no key) are not comparable row for row and are reported as such.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
from pymysql.constants import CR

from lakesync.core.config import Pipeline
from lakesync.core.table_layout import POS, table_semantics
from lakesync.source import queries
from lakesync.source.table_reader import TableShape, describe_table, rows_per_read
from lakesync.validation.catch_up import stopped_reason, wait_for_stream
from lakesync.validation.chunks import plan_chunks
from lakesync.validation.delta_reader import DeltaSide, concat_conformed, delta_chunk_digests
from lakesync.validation.key_diff import Findings, diff_keys
from lakesync.validation.report import TableComparison, ValidationReport, utc_now
from lakesync.validation.snapshot import open_validation_snapshot
from lakesync.validation.source_reader import SourceSide, source_chunk_digests

log = logging.getLogger(__name__)

#: Rows per chunk unless the pipeline says otherwise (``snapshot.chunk_rows`` caps it too).
DEFAULT_CHUNK_ROWS = 100_000
#: Rows per side the key comparison holds in memory at once: suspect chunks are compared in groups.
DIFF_ROWS = 500_000
DEFAULT_SETTLE_TIMEOUT_S = 30.0
DEFAULT_ROUNDS = 3
#: OS errno 6 inside a server error: "Error on delete of '/tmp/#sql-temptable...'" (seen with servers sharing a
#: tmpdir); the connection lost or gone.
_TRANSIENT_ERRORS = {6, CR.CR_SERVER_GONE_ERROR, CR.CR_SERVER_LOST}

ProgressCallback = Callable[[str, str], None]
"""``(table, what is happening)``: for the CLI's progress line."""


@dataclass
class _Context:
    pipeline: Pipeline
    rounds: int
    settle_timeout_s: float
    chunk_rows: int
    fast_read: bool
    progress: ProgressCallback

    def say(self, table: str, what: str) -> None:
        self.progress(table, what)


def _semantics(pipeline: Pipeline, table: str, key_columns: Sequence[str]) -> str:
    configured = pipeline.tables.settings_for(table).semantics
    return table_semantics(configured, bool(key_columns))


def _validate_table(ctx: _Context, table: str, open_snapshot_fn: Callable[[], Any]) -> TableComparison:
    """Compare one table (see the module docstring for the rounds)."""
    pipeline = ctx.pipeline
    uri = pipeline.delta.table_uri(table)
    storage = pipeline.delta.storage_options or None
    deadline = time.monotonic() + ctx.settle_timeout_s
    result = TableComparison(table, 0, 0, started_at=utc_now())
    if not _delta_exists(uri, storage):
        result.error = f"there is no Delta table at {uri}: run the full load of {table} first"
        result.finished_at = utc_now()
        return result
    snapshot = open_snapshot_fn()
    try:
        conn = snapshot.connections[0]
        shape = describe_table(conn, pipeline.source.database, table,
                               key_columns=pipeline.tables.settings_for(table).key_columns)
        result.key_columns = list(shape.key_columns)
        result.semantics = _semantics(pipeline, table, shape.key_columns)
        if result.semantics == "append_log" or not shape.key_columns:
            return _not_comparable(result, conn, shape, uri, storage)
        with conn.cursor(pymysql.cursors.Cursor) as cursor:
            chunk_rows = min(ctx.chunk_rows, rows_per_read(shape, cursor, ctx.chunk_rows))
            plan, _ = plan_chunks(cursor, shape, chunk_rows)
        source = SourceSide(conn, shape, plan, chunk_rows, fast=ctx.fast_read)
        delta = DeltaSide(uri, storage, source.schema, plan)
        result.chunks, result.position, result.rounds = plan.count, snapshot.position.key(), 1
        if delta.missing_columns:
            result.source_rows = source_chunk_digests(source)[1]
            result.note = f"the Delta table lacks the source columns {delta.missing_columns}"
            result.mismatched_keys = max(1, result.source_rows)
            return result
        if delta.extra_columns:
            result.note = f"not compared: Delta columns the source no longer has {delta.extra_columns}"
        ctx.say(table, f"checksums of {plan.count} chunks")
        source_digests, result.source_rows = source_chunk_digests(source)
        delta_digests, result.delta_rows = delta_chunk_digests(delta, source.schema)
        suspects = {c for c in set(source_digests) | set(delta_digests)
                    if source_digests.get(c) != delta_digests.get(c)}
        result.chunks_mismatched = len(suspects)
        key_schema = pa.schema([source.schema.field(name) for name in shape.key_columns])
        group_size = max(1, DIFF_ROWS // chunk_rows)
        while suspects:
            ctx.say(table, f"round {result.rounds}: {len(suspects)} chunks differ, comparing keys")
            findings = Findings()
            ordered = sorted(suspects)
            for start in range(0, len(ordered), group_size):
                group = set(ordered[start:start + group_size])
                source_rows = concat_conformed(source.batches(group), source.schema)
                delta_rows = concat_conformed(delta.batches(group), delta.schema)
                delta_rows = pa.concat_tables([delta_rows, delta.tombstones(source_rows.select(shape.key_columns))])
                findings.add(diff_keys(source_rows, delta_rows, source.schema, list(shape.key_columns),
                                         snapshot_key=snapshot.position.key()), plan, key_schema)
            findings.fill(result)
            if not findings.recheck or result.rounds >= ctx.rounds:
                break
            suspects = findings.recheck
            snapshot.close()
            snapshot = open_snapshot_fn()
            source.conn = snapshot.connections[0]
            result.rounds += 1
            result.position = snapshot.position.key()
            ctx.say(table, f"round {result.rounds}: waiting for the stream to reach the source")
            result.stream_behind = not wait_for_stream(pipeline, table, snapshot.position.key(), deadline)
            if reason := stopped_reason(pipeline, table):
                result.note = f"the stream stopped applying {table}: {reason}"
            delta.refresh()
        return result
    finally:
        snapshot.close()
        result.finished_at = utc_now()


def _delta_exists(uri: str, storage: dict[str, str] | None) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(uri, storage_options=storage)


def _not_comparable(result: TableComparison, conn: Any, shape: TableShape, uri: str,
                    storage: dict[str, str] | None) -> TableComparison:
    from deltalake import DeltaTable

    from lakesync.sink.table_scan import scan_rows

    with conn.cursor(pymysql.cursors.Cursor) as cursor:
        queries.execute(cursor, queries.row_count(shape.database, shape.name))
        result.source_rows = int(cursor.fetchone()[0])
    log_table = DeltaTable(uri, storage_options=storage)
    names = log_table.schema().to_arrow().names
    if POS in names:
        positions = scan_rows(log_table, storage, columns=[POS]).read_all()[POS]
        result.delta_rows = len(pc.unique(positions))
        counted = "distinct positions"
    else:
        result.delta_rows = log_table.count()
        counted = "rows"
    result.comparable = False
    result.note = (f"append-only change log (no key): not comparable row for row; source {result.source_rows} "
                   f"rows, Delta {result.delta_rows} {counted}")
    return result


def _transient(exc: BaseException) -> bool:
    """A server hiccup worth one more try (a lost connection, a temporary file the server failed to
    delete), as opposed to a missing table or privilege."""
    cause = exc if isinstance(exc, pymysql.MySQLError) else exc.__cause__
    return isinstance(cause, pymysql.err.InternalError | pymysql.err.OperationalError) and bool(cause.args) \
        and cause.args[0] in _TRANSIENT_ERRORS


def _validate_with_retry(ctx: _Context, table: str, snapshot: Callable[[], Any]) -> TableComparison:
    """Validate one table, once more after a transient server error. Any failure becomes this table's
    result (status ``error``): one unreadable table must not hide the others' results."""
    try:
        return _validate_table(ctx, table, snapshot)
    except Exception as exc:
        if not _transient(exc):
            return _failed(table, exc)
        log.info("validating %s hit a transient server error, trying again: %s", table, exc)
    try:
        return _validate_table(ctx, table, snapshot)
    except Exception as exc:
        return _failed(table, exc)


def _failed(table: str, exc: Exception) -> TableComparison:
    log.warning("validating %s failed: %s", table, exc, exc_info=log.isEnabledFor(logging.DEBUG))
    return TableComparison(table, 0, 0, error=str(exc), started_at=utc_now(), finished_at=utc_now())


def validate_pipeline(pipeline: Pipeline, *, tables: Sequence[str] | None = None,
                      settle_timeout_s: float = DEFAULT_SETTLE_TIMEOUT_S, rounds: int = DEFAULT_ROUNDS,
                      chunk_rows: int | None = None, fast_read: bool = False, store: bool = True,
                      progress: ProgressCallback | None = None) -> ValidationReport:
    """Compare every selected table (or ``tables``) of ``pipeline`` with its Delta table.

    Never raises for a difference: call :meth:`ValidationReport.raise_for_mismatch`. A table that can't be
    read is reported with ``status == "error"`` and the others are still checked. With ``store`` the
    results are appended to the pipeline's validation table (:mod:`lakesync.validation.store`).
    ``fast_read`` reads the source with the full load's own reader instead of the independent plain path
    (see :class:`~lakesync.validation.source_reader.SourceSide`).
    """
    from lakesync.core.connections import mysql_connection
    from lakesync.source.schema import selected_tables
    from lakesync.source.snapshot import connect

    connection = mysql_connection(pipeline)
    database = pipeline.source.database
    report = ValidationReport(uuid.uuid4().hex, pipeline.name, utc_now())
    if tables is None:
        conn = connect(connection, database=database)
        try:
            tables = selected_tables(conn, pipeline)
        finally:
            conn.close()
    ctx = _Context(pipeline, max(1, rounds), settle_timeout_s,
                   chunk_rows or min(DEFAULT_CHUNK_ROWS, pipeline.snapshot.chunk_rows), fast_read,
                   progress or (lambda table, what: log.info("%s: %s", table, what)))

    def snapshot() -> Any:
        return open_validation_snapshot(connection, database)

    for table in tables:
        ctx.say(table, "reading")
        report.tables.append(_validate_with_retry(ctx, table, snapshot))
    report.finished_at = utc_now()
    if store:
        from lakesync.validation.store import record_run

        record_run(pipeline, report)
    return report
