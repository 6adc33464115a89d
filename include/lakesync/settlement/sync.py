"""Settlement syncs: settle one data interval of a watermarked table into Delta, in one idempotent commit.

A settlement run reads the interval's window (see :mod:`lakesync.settlement.windows`) from the source,
compares it with the Delta rows of the same window, and commits only the difference, in one MERGE:

* rows missing or different in Delta are upserted, tagged with the binlog position read *before* the
  SELECT (so a newer change the stream already applied, with a greater position, is never overwritten:
  the sink's invariant holds for settlement too);
* rows Delta has in the window that the source no longer has there are looked up by key: found rows
  (moved out of the window by a later update) are upserted, rows gone from the source are deleted.

The same path serves both kinds of table. For a table that is only settled, the first run of an interval
loads it and a re-run replaces exactly that interval's effect. For a table that is also streamed, the run
is the nightly check and repair (Lambda's batch layer): it changes only what the stream got wrong.

Every settlement commit carries the app transaction ``settlement:<table>:<interval>`` (its version counts
the runs that changed something) and the begin/end markers ``lakesync.settlement.interval_start/end`` in its
commit properties. The first run of an interval always commits, even with nothing to change, so the table
history shows every settled interval once; a re-run that finds no difference commits nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import CommitProperties, Transaction
from sqlalchemy import ColumnElement, TableClause

from lakesync.core.config import Pipeline
from lakesync.core.connections import mysql_connection
from lakesync.core.errors import ConfigError, SinkError, SourceError, ValidationMismatch
from lakesync.core.positions import MIN_KEY
from lakesync.core.table_layout import DELETE_OP, OP, POS, TS
from lakesync.core.types import ColumnSpec, arrow_schema, arrow_table_from_db_rows
from lakesync.settlement.windows import PROP_PREFIX, SettlementWindow, app_id, settlement_window
from lakesync.sink.changes import drop_superseded
from lakesync.sink.merge import merge_changes, quote
from lakesync.sink.spark_writes import delta_conflicts
from lakesync.sink.table_scan import scan_rows
from lakesync.sink.tombstones import tombstone_store
from lakesync.sink.writer import TABLE_PROPERTIES, commit_with_retry, delta_arrow_schema, with_attempt
from lakesync.source import queries
from lakesync.source.schema import read_key_columns, read_table_columns
from lakesync.source.server_checks import current_position, server_variables

#: What to do when a settlement commit failed (nothing was committed).
RERUN_HINT = ("re-run the task: a concurrent writer (the stream) may have committed first; the re-run compares "
              "again and commits only what still differs")
#: How many differing keys a result keeps for people to look at.
_SAMPLE_KEYS = 20


@dataclass
class TableSettlement:
    """What settling one table's interval did (also the task's XCom and the CLI's report row)."""

    table: str
    interval: str
    read_from: str
    read_to: str
    source_rows: int
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    delta_version: int | None = None
    run: int = 0
    position: str = MIN_KEY
    differing_keys: list[list[Any]] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return self.inserted + self.updated + self.deleted

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Source:
    """The source side of one table: its columns, key, watermark and the open connection."""

    conn: Any
    database: str
    table: str
    columns: list[ColumnSpec]
    key: list[str]
    watermark: ColumnSpec

    @cached_property
    def source_table(self) -> TableClause:
        return queries.source_table(self.database, self.table, [c.name for c in self.columns])

    def select(self, where: ColumnElement[bool]) -> pa.Table:
        statement = queries.select_rows(self.source_table, self.columns, where)
        try:
            with self.conn.cursor(pymysql.cursors.SSCursor) as cursor:
                queries.execute(cursor, statement)
                rows = cursor.fetchall()
        except pymysql.MySQLError as exc:
            raise SourceError(f"settlement read of {self.database}.{self.table} failed: {exc}") from exc
        return arrow_table_from_db_rows(self.columns, list(rows))

    def read_window(self, bounds: tuple[datetime, datetime]) -> pa.Table:
        return self.select(queries.in_window(self.source_table, self.watermark.name, *bounds))

    def read_keys(self, keys: pa.Table) -> pa.Table:
        """The current source rows for ``keys`` (a table of the key columns), in batches of 500."""
        parts = [self.select_keys(keys.slice(offset, 500)) for offset in range(0, keys.num_rows, 500)]
        return pa.concat_tables(parts) if parts else arrow_schema(self.columns).empty_table()

    def select_keys(self, keys: pa.Table) -> pa.Table:
        rows = [[row[name] for name in self.key] for row in keys.to_pylist()]
        return self.select(queries.key_in(self.source_table, self.key, rows))


def settlement_tables(pipeline: Pipeline, tables: Sequence[str]) -> list[str]:
    """Of ``tables``, those the pipeline selects and gives a watermark: the ones a settlement run covers."""
    return [t for t in tables if pipeline.tables.selects(t) and pipeline.tables.settings_for(t).watermark]


def _connect(pipeline: Pipeline) -> AbstractContextManager[Any]:
    return mysql_connection(pipeline).connect(conn_id=pipeline.source.conn_id)


def _open_source(conn: Any, pipeline: Pipeline, table: str) -> _Source:
    settings = pipeline.tables.settings_for(table)
    if settings.watermark is None:
        raise ConfigError(f"{pipeline.name}.yaml: tables.overrides.{table}.watermark is not set",
                          hint="settlement reads by watermark column; add watermark: {column: updated_at}")
    if settings.watermark.kind != "timestamp":
        raise ConfigError(
            f"{pipeline.name}.yaml: tables.overrides.{table}.watermark.kind is {settings.watermark.kind!r}; "
            "settlement by data interval needs a timestamp watermark",
            hint="use an updated_at-style column; id watermarks have no data interval to settle",
        )
    database = pipeline.source.database
    columns = read_table_columns(conn, database, table)
    by_name = {column.name: column for column in columns}
    watermark = by_name.get(settings.watermark.column)
    if watermark is None or watermark.data_type not in ("datetime", "timestamp"):
        raise ConfigError(
            f"{pipeline.name}.yaml: tables.overrides.{table}.watermark.column "
            f"{settings.watermark.column!r} is not a DATETIME/TIMESTAMP column of {database}.{table}",
        )
    key = list(settings.key_columns or read_key_columns(conn, database, table))
    if not key:
        raise ConfigError(
            f"{database}.{table} has no primary or unique key, so its intervals cannot be settled by key",
            hint=f"set tables.overrides.{table}.key_columns in {pipeline.name}.yaml",
        )
    return _Source(conn, database, table, columns, key, watermark)


def _source_bounds(source: _Source, window: SettlementWindow, pipeline: Pipeline) -> tuple[datetime, datetime]:
    """TIMESTAMP columns are compared in UTC (the session is set to UTC); DATETIME in the pipeline's zone."""
    if source.watermark.data_type == "timestamp":
        with source.conn.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
        return window.source_bounds("UTC")
    return window.source_bounds(pipeline.settlement.timezone)


def _read_position(conn: Any) -> str:
    """The binlog position before the read, or the smallest key when the source has no binlog at all.

    Only a server with ``log_bin`` off gets the smallest key: on a server with a binlog, failing to read the
    position is an error, because repairs tagged with the smallest key would never win over streamed rows."""
    if server_variables(conn, ("log_bin",)).get("log_bin", "OFF").upper() not in ("ON", "1"):
        return MIN_KEY
    return current_position(conn).key()


def _delta_window(table: DeltaTable | None, source: _Source, bounds: tuple[datetime, datetime],
                  storage_options: dict[str, str] | None) -> pa.Table:
    """Delta rows (user columns) whose watermark is in the window, read with delta-rs's own scan (Spark's once a
    column was widened: :mod:`lakesync.sink.table_scan`).

    The predicate lets delta-rs skip files by their statistics; delta-rs's reader also avoids the pyarrow
    dataset reader's abort at interpreter exit (docs/sink.md)."""
    user = [column.name for column in source.columns]
    if table is None:
        return arrow_schema(source.columns).empty_table()
    wm_type = delta_arrow_schema(table).field(source.watermark.name).type
    low, high = (_timestamp_literal(bound, wm_type) for bound in bounds)
    wm = quote(source.watermark.name)
    rows = scan_rows(table, storage_options, columns=user, predicate=f"{wm} >= {low} AND {wm} < {high}")
    return rows.read_all().cast(arrow_schema(source.columns))


def _timestamp_literal(bound: datetime, arrow_type: pa.DataType) -> str:
    """A DataFusion timestamp literal for ``bound``: UTC for zoned columns, wall clock for naive ones."""
    text = bound.isoformat(sep=" ", timespec="microseconds")
    zoned = isinstance(arrow_type, pa.TimestampType) and arrow_type.tz
    return f"TIMESTAMP '{text}Z'" if zoned else f"TIMESTAMP '{text}'"


def _flag(values: pa.Array | pa.ChunkedArray) -> pa.BooleanArray:
    """A boolean column as a mask: null counts as false."""
    whole = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    return cast(pa.BooleanArray, pc.fill_null(whole, pa.scalar(False)))


def _differences(source_rows: pa.Table, delta_rows: pa.Table, key: list[str]) -> tuple[pa.Table, pa.Table]:
    """(source rows Delta lacks or holds differently, key rows Delta has in the window but the source not).

    Compared by value with nulls equal; the key columns join the two sides."""
    columns = source_rows.column_names
    left = source_rows.append_column("__src", pa.array([True] * source_rows.num_rows, pa.bool_()))
    right = delta_rows.rename_columns([c if c in key else f"__d_{c}" for c in columns]).append_column(
        "__dst", pa.array([True] * delta_rows.num_rows, pa.bool_())
    )
    joined = left.join(right, keys=key, join_type="full outer")
    in_source, in_delta = _flag(joined.column("__src")), _flag(joined.column("__dst"))
    same = in_delta
    for name in columns:
        if name in key:
            continue
        a, b = joined.column(name).combine_chunks(), joined.column(f"__d_{name}").combine_chunks()
        same = pc.and_(same, _flag(pc.or_kleene(pc.equal(a, b), pc.and_(pc.is_null(a), pc.is_null(b)))))
    upserts = joined.filter(pc.and_(in_source, pc.invert(same))).select(columns)
    gone = joined.filter(pc.and_(in_delta, pc.invert(in_source))).select(key)
    return upserts.cast(source_rows.schema), gone


def _open_delta(uri: str, storage_options: dict[str, str]) -> DeltaTable | None:
    try:
        return DeltaTable(uri, storage_options=storage_options or None)
    except TableNotFoundError:
        return None


def _changes_table(upserts: pa.Table, deletes: pa.Table, source: _Source, position: str, ts_ms: int) -> pa.Table:
    """The rows to MERGE: user columns plus the position, op and timestamp columns of the sink's layout."""
    # Nullable: a delete row carries only its key.
    schema = pa.schema([f.with_nullable(True) for f in arrow_schema(source.columns)])
    deleted_rows = pa.Table.from_pylist(
        [{**{c.name: None for c in source.columns}, **row} for row in deletes.to_pylist()], schema=schema
    )
    rows = pa.concat_tables([upserts.cast(schema), deleted_rows])
    ops = ["r"] * upserts.num_rows + ["d"] * deletes.num_rows
    return (
        rows.append_column(POS, pa.array([position] * rows.num_rows, pa.string()))
        .append_column(OP, pa.array(ops, pa.string()))
        .append_column(TS, pa.array([ts_ms] * rows.num_rows, pa.int64()))
    )


def _commit(uri: str, pipeline: Pipeline, table: DeltaTable | None, changes: pa.Table, key: list[str],
            position: str, properties: CommitProperties) -> int:
    """One Delta commit: create the table, MERGE the changes, or (nothing changed) an empty marker commit.

    Deletes are recorded as tombstones in the sink's tombstone table first (as the sink does), and upserts
    a newer tombstone supersedes are dropped, so settlement never resurrects a row the stream deleted. The
    MERGE is the sink's own (:func:`lakesync.sink.merge.merge_changes`): a change overwrites only a row with
    an older position, so a stream commit that lands between the compare and this commit is never undone
    (``merge_changes`` by delta-rs, or with ``delta.writer: delta_spark`` its delta-spark twin
    ``lakesync.sink.spark_writes.merge_on_delta_spark``).
    A source without a binlog has no positions (all :data:`MIN_KEY`): settlement is then the table's only
    writer and may overwrite equal positions. A lost commit race is retried (:mod:`lakesync.sink.writer`).
    """
    options = pipeline.delta.storage_options or None
    is_delete = pc.equal(changes.column(OP), pa.scalar(DELETE_OP))
    deletes, upserts = changes.filter(is_delete), changes.filter(pc.invert(is_delete))
    tombstones = tombstone_store(uri, key_columns=key, storage_options=options, writer=pipeline.delta.writer)
    txn = properties.app_transactions[0]  # type: ignore[index]
    by_spark = pipeline.delta.writer == "delta_spark"

    def step(attempt: int) -> int:
        commit = with_attempt(properties, attempt)
        tombstones.record(deletes, app_id=txn.app_id, batch_version=txn.version)
        kept = drop_superseded(upserts, tombstones.matching(upserts), key)
        current = table if attempt == 1 else _open_delta(uri, pipeline.delta.storage_options)
        merged = pa.concat_tables([kept, deletes])
        write = _write_by_delta_spark if by_spark else _write_by_delta_rs
        write(uri, options, current, kept if current is None else merged, key, commit, position == MIN_KEY)
        return DeltaTable(uri, storage_options=options).version()

    conflicts = delta_conflicts() if by_spark else (CommitFailedError,)
    return commit_with_retry(step, what="settlement commit", table_uri=uri, conflicts=conflicts)


def _write_by_delta_rs(uri: str, options: dict[str, str] | None, current: DeltaTable | None, changes: pa.Table,
                       key: list[str], commit: CommitProperties, allow_equal: bool) -> None:
    """The settlement's one commit by delta-rs: the table created with the rows, the MERGE, or (nothing to
    change) an empty append that records the interval."""
    if current is None:
        write_deltalake(uri, changes, mode="append", storage_options=options, commit_properties=commit,
                        configuration=TABLE_PROPERTIES)
    elif changes.num_rows == 0:
        write_deltalake(uri, delta_arrow_schema(current).empty_table(), mode="append", storage_options=options,
                        commit_properties=commit)
    else:
        merge_changes(current, changes, key_columns=key, commit=commit, allow_equal=allow_equal)


def _write_by_delta_spark(uri: str, options: dict[str, str] | None, current: DeltaTable | None,
                          changes: pa.Table, key: list[str], commit: CommitProperties, allow_equal: bool) -> None:
    """The same commit by delta-spark (``delta.writer: delta_spark``): its app transaction and metadata as the
    session's settings for this one write (lakesync.sink.spark_writes), deletion vectors on."""
    from lakesync.sink.spark_writes import (
        TXN_APP_ID,
        TXN_VERSION,
        USER_METADATA,
        append_on_delta_spark,
        check_writable_names,
        create_on_delta_spark,
        delta_spark_session,
        make_writable,
        merge_on_delta_spark,
        run_on_delta_spark,
        session_settings,
    )

    session = delta_spark_session(options)
    txn = commit.app_transactions[0]  # type: ignore[index]
    settings = {USER_METADATA: json.dumps(commit.custom_metadata or {}, sort_keys=True),
                TXN_APP_ID: txn.app_id, TXN_VERSION: str(txn.version)}
    if current is not None:
        make_writable(current, uri, session)
    else:
        check_writable_names(changes.schema, uri)

    def write() -> None:
        with session_settings(session, settings):
            if current is None:
                create_on_delta_spark(session, uri, changes, TABLE_PROPERTIES)
            elif changes.num_rows == 0:  # the table's own columns: it keeps those the source dropped
                append_on_delta_spark(session, uri, delta_arrow_schema(current).empty_table())
            else:
                merge_on_delta_spark(session, uri, changes, key, allow_equal=allow_equal)

    run_on_delta_spark(write, "the settlement commit", uri, hint=RERUN_HINT)


def settle_table(pipeline: Pipeline, table: str, *, interval_start: datetime, interval_end: datetime,
                 conn: Any | None = None) -> TableSettlement:
    """Settle ``table``'s data interval ``[interval_start, interval_end)``; see the module docstring."""
    window = settlement_window(
        interval_start, interval_end, safety_window=timedelta(seconds=pipeline.settlement.safety_window_seconds)
    )
    if conn is None:
        with _connect(pipeline) as own:
            return settle_table(pipeline, table, interval_start=interval_start, interval_end=interval_end, conn=own)
    source = _open_source(conn, pipeline, table)
    bounds = _source_bounds(source, window, pipeline)
    position = _read_position(conn)
    source_rows = source.read_window(bounds)
    uri = pipeline.delta.table_uri(table)
    delta = _open_delta(uri, pipeline.delta.storage_options)
    options = pipeline.delta.storage_options or None
    upserts, gone = _differences(source_rows, _delta_window(delta, source, bounds, options), source.key)
    moved = source.read_keys(gone) if gone.num_rows else source_rows.schema.empty_table()
    still_there = {tuple(row[k] for k in source.key) for row in moved.select(source.key).to_pylist()}
    deletes = pa.Table.from_pylist(
        [row for row in gone.to_pylist() if tuple(row[k] for k in source.key) not in still_there],
        schema=gone.schema,
    )
    upserts = pa.concat_tables([upserts, moved.cast(upserts.schema)])
    result = TableSettlement(
        table=table, interval=window.label, read_from=bounds[0].isoformat(), read_to=bounds[1].isoformat(),
        source_rows=source_rows.num_rows, deleted=deletes.num_rows, position=position,
        differing_keys=[list(r.values()) for r in upserts.select(source.key).slice(0, _SAMPLE_KEYS).to_pylist()]
        + [list(r.values()) for r in deletes.slice(0, _SAMPLE_KEYS).to_pylist()],
    )
    txn_id = app_id(table, window)
    runs = (delta.transaction_version(txn_id) if delta is not None else None) or 0
    if upserts.num_rows == 0 and deletes.num_rows == 0 and runs > 0:
        result.run = runs
        return result  # settled before and nothing differs: a re-run changes nothing
    existing_keys = _existing_keys(delta, upserts.select(source.key), source.key, options)
    result.updated = existing_keys
    result.inserted = upserts.num_rows - existing_keys
    result.run = runs + 1
    changes = _changes_table(upserts, deletes, source, position, int(time.time() * 1000))
    properties = CommitProperties(
        custom_metadata={
            **window.commit_properties(),
            f"{PROP_PREFIX}table": table,
            f"{PROP_PREFIX}run": str(result.run),
            f"{PROP_PREFIX}position": position,
            f"{PROP_PREFIX}inserted": str(result.inserted),
            f"{PROP_PREFIX}updated": str(result.updated),
            f"{PROP_PREFIX}deleted": str(result.deleted),
        },
        app_transactions=[Transaction(txn_id, result.run)],
    )
    try:
        result.delta_version = _commit(uri, pipeline, delta, changes, source.key, position, properties)
    except (OSError, DeltaError) as exc:
        raise SinkError(
            f"settlement commit of {table} interval {window.label} to {uri} failed; nothing was committed: {exc}",
            hint=RERUN_HINT,
        ) from exc
    return result


def _existing_keys(delta: DeltaTable | None, keys: pa.Table, key: list[str],
                   storage_options: dict[str, str] | None) -> int:
    """How many of ``keys`` already have a live row in Delta (to tell updates from inserts)."""
    if delta is None or keys.num_rows == 0:
        return 0
    wanted = keys.select(key)
    return sum(
        pa.Table.from_batches([batch]).cast(wanted.schema).join(wanted, keys=key, join_type="left semi").num_rows
        for batch in scan_rows(delta, storage_options, columns=key)
    )


def validate_interval(pipeline: Pipeline, table: str, *, interval_start: datetime, interval_end: datetime,
                      conn: Any | None = None) -> dict[str, Any]:
    """Compare the interval's source rows with Delta; raise :class:`ValidationMismatch` with the keys if they differ.

    Rows the stream changed after the settlement read differ legitimately until the next run; the caller
    runs this right after :func:`settle_table`, so a mismatch here means the commit did not land as planned.
    """
    if conn is None:
        with _connect(pipeline) as own:
            return validate_interval(pipeline, table, interval_start=interval_start, interval_end=interval_end,
                                     conn=own)
    window = settlement_window(
        interval_start, interval_end, safety_window=timedelta(seconds=pipeline.settlement.safety_window_seconds)
    )
    source = _open_source(conn, pipeline, table)
    bounds = _source_bounds(source, window, pipeline)
    source_rows = source.read_window(bounds)
    delta = _open_delta(pipeline.delta.table_uri(table), pipeline.delta.storage_options)
    delta_rows = _delta_window(delta, source, bounds, pipeline.delta.storage_options or None)
    upserts, gone = _differences(source_rows, delta_rows, source.key)
    report = {"table": table, "interval": window.label, "source_rows": source_rows.num_rows,
              "delta_rows": delta_rows.num_rows, "differing": upserts.num_rows + gone.num_rows}
    if report["differing"]:
        keys = upserts.select(source.key).to_pylist() + gone.to_pylist()
        raise ValidationMismatch(
            f"{table} interval {window.label}: {report['differing']} rows differ between source and Delta "
            f"(first keys: {keys[:_SAMPLE_KEYS]})",
            hint="re-run the settlement task for this interval; if it persists, compare with `lakesync validate`",
        )
    return report


def settle_pipeline(pipeline: Pipeline, tables: Sequence[str], *, interval_start: datetime,
                    interval_end: datetime) -> list[TableSettlement]:
    """Settle every table of ``tables`` that has a watermark, one commit per table, over one connection."""
    with _connect(pipeline) as conn:
        return [
            settle_table(pipeline, table, interval_start=interval_start, interval_end=interval_end, conn=conn)
            for table in settlement_tables(pipeline, tables)
        ]
