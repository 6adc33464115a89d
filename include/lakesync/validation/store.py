"""The validation runs of a pipeline, kept as a Delta table at ``<delta root>/_lakesync/validation_runs``.

One row per table per run, appended in one commit per run by the pipeline's ``delta.writer`` (with delta-spark,
the default, ``lakesync validate`` starts a local Spark session for it when none runs), so the history of checks
lives next to the data it checked, readable by any Delta reader, and ``lakesync status`` and the Airflow view can show the last
result of each table without re-running anything. ``sample`` holds the JSON of up to
:data:`lakesync.validation.report.SAMPLE_KEYS` differing keys per kind (key values only, never whole rows).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakesync.core.config import Pipeline
from lakesync.core.errors import SinkError

if TYPE_CHECKING:
    from lakesync.validation.report import ValidationReport

RUNS_TABLE = "_lakesync/validation_runs"

_FIELDS: list[pa.Field] = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("pipeline", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("started_at", pa.timestamp("us", tz="UTC")),
    pa.field("finished_at", pa.timestamp("us", tz="UTC")),
    pa.field("status", pa.string(), nullable=False),
    pa.field("semantics", pa.string()),
    pa.field("key_columns", pa.string()),
    pa.field("source_rows", pa.int64()),
    pa.field("delta_rows", pa.int64()),
    pa.field("chunks", pa.int64()),
    pa.field("chunks_mismatched", pa.int64()),
    pa.field("rounds", pa.int64()),
    pa.field("mismatched_keys", pa.int64()),
    pa.field("in_flight_keys", pa.int64()),
    pa.field("stream_behind", pa.bool_()),
    pa.field("position", pa.string()),
    pa.field("sample", pa.string()),
    pa.field("note", pa.string()),
]
SCHEMA = pa.schema(_FIELDS)


def runs_uri(pipeline: Pipeline) -> str:
    return pipeline.delta.table_uri(RUNS_TABLE)


def _timestamp(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def report_rows(report: ValidationReport) -> pa.Table:
    """The report as rows of :data:`SCHEMA`."""
    rows = [{
        "run_id": report.run_id,
        "pipeline": report.pipeline,
        "table": result.table,
        "started_at": _timestamp(result.started_at),
        "finished_at": _timestamp(result.finished_at),
        "status": result.status,
        "semantics": result.semantics,
        "key_columns": json.dumps(result.key_columns, ensure_ascii=False),
        "source_rows": result.source_rows,
        "delta_rows": result.delta_rows,
        "chunks": result.chunks,
        "chunks_mismatched": result.chunks_mismatched,
        "rounds": result.rounds,
        "mismatched_keys": result.mismatched_keys,
        "in_flight_keys": result.in_flight_keys,
        "stream_behind": result.stream_behind,
        "position": result.position,
        "sample": json.dumps(result.sample(), ensure_ascii=False, default=str),
        "note": result.error or result.note,
    } for result in report.tables]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def record_run(pipeline: Pipeline, report: ValidationReport) -> None:
    """Append the run's rows in one commit (the table is created by the first run)."""
    from deltalake import CommitProperties, write_deltalake

    if not report.tables:
        return
    metadata = {"lakesync.operation": "validate", "lakesync.validation.run_id": report.run_id}
    storage = pipeline.delta.storage_options or None
    try:
        if pipeline.delta.writer == "delta_spark":
            _append_by_delta_spark(runs_uri(pipeline), storage, report_rows(report), metadata)
        else:
            write_deltalake(runs_uri(pipeline), report_rows(report), mode="append", storage_options=storage,
                            commit_properties=CommitProperties(custom_metadata=metadata))
    except Exception as exc:  # either writer raises several unrelated types for storage failures
        raise SinkError(f"could not record validation run {report.run_id} in {runs_uri(pipeline)}: {exc}",
                        hint="check that the Delta root is writable; the comparison itself is in the output") from exc


def _append_by_delta_spark(uri: str, storage: dict[str, str] | None, rows: pa.Table, metadata: dict[str, str]
                           ) -> None:
    """The run's append as a delta-spark commit (the first one creates the table), ``metadata`` in its
    ``userMetadata``."""
    from deltalake import DeltaTable

    from lakesync.sink.spark_writes import (
        USER_METADATA,
        append_or_create_on_delta_spark,
        delta_spark_session,
        session_settings,
    )

    session = delta_spark_session(storage)
    with session_settings(session, {USER_METADATA: json.dumps(metadata, sort_keys=True)}):
        append_or_create_on_delta_spark(session, uri, rows,
                                        exists=DeltaTable.is_deltatable(uri, storage_options=storage))


def read_runs(pipeline: Pipeline) -> pa.Table:
    """Every row recorded for this pipeline (an empty table of :data:`SCHEMA` when there is none yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(runs_uri(pipeline), storage_options=pipeline.delta.storage_options or None)
    except TableNotFoundError:
        return SCHEMA.empty_table()
    # delta-rs's own reader: pyarrow's dataset reader can abort the interpreter at exit (docs/sink.md).
    predicate = "pipeline = '" + pipeline.name + "'"  # pipeline names are identifiers (config checks them)
    rows = pa.RecordBatchReader.from_stream(table.scan(predicate=predicate)).read_all()
    return rows.select(SCHEMA.names).cast(SCHEMA)  # the scan returns string_view; the rest of us want string


def last_results(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    """Per table, its most recent validation row as a JSON-able dict (times as ISO strings)."""
    runs = read_runs(pipeline)
    if runs.num_rows == 0:
        return {}
    latest: dict[str, dict[str, Any]] = {}
    for row in runs.sort_by([("finished_at", "ascending")]).to_pylist():
        latest[row["table"]] = {
            **row,
            "started_at": row["started_at"].isoformat() if row["started_at"] else None,
            "finished_at": row["finished_at"].isoformat() if row["finished_at"] else None,
            "key_columns": json.loads(row["key_columns"] or "[]"),
            "sample": json.loads(row["sample"] or "{}"),
        }
    return latest
