"""What a pipeline is doing, per table, as one JSON-able dict: ``lakesync status`` and the Airflow view.

Cheap on purpose, because the Airflow view calls it on every page load: it reads the pipeline's state files
(the full load's ``full_load.json``, the stream's ``stream_progress.json``), the Delta tables' transaction
logs (metadata: version, file count, row count and the largest ``_lakesync_pos`` from file statistics; never
a data scan), the small validation-runs table, and, unless ``relay=False``, the broker: the relay's stored
progress from its offsets topic (one short read of a compacted topic) and the stream's backlog per table
(:func:`lakesync.stream.lag.read_backlogs`: offset requests and one record per partition behind). Unless
``binlog=False`` it then asks the source for its binlog list and expiry (``SHOW BINARY LOGS``, two variables;
short timeouts), to see whether the binlog the relay needs is still there: ``"binlog"`` in the shape below.
It never reads a table.

Shape::

    {"pipeline": "demo", "database": "bank", "delta_root": "...", "generated_at": "...Z",
     "full_load": {"position": "...", "mode": "consistent", "started_at": "...", "finished_at": "..."},
     "relay": {"position": "...", "covered_from": "...", "updated_at": "...Z", "silent_seconds": 1.2,
               "backpressure": {"throttling": false, "lag_records": 0, "max_lag": 0, "since_ms": null, ...} | null}
              | {"error": "...", "backpressure": ...} (absent with relay=False),
     "binlog": {"state": "ok" | "expiring" | "purged", "needed_position": "binlog.000012:4", "needed_by": "...",
                "file": "...", "oldest_file": "...", "expire_seconds": 0 | null, "expires_in_seconds": 0.0 | null}
               | {"error": "..."} | null (absent with relay=False or binlog=False),
     "tables": [{"table": "customers", "semantics": "exactly_once", "key_columns": ["id"],
                 "full_load": {...} | null, "stream": {...} | null, "applied_position": "..." | null,
                 "delta": {...} | null, "last_validation": {...} | null, "lagging": false}]}

A table's ``stream.lag_seconds`` is how far the oldest change the stream has not applied is behind now (0
when nothing is pending, however quiet the source), ``stream.pending`` how many offsets it has still to
apply, ``stream.oldest_pending_at`` that change's commit time; all three are null when they can't be known
(``relay=False``, the broker can't be read, the stream has not committed a batch yet). ``relay.silent_seconds``
is how long ago the relay last showed life (its progress, moved by heartbeats while the source is quiet, or
its backpressure state while it waits for the stream).

``applied_position`` is :func:`lakesync.stream.progress.applied_position` (the newest source position the
table holds, from the stream's progress, Delta and the tombstones: a delete counts), computed from what the
row reads anyway plus the tombstone table's log.

``semantics`` and ``key_columns`` come from the pipeline file, else from the last validation run (which
read them from the source); ``null`` means not known yet.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakesync.core.config import Pipeline
from lakesync.core.connections import MySQLConnection
from lakesync.core.errors import LakesyncError
from lakesync.core.table_layout import POS
from lakesync.full_load.state import LoadState
from lakesync.stream.progress import StreamProgress, TableProgress, applied_from, delta_max_position
from lakesync.validation.store import last_results

if TYPE_CHECKING:
    from lakesync.stream.lag import Backlog  # Kafka's client is loaded only when the broker is read


def _iso_ms(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def delta_summary(uri: str, storage_options: dict[str, str] | None = None) -> dict[str, Any] | None:
    """Version, files, rows (tombstones included) and the largest position, from the log alone."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError:
        return None
    actions = pa.table(table.get_add_actions(flatten=True))
    max_column = f"max.{POS}"
    max_position = pc.max(actions[max_column]).as_py() if max_column in actions.column_names else None
    rows = pc.sum(actions["num_records"]).as_py() if "num_records" in actions.column_names else None
    return {"version": table.version(), "files": actions.num_rows, "rows": rows, "max_position": max_position}


def _stream_entry(progress: TableProgress, backlog: Backlog | None, now_ms: int) -> dict[str, Any]:
    return {**asdict(progress), "lag_seconds": backlog.lag_seconds(now_ms) if backlog else None,
            "pending": backlog.offsets if backlog else None,
            "oldest_pending_at": _iso_ms(backlog.oldest_ts_ms) if backlog else None,
            "last_batch_at": _iso_ms(progress.last_batch_at_ms)}


def stream_backlogs(pipeline: Pipeline, tables: list[str], *, timeout_s: float) -> dict[str, Backlog] | None:
    """Per loaded table of ``tables``, what the stream has still to apply (:func:`lakesync.stream.lag.
    table_backlogs`); None when that can't be known: the stream has not committed a batch yet, or the
    broker can't be read (the relay's entry says so)."""
    from lakesync.core.connections import kafka_client_config
    from lakesync.stream.app import checkpoint_dir
    from lakesync.stream.lag import backlog_consumer, committed_offsets, table_backlogs

    committed = committed_offsets(checkpoint_dir(pipeline))
    if committed is None or not tables:
        return None
    try:
        consumer = backlog_consumer(kafka_client_config(pipeline))
        try:
            return table_backlogs(pipeline, consumer, tables, committed, timeout=timeout_s)
        finally:
            consumer.close()
    except LakesyncError:
        return None


def relay_silence(relay: dict[str, Any], now_ms: int) -> float | None:
    """Seconds since the relay last showed life: its progress (heartbeats move it while the source is quiet)
    or, while it waits for the stream, its backpressure state; None when it never ran."""
    pressure = relay.get("backpressure") or {}
    alive = max(relay.get("updated_ms") or 0, (pressure.get("updated_ms") or 0) if pressure.get("throttling") else 0)
    return max(0.0, (now_ms - alive) / 1000) if alive else None


def relay_status(pipeline: Pipeline, *, timeout_s: float = 3.0) -> dict[str, Any]:
    """The relay's stored progress (``position``: everything before it is in Kafka; ``covered_from``: where
    it first started), or ``{"error": ...}`` when the broker can't be read, or ``{"position": None}`` when
    the relay has never stored progress."""
    from lakesync.relay.offsets import ProgressStore

    try:
        progress = ProgressStore.for_pipeline(pipeline).load(timeout=timeout_s)
    except LakesyncError as exc:
        return {"error": exc.message}
    if progress is None:
        return {"position": None, "covered_from": None, "updated_at": None}
    return {"position": progress.position.key(), "position_token": progress.position.token(),
            "covered_from": progress.covered_from.key(), "updated_at": _iso_ms(progress.updated_ms or None),
            "updated_ms": progress.updated_ms or None, "stopped": progress.stopped}


def pipeline_status(pipeline: Pipeline, *, relay: bool = True, relay_timeout_s: float = 3.0, binlog: bool = True,
                    source: MySQLConnection | None = None) -> dict[str, Any]:
    """The pipeline's state per table (see the module docstring for the shape). ``binlog`` (with ``relay``)
    adds whether the binlog the relay needs is still on the source (``source``: its connection settings,
    else the pipeline's connection id), :mod:`lakesync.monitoring.binlog_retention`."""
    from lakesync.sink.tombstones import tombstone_uri  # the sink package loads the whole Delta writer

    now_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    load = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    stream = StreamProgress.load(pipeline.pipeline_state_dir)
    validations = last_results(pipeline)
    names = set(load.tables) | set(stream.tables) | set(validations)
    names |= {name for name in pipeline.tables.overrides if pipeline.tables.selects(name)}
    storage = pipeline.delta.storage_options or None
    relay_entry = relay_status(pipeline, timeout_s=relay_timeout_s) if relay else None
    # a broker that can't be read is said once, by the relay's entry; the lag is then unknown
    backlogs = stream_backlogs(pipeline, sorted(name for name in names if load.is_done(name)),
                               timeout_s=relay_timeout_s) if relay_entry and not relay_entry.get("error") else None
    tables = []
    for name in sorted(names):
        settings = pipeline.tables.settings_for(name)
        validation = validations.get(name)
        key_columns = settings.key_columns or (validation["key_columns"] if validation else None)
        semantics = settings.semantics or (validation["semantics"] if validation else None)
        loaded = load.tables.get(name)
        progress = stream.tables.get(name)
        backlog = (backlogs or {}).get(name)
        stream_entry = _stream_entry(progress or TableProgress(), backlog, now_ms) if progress or backlog else None
        uri = pipeline.delta.table_uri(name)
        delta = delta_summary(uri, storage)
        lag = stream_entry["lag_seconds"] if stream_entry else None
        tables.append({
            "table": name,
            "semantics": semantics,
            "key_columns": key_columns,
            "full_load": None if loaded is None else {
                "status": loaded.status, "rows": loaded.rows, "position": loaded.position_key,
                "mode": loaded.mode, "delta_version": loaded.delta_version, "seconds": loaded.seconds,
                "finished_at": load.finished_at if loaded.status == "done" else None,
            },
            "stream": stream_entry,
            "applied_position": applied_from(progress, delta["max_position"] if delta else None,
                                             delta_max_position(tombstone_uri(uri), storage)),
            "delta": delta,
            "last_validation": None if validation is None else {
                key: validation[key] for key in ("run_id", "finished_at", "status", "source_rows", "delta_rows",
                                                 "mismatched_keys", "in_flight_keys", "stream_behind", "note")
            },
            "lagging": lag is not None and lag > pipeline.stream.lag_alert_seconds,
        })
    status: dict[str, Any] = {
        "pipeline": pipeline.name,
        "database": pipeline.source.database,
        "delta_root": pipeline.delta.root,
        "generated_at": _iso_ms(now_ms),
        "full_load": {"position": load.position.key() if load.position else None,
                      "position_token": load.position.token() if load.position else None,
                      "mode": load.mode, "started_at": load.started_at, "finished_at": load.finished_at},
        "tables": tables,
    }
    if relay_entry is not None:
        status["relay"] = relay_entry
        from lakesync.relay.backpressure import load_state as load_backpressure  # lakesync.relay needs Kafka

        status["relay"]["backpressure"] = load_backpressure(pipeline.pipeline_state_dir)
        status["relay"]["silent_seconds"] = relay_silence(status["relay"], now_ms)
        if binlog:
            # imported here: it needs PyMySQL, which Airflow's DAG parsing (this module's importers) must not load
            from lakesync.monitoring.binlog_retention import binlog_status

            status["binlog"] = binlog_status(pipeline, status["relay"], source=source, timeout_s=relay_timeout_s)
    return status
