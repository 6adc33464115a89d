"""The streaming app: Kafka topics of a pipeline -> versioned MERGE into its Delta tables, exactly once.

Spark Structured Streaming reads the tables' topics with lakesync's Python Kafka source (offsets in Spark's
checkpoint). Each micro-batch is decoded on the driver, reduced to the newest change per key, and merged
into each Delta table by :class:`lakesync.sink.DeltaSink` with the app transaction ``(stream id, batch id)``
in the same commit, so a batch replayed after a crash between the Delta commit and the checkpoint is
skipped. Exactly-once does not depend on Kafka: every change carries its source position and the sink
applies a change only when it is newer than what the row holds.

The stream id is generated when the checkpoint folder is created and kept inside it: a new checkpoint is a
new stream, whose batch ids start again at 0 without colliding with the old stream's app transactions.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from lakesync.core import errors
from lakesync.core.config import Pipeline
from lakesync.core.connections import kafka_client_config
from lakesync.core.errors import ConfigError, LakesyncError, SchemaChangeError
from lakesync.core.table_layout import table_semantics
from lakesync.events.envelope import SCHEMA_TOPIC_TABLE, SchemaChangeEvent
from lakesync.full_load.state import LoadState
from lakesync.stream.decode import TableChanges, decode_batch, user_schema
from lakesync.stream.handoff import check_coverage, starting_offsets
from lakesync.stream.progress import StreamProgress
from lakesync.stream.schema_changes import plan_schema_change
from lakesync.stream.topic_identity import check_topic_identity, topic_ids

log = logging.getLogger(__name__)

STREAM_ID_FILE = "lakesync_stream_id"


@dataclass(frozen=True)
class StreamedTable:
    name: str
    topic: str
    uri: str
    key_columns: list[str]
    semantics: str
    handoff_key: str


@dataclass
class StreamRunSummary:
    batches: int = 0
    changes: int = 0
    tables: dict[str, int] = field(default_factory=dict)


def checkpoint_dir(pipeline: Pipeline) -> Path:
    return pipeline.pipeline_state_dir / "checkpoints" / "stream"


def stream_id(checkpoint: Path) -> str:
    """The id of the stream that owns ``checkpoint`` (created with it)."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    id_file = checkpoint / STREAM_ID_FILE
    if not id_file.exists() or not id_file.read_text().strip():
        # written whole or not at all: a crash here must not leave an empty id (a shared app id)
        tmp = id_file.with_suffix(".tmp")
        tmp.write_text(uuid.uuid4().hex)
        tmp.replace(id_file)
    return id_file.read_text().strip()


def has_committed_batch(checkpoint: Path) -> bool:
    """Whether Spark committed a batch in ``checkpoint``.

    Until the first batch is committed, a restarted query plans batch 0 again from the source's
    ``initialOffset()``, even when ``offsets/0`` was written before a crash. So the handoff offsets must be
    given again on every start until then: without them the source would start at ``latest`` and skip the
    changes between the full load and the crash.
    """
    commits = checkpoint / "commits"
    return commits.exists() and any(entry.name.isdigit() for entry in commits.iterdir())


def streamed_tables(pipeline: Pipeline, *, only: list[str] | None = None) -> list[StreamedTable]:
    """The tables whose full load finished: only those can be streamed (they have a handoff position)."""
    state = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    tables = []
    for name, table_state in sorted(state.tables.items()):
        if only and name not in only:
            continue
        if table_state.status != "done" or not table_state.position_key or not pipeline.tables.selects(name):
            continue
        uri = pipeline.delta.table_uri(name)
        settings = pipeline.tables.settings_for(name)
        key_columns = list(settings.key_columns or table_state.key_columns)
        tables.append(StreamedTable(
            name=name,
            topic=pipeline.topic(name),
            uri=uri,
            key_columns=key_columns,
            semantics=table_semantics(settings.semantics, bool(key_columns)),
            handoff_key=table_state.position_key,
        ))
    if not tables:
        raise ConfigError(
            f"pipeline {pipeline.name!r} has no fully loaded tables to stream",
            hint=f"run the full load first: `lakesync snapshot --pipeline {pipeline.name}`",
        )
    return tables


def _delta_schema(uri: str, storage_options: dict[str, str] | None) -> pa.Schema:
    from deltalake import DeltaTable

    return pa.schema(DeltaTable(uri, storage_options=storage_options or None).schema().to_arrow())


class BatchApplier:
    """The ``foreachBatch`` function: decode, then one versioned MERGE per table."""

    def __init__(self, pipeline: Pipeline, tables: list[StreamedTable], app_id: str) -> None:
        from lakesync.sink import DeltaSink

        self.pipeline = pipeline
        self.app_id = app_id
        self.by_topic = {t.topic: t for t in tables}
        self.schema_topic = pipeline.topic(SCHEMA_TOPIC_TABLE)
        self.sinks = {
            t.name: DeltaSink(t.uri, key_columns=t.key_columns, semantics=t.semantics,  # type: ignore[arg-type]
                              storage_options=pipeline.delta.storage_options or None)
            for t in tables
        }
        self.schemas = {t.name: _delta_schema(t.uri, pipeline.delta.storage_options) for t in tables}
        self.progress = StreamProgress.load(pipeline.pipeline_state_dir)
        self.summary = StreamRunSummary()

    def __call__(self, batch_df, batch_id: int) -> None:
        batch = decode_batch(batch_df.toArrow(), {topic: t.name for topic, t in self.by_topic.items()},
                             schema_topic=self.schema_topic)
        stop_at = self._apply_schema_changes(batch.schema_changes)
        for table_name, table_changes in batch.tables.items():
            if self._stopped(table_name):
                continue
            if table_name in stop_at:  # changes after a DDL the table can't follow are not applied
                table_changes.events = [e for e in table_changes.events if e.position.key() < stop_at[table_name][0]]
            if table_changes.events:
                self._apply(table_name, table_changes, batch_id)
        for table_name, (_, reason) in stop_at.items():
            self._stop(table_name, reason, batch_id)
        self.summary.batches += 1
        self.progress.save(self.pipeline.pipeline_state_dir)

    def _stopped(self, table_name: str) -> bool:
        progress = self.progress.tables.get(table_name)
        return bool(progress and progress.stopped_reason)

    def _stop(self, table_name: str, reason: str, batch_id: int) -> None:
        log.error("table %s stopped: %s", table_name, reason)
        self.progress.record(table_name, batch_id=batch_id, rows=0, position=None, source_ts_ms=None)
        self.progress.tables[table_name].stopped_reason = reason

    def _apply_schema_changes(self, events: list[SchemaChangeEvent]) -> dict[str, tuple[str, str]]:
        """Add columns now; return, per table that must stop, (position key of the DDL, reason)."""
        stop_at: dict[str, tuple[str, str]] = {}
        handoff = {t.name: t.handoff_key for t in self.by_topic.values()}
        for event in sorted(events, key=lambda e: e.position):
            table = event.table
            key = event.position.key()
            if table not in self.sinks or self._stopped(table) or table in stop_at or key <= handoff[table]:
                continue  # not streamed, already stopped, or already part of the full load's schema
            action = plan_schema_change(event, user_schema(self.schemas[table]), pipeline=self.pipeline.name)
            if action.stop_reason:
                stop_at[table] = (key, action.stop_reason)
            elif action.add:
                self.sinks[table].add_columns(action.add)
                self.schemas[table] = _delta_schema(self.sinks[table].table_uri, self.pipeline.delta.storage_options)
                log.info("table %s: added columns %s (%s)", table, [f.name for f in action.add], event.ddl)
        return stop_at

    def _apply(self, table_name: str, table_changes: TableChanges, batch_id: int) -> None:
        changes = table_changes.to_arrow(user_schema(self.schemas[table_name]))
        if table_changes.new_columns:
            log.warning("table %s: change events carry columns %s the Delta table lacks (no schema event yet); "
                        "they are not stored", table_name, sorted(table_changes.new_columns))
        try:
            result = self.sinks[table_name].apply_changes(changes, app_id=self.app_id, batch_version=batch_id)
        except SchemaChangeError as exc:
            self._stop(table_name, str(exc), batch_id)
            return
        if result.skipped:  # replayed after a crash before Spark's checkpoint: applied and counted already
            log.info("table %s: batch %d was already committed to Delta; skipped", table_name, batch_id)
            return
        newest = max(table_changes.events, key=lambda event: event.position)
        self.progress.record(table_name, batch_id=batch_id, rows=changes.num_rows,
                             position=newest.position.key(), source_ts_ms=newest.ts_ms)
        self.summary.tables[table_name] = self.summary.tables.get(table_name, 0) + changes.num_rows
        self.summary.changes += changes.num_rows


def run_stream(pipeline: Pipeline, *, once: bool = True, tables: list[str] | None = None, spark=None,
               timeout_seconds: float | None = None) -> StreamRunSummary:
    """Run the stream: ``once`` processes what is in Kafka now and returns (availableNow); otherwise it runs
    with the pipeline's trigger interval until stopped (or ``timeout_seconds``)."""
    from lakesync.kafka import spark_source as kafka_source
    from lakesync.kafka.offsets import offset_consumer
    from lakesync.relay import covered_range
    from lakesync.spark.session import build_spark_session

    selected = streamed_tables(pipeline, only=tables)
    client = kafka_client_config(pipeline)
    checkpoint = checkpoint_dir(pipeline)
    fresh = not has_committed_batch(checkpoint)
    app_id = f"lakesync-stream-{stream_id(checkpoint)}"
    options = {f"kafka.{key}": value for key, value in client.items()}
    schema_topic = pipeline.topic(SCHEMA_TOPIC_TABLE)
    topics = [*(t.topic for t in selected), schema_topic]
    options["subscribe"] = ",".join(topics)
    if pipeline.stream.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(pipeline.stream.max_offsets_per_trigger)
    if fresh:
        covered = covered_range(pipeline)
        check_coverage(pipeline.name, {t.name: t.handoff_key for t in selected}, covered[0] if covered else None)
        consumer = offset_consumer(client)
        try:
            topic_keys = {t.topic: t.handoff_key for t in selected}
            topic_keys[schema_topic] = min(t.handoff_key for t in selected)
            offsets = starting_offsets(consumer, topic_keys)
        finally:
            consumer.close()
        options["startingOffsets"] = json.dumps(offsets)
        log.info("new stream %s starts at the handoff offsets %s", app_id, offsets)
    else:
        log.info("stream %s resumes from its checkpoint %s", app_id, checkpoint)

    check_topic_identity(checkpoint, topic_ids(client, topics), pipeline=pipeline.name, fresh=fresh)

    session = spark or build_spark_session(f"lakesync-stream-{pipeline.name}")
    kafka_source.register(session)
    applier = BatchApplier(pipeline, selected, app_id)
    writer = (session.readStream.format(kafka_source.SOURCE_NAME).options(**options).load()
              .writeStream.foreachBatch(applier).option("checkpointLocation", str(checkpoint)))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(
        processingTime=f"{pipeline.stream.trigger_seconds} seconds")
    query = writer.start()
    try:
        query.awaitTermination(timeout_seconds) if timeout_seconds else query.awaitTermination()
    except Exception as exc:  # Spark's StreamingQueryException wraps whatever failed inside the query
        raise stream_failure(pipeline.name, exc) from exc
    finally:
        if query.isActive:
            query.stop()
    if query.exception():
        raise stream_failure(pipeline.name, query.exception())
    return applier.summary


_WRAPPED_ERROR = re.compile(r"lakesync\.errors\.(?P<kind>\w+): (?P<message>.*?)(?:\n\s*hint: (?P<hint>[^\n]*))?\n", re.S)


def stream_failure(pipeline_name: str, exc: object) -> LakesyncError:
    """The lakesync error a failed query carries (a GapError raised in the Kafka source, a SinkError in a
    batch) as itself, instead of Spark's wrapper with the JVM stack; anything else with its first line."""
    text = str(exc)
    found = _WRAPPED_ERROR.search(text + "\n")
    if found:
        kind = getattr(errors, found["kind"], LakesyncError)
        if isinstance(kind, type) and issubclass(kind, LakesyncError):
            return kind(f"the stream of pipeline {pipeline_name!r} failed: {found['message'].strip()}",
                        hint=found["hint"])
    first = next((line for line in text.splitlines() if line.strip()), text)
    return LakesyncError(f"the stream of pipeline {pipeline_name!r} failed: {first[:2000]}",
                         hint="run with --debug for Spark's full error")
