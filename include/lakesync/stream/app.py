"""The streaming app: Kafka topics of a pipeline -> versioned MERGE into its Delta tables, exactly once.

Spark Structured Streaming reads the tables' topics with Spark's Kafka source (offsets in Spark's checkpoint).
Each micro-batch's records are decoded and reduced to the newest change per key on the executors
(:mod:`lakesync.stream.sql_decode`, :mod:`lakesync.stream.reduce`); the driver receives only the reduced rows
and merges them into each Delta table (``delta.writer``: :mod:`lakesync.delta.writer`) with the app
transaction ``(stream id, batch id)`` in the same commit, so a batch replayed after a crash between the Delta commit and the checkpoint is
skipped. Exactly-once does not depend on Kafka: every change carries its source position and the sink
applies a change only when it is newer than what the row holds.

The stream id is generated when the checkpoint folder is created and kept inside it: a new checkpoint is a
new stream, whose batch ids start again at 0 without colliding with the old stream's app transactions.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakesync.core import errors
from lakesync.core.concurrency import run_concurrently
from lakesync.core.config import Pipeline
from lakesync.core.connections import kafka_client_config
from lakesync.core.errors import ConfigError, LakesyncError, SchemaChangeError
from lakesync.core.memory import release_free_memory
from lakesync.core.state_files import write_text_atomically
from lakesync.core.table_layout import POS, table_semantics
from lakesync.events.envelope import SCHEMA_TOPIC_TABLE, SchemaChangeEvent
from lakesync.full_load.state import LoadState, TableLoad, utc_now
from lakesync.kafka import spark_options
from lakesync.monitoring.stream_monitor import StreamMonitor
from lakesync.stream.columnar_decode import DecodePlan, newest
from lakesync.stream.consumed import ConsumedMarks
from lakesync.stream.data_loss import check_nothing_deleted
from lakesync.stream.decode import DecodedBatch, user_schema
from lakesync.stream.handoff import check_handoff_coverage, starting_offsets
from lakesync.stream.kafka_reader import (
    SPARK_READER,
    CarriedOffsets,
    batch_in_flight_written,
    checkpoint_reader,
    prepare_checkpoint,
    record_reader,
)
from lakesync.stream.lag import batch_topics, committed_offsets, planned_offsets
from lakesync.stream.new_tables import Arrival, arrivals, departed, join, not_synced_note, older_tables
from lakesync.stream.progress import StreamProgress, TableProgress
from lakesync.stream.reduce import (
    ReducedBatch,
    ReducedTable,
    ReducePlan,
    run_records_on_executors,
)
from lakesync.stream.schema_changes import (
    columns_added_in_events,
    new_snapshot_in_events,
    plan_schema_change,
    resnapshot_note,
)
from lakesync.stream.topic_identity import check_topic_identity, topic_ids

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from pyspark.sql import DataFrame

    from lakesync.sink import ApplyResult

log = logging.getLogger(__name__)

STREAM_ID_FILE = "lakesync_stream_id"
#: what a batch of a query being restarted for new tables raises (never written: see BatchApplier.close)
RESTARTING = "the stream's query is restarting to read the topics of new tables"
#: what Spark's Kafka source says when ``startingOffsets`` do not name every partition of the topics its pattern
#: matched: a topic the relay created after the offsets were computed, before the query asked for them
UNNAMED_PARTITIONS = "you must specify all TopicPartitions"
#: how many times a query is started again with new starting offsets for topics created while it started
OFFSET_RESTARTS = 5


class _TopicCreatedWhileStarting(Exception):
    """A new query's starting offsets missed a topic created while it started; ``failure`` is what is raised
    when starting again does not help."""

    def __init__(self, failure: LakesyncError) -> None:
        super().__init__(failure.message)
        self.failure = failure


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
        write_text_atomically(id_file, uuid.uuid4().hex)
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
    tables = [streamed_table(pipeline, name, table_state) for name, table_state in sorted(state.tables.items())
              if (not only or name in only) and table_state.status == "done" and table_state.position_key
              and pipeline.tables.selects(name)]
    if not tables:
        raise ConfigError(
            f"pipeline {pipeline.name!r} has no fully loaded tables to stream",
            hint=f"run the full load first: `lakesync snapshot --pipeline {pipeline.name}`",
        )
    return tables


def streamed_table(pipeline: Pipeline, name: str, loaded: TableLoad) -> StreamedTable:
    """``name`` as the stream follows it from its (finished) load: its topic, key and handoff position."""
    assert loaded.position_key is not None
    settings = pipeline.tables.settings_for(name)
    key_columns = list(settings.key_columns or loaded.key_columns)
    return StreamedTable(name=name, topic=pipeline.topic(name), uri=pipeline.delta.table_uri(name),
                         key_columns=key_columns, semantics=table_semantics(settings.semantics, bool(key_columns)),
                         handoff_key=loaded.position_key)


def _delta_schema(uri: str, storage_options: dict[str, str] | None) -> pa.Schema:
    from deltalake import DeltaTable

    from lakesync.sink.writer import delta_arrow_schema

    return delta_arrow_schema(DeltaTable(uri, storage_options=storage_options or None))


@dataclass(frozen=True)
class _Stop:
    """A DDL a table can't follow in place: its position key, why, and whether a re-load brings it back."""

    key: str
    reason: str
    reload: bool


def _sink(pipeline: Pipeline, table: StreamedTable):
    """The sink of ``table``: its batches committed by delta-rs, or by delta-spark (``delta.writer``)."""
    from lakesync.sink import DeltaSink

    sink_class = DeltaSink
    if pipeline.delta.writer == "delta_spark":
        from lakesync.sink.spark_writes import SparkDeltaSink

        sink_class = SparkDeltaSink
    return sink_class(table.uri, key_columns=table.key_columns, semantics=table.semantics,  # type: ignore[arg-type]
                      storage_options=pipeline.delta.storage_options or None)


#: How a micro-batch of the query's source becomes its reduced changes (the reader's half: reduce.py).
ReadBatch = Callable[["DataFrame", ReducePlan], ReducedBatch]


class BatchApplier:
    """The ``foreachBatch`` function: decode and reduce on the executors (``read_batch``), then one versioned
    MERGE per table. Spark's Kafka source may give a table's changes from before its handoff (a topic new to
    the checkpoint starts at its first record: stream/kafka_reader.py); they are left out by position."""

    def __init__(self, pipeline: Pipeline, tables: list[StreamedTable], app_id: str, read_batch: ReadBatch, *,
                 watch_new_tables: bool = True, deferred: Sequence[str] = ()) -> None:
        self.pipeline = pipeline
        self.app_id = app_id
        self.read_batch = read_batch
        self.by_topic = {t.topic: t for t in tables}
        self.schema_topic = pipeline.topic(SCHEMA_TOPIC_TABLE)
        self.sinks = {t.name: _sink(pipeline, t) for t in tables}
        self.schemas = {t.name: _delta_schema(t.uri, pipeline.delta.storage_options) for t in tables}
        self.progress = StreamProgress.load(pipeline.pipeline_state_dir)
        self.summary = StreamRunSummary()
        self.monitor = StreamMonitor(pipeline, checkpoint_dir(pipeline))
        self.consumed = ConsumedMarks(pipeline)
        #: whether selected tables that appear after the load are looked for (not with ``--tables``)
        self.watch_new_tables = watch_new_tables
        #: tables that joined in this query's batches: the query must be restarted to read their topics
        self.joined: list[str] = []
        #: tables that joined while the checkpoint had a batch in flight: they join once this query replayed it
        self.deferred = list(deferred)
        #: topics Spark SQL's decode leaves to the Python path in this query (records not the relay's events)
        self.python_topics: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._looked_for_older = False
        streamed = {table.name for table in tables}
        for name, progress in self.progress.tables.items():  # streamed now, or no longer wanted
            if name in streamed or not pipeline.tables.selects(name):
                progress.not_synced = None

    def close(self) -> None:
        """Run no batch any more (the query is about to be stopped and started again with new topics): wait
        for the batch in flight, then refuse the next one before it writes anything."""
        with self._lock:
            self._closed = True

    def __call__(self, batch_df, batch_id: int) -> None:
        with self._lock:
            if self._closed:
                raise LakesyncError(RESTARTING)
            self._run_batch(batch_df, batch_id)
            if self.deferred and not self.joined:  # the batch in flight is replayed: restart with their topics
                self.joined = list(self.deferred)

    def _run_batch(self, batch_df, batch_id: int) -> None:
        started = time.monotonic()
        self._resume_reloaded()
        topics_read = batch_topics(checkpoint_dir(self.pipeline), batch_id)
        batch = self.read_batch(batch_df, self.plan({}, topics_read))
        self._note_not_relay_topics(batch.not_relay_topics)
        decoded = time.monotonic()
        schemas = dict(self.schemas)
        stop_at, fills = self._apply_schema_changes(batch.schema_changes)
        for table_name, stop in self._debezium_stops(batch.raw).items():
            if table_name not in stop_at or stop.key < stop_at[table_name].key:
                stop_at[table_name] = stop
        stop_before = {table: stop.key for table, stop in stop_at.items()}
        if stop_at or schemas != self.schemas:  # rare: decode again with the new columns, or up to the stop
            batch = self.read_batch(batch_df, self.plan(stop_before, topics_read))
        handoffs = {t.name: t.handoff_key for t in self.by_topic.values()}
        batch.add_raw({name: user_schema(schema) for name, schema in self.schemas.items()}, stop_before,
                      handoffs, handoffs)
        self._record_skipped(batch, stop_before)
        self._apply(batch.tables, batch_id)
        for table_name, table_fills in fills.items():
            if not self._stopped(table_name) and table_name not in stop_at:
                for ddl_key, values in table_fills:  # after the MERGE: rows changed before the DDL get it too
                    try:
                        self.sinks[table_name].fill_columns(values, before_position=ddl_key)
                    except SchemaChangeError as exc:
                        stop_at[table_name] = _Stop(ddl_key, f"{exc.message}; {self._note(table_name)}",
                                                    reload=True)
                        break
        for table_name, stop in stop_at.items():
            if stop.reload and self.pipeline.stream.reload_on_schema_change:
                self._reload(table_name, stop, batch_id)
            else:
                self._stop(table_name, stop.reason, batch_id, at=stop.key)
        log.info("batch %d: %d changes read, decoded and reduced to %d rows on the executors in %.2f s; "
                 "applied on the driver in %.2f s", batch_id, sum(t.changes for t in batch.tables.values()),
                 sum(t.rows.num_rows for t in batch.tables.values()), decoded - started, time.monotonic() - decoded)
        del batch
        release_free_memory()  # the executors read the next batch meanwhile: don't hold this MERGE's peak
        self.summary.batches += 1
        applied = planned_offsets(checkpoint_dir(self.pipeline), batch_id)
        if applied is not None:
            self.consumed.after_batch(applied, {t.name: t.topic for t in self.by_topic.values()
                                                if not self._stopped(t.name)}, self.progress)
        self.progress.save(self.pipeline.pipeline_state_dir)
        self.monitor.batch(batch_id, self.progress, time.monotonic() - started, sorted(self.sinks))

    def _note(self, name: str) -> str:
        return resnapshot_note(self.pipeline.name, name)

    def _table(self, name: str) -> StreamedTable:
        return next(t for t in self.by_topic.values() if t.name == name)

    def _reload(self, table_name: str, stop: _Stop, batch_id: int) -> None:
        """Load the table again now (its own full load, at a position after every change of this batch), then
        stream it from there. The stream waits meanwhile; a load that fails stops just this table."""
        from lakesync.full_load.load import FullLoad

        log.warning("table %s: re-loading it, as the source changed in a way Delta can't follow in place: %s",
                    table_name, stop.reason)
        try:
            FullLoad(self.pipeline, tables=[table_name], restart=True).run()
        except Exception as exc:  # whatever failed, only this table may stop
            detail = exc.message if isinstance(exc, LakesyncError) else f"{type(exc).__name__}: {exc}"
            self._stop(table_name, f"{stop.reason} (the automatic re-load failed: {detail[:500]})", batch_id,
                       at=stop.key)
            return
        entry = LoadState.for_pipeline_dir(self.pipeline.pipeline_state_dir).tables[table_name]
        self._adopt_load(table_name, entry)
        progress = self.progress.tables.setdefault(table_name, TableProgress())
        progress.last_reload = (f"{utc_now()}: {table_name} re-loaded at {entry.position_key} after "
                                f"{stop.reason.split('; re-run')[0]}")
        progress.skipped_through = None
        log.warning("table %s re-loaded at %s; the stream goes on from there", table_name, entry.position_key)

    def _adopt_load(self, name: str, entry: TableLoad) -> None:
        """Stream ``name`` from a (new) load on: its position, schema and key."""
        table = streamed_table(self.pipeline, name, entry)
        self.by_topic[table.topic] = table
        self.sinks[name] = _sink(self.pipeline, table)
        self.schemas[name] = _delta_schema(table.uri, self.pipeline.delta.storage_options)

    def _note_not_relay_topics(self, topics: set[str]) -> None:
        """Topics whose records are not the relay's events (Debezium's) go the Python way for the rest of the
        query: Spark SQL's decode would fail over on every batch."""
        for topic in sorted(topics - self.python_topics):
            log.warning("topic %s carries records other than the relay's events (Debezium's?): the stream decodes "
                        "it with the Python decode from now on (stream.decode: python avoids the first try)", topic)
        self.python_topics |= topics

    def plan(self, stop_before: dict[str, str], topics_read: frozenset[str] | None = None) -> ReducePlan:
        """What the executors decode and reduce: the tables not stopped, with their current schemas;
        ``topics_read``: the topics with records in the batch, when known (:func:`batch_topics`)."""
        live = {name for name in self.sinks if not self._stopped(name)}
        handoffs = {t.name: t.handoff_key for t in self.by_topic.values() if t.name in live}
        decode = DecodePlan(
            topic_tables={topic: t.name for topic, t in self.by_topic.items() if t.name in live},
            schemas={name: user_schema(self.schemas[name]) for name in live},
            schema_topic=self.schema_topic,
            stop_before=stop_before,
            handoffs=handoffs,
            read_from=dict(handoffs),
        )
        keys = {t.name: list(t.key_columns) for t in self.by_topic.values()
                if t.name in live and t.semantics == "exactly_once" and t.key_columns}
        watch = frozenset(t.topic for t in self.by_topic.values() if t.name not in live or t.name in stop_before)
        return ReducePlan(decode, keys, watch, topics_read, frozenset(self.python_topics))

    def _stopped(self, table_name: str) -> bool:
        progress = self.progress.tables.get(table_name)
        return bool(progress and progress.stopped_reason)

    def _stop(self, table_name: str, reason: str, batch_id: int, *, at: str) -> None:
        log.error("table %s stopped: %s", table_name, reason)
        self.progress.record(table_name, batch_id=batch_id, rows=0, position=None, source_ts_ms=None)
        self.progress.tables[table_name].stopped_reason = reason
        self.progress.tables[table_name].stopped_at = at

    def _record_skipped(self, batch: ReducedBatch, stop_before: dict[str, str]) -> None:
        """Remember the newest change a stopped table did not get (a re-load older than it can't resume it):
        the newest position per watched topic, found on the executors while reading the batch."""
        names = {name for name in self.sinks if self._stopped(name)} | set(stop_before)
        topics = {t.topic: t.name for t in self.by_topic.values() if t.name in names}
        for topic, newest_key in batch.newest.items():
            name = topics.get(topic)
            if name and newest_key >= stop_before.get(name, ""):
                progress = self.progress.tables.setdefault(name, TableProgress())
                progress.skipped_through = max(newest_key, progress.skipped_through or newest_key)

    def _resume_reloaded(self) -> None:
        """Resume each stopped table that was loaded again after it stopped (the command its message gives):
        from the new load's position on, with the new load's schema and key."""
        stopped = [name for name in self.sinks if self._stopped(name)]
        if not stopped:
            return
        state = LoadState.for_pipeline_dir(self.pipeline.pipeline_state_dir)
        for name in stopped:
            entry, progress = state.tables.get(name), self.progress.tables[name]
            if entry is None or entry.status != "done" or not progress.reloaded_by(entry.position_key):
                continue
            if progress.skipped_through and progress.skipped_through > (entry.position_key or ""):
                progress.stopped_at = progress.skipped_through
                progress.stopped_reason = (
                    f"table {name} was re-loaded while the stream went on past the load's position, so changes "
                    f"after it were skipped; stop the stream, then {self._note(name)}")
                log.error("table %s stays stopped: %s", name, progress.stopped_reason)
                continue
            self._adopt_load(name, entry)
            progress.stopped_reason = progress.stopped_at = progress.skipped_through = None
            log.warning("table %s resumes: it was re-loaded at %s after it stopped", name, entry.position_key)

    def _apply_schema_changes(self, events: list[SchemaChangeEvent]
                              ) -> tuple[dict[str, _Stop], dict[str, list[tuple[str, dict[str, pa.Scalar]]]]]:
        """Evolve the Delta schemas now. Returns the tables that must stop (or be re-loaded) at a DDL, and per
        table, the column fills to write once the batch's changes are merged (DDL key, values)."""
        stop_at: dict[str, _Stop] = {}
        fills: dict[str, list[tuple[str, dict[str, pa.Scalar]]]] = {}
        if self.watch_new_tables:
            self._join_new_tables(events)
        handoff = {t.name: t.handoff_key for t in self.by_topic.values()}
        # RENAME TABLE t TO t_old, t_new TO t (gh-ost, pt-online-schema-change): t is replaced, not gone
        replaced = {(e.position.key(), e.new_table) for e in events if e.kind == "rename_table" and e.new_table}
        for event in sorted(events, key=lambda e: e.position):
            table = event.table
            key = event.position.key()
            if table not in self.sinks or self._stopped(table) or table in stop_at or key <= handoff[table]:
                continue  # not streamed, already stopped, or already part of the full load's schema
            action = plan_schema_change(event, user_schema(self.schemas[table]), pipeline=self.pipeline.name,
                                        replaced=(key, table) in replaced,
                                        keeps_history=self.sinks[table].semantics == "append_log",
                                        widen_in_place=self.sinks[table].widens_in_place)
            if action.stop_reason:
                stop_at[table] = _Stop(key, action.stop_reason, action.reload)
                continue
            sink = self.sinks[table]
            try:
                if action.add:
                    sink.add_columns(action.add)
                    log.info("table %s: added columns %s (%s)", table, [f.name for f in action.add], event.ddl)
                if action.widen:
                    sink.widen_columns(action.widen)
                    log.info("table %s: widened %s in place (%s)", table,
                             [f"{f.name} to {f.type}" for f in action.widen], event.ddl)
                if action.nullable:
                    sink.make_nullable(action.nullable)
                    log.info("table %s: columns %s may now hold NULL (%s)", table, action.nullable, event.ddl)
            except SchemaChangeError as exc:  # this table only: a re-load (or its command) brings it back
                stop_at[table] = _Stop(key, f"{exc.message}; {self._note(table)}", reload=True)
                continue
            if action.fill:
                fills.setdefault(table, []).append((key, action.fill))
                log.info("table %s: rows older than the DDL get the source's default in %s", table, sorted(action.fill))
            if action.add or action.nullable or action.widen:
                self.schemas[table] = _delta_schema(sink.table_uri, self.pipeline.delta.storage_options)
        return stop_at, fills

    def _join_new_tables(self, events: list[SchemaChangeEvent]) -> None:
        """Selected tables that appeared after the load (stream/new_tables.py): joined, each with a handoff
        position and a Delta table, or named in the progress file with the reason they are not synced."""
        database = self.pipeline.source.database
        for name in departed(events, database) & set(self.progress.tables):
            self.progress.tables[name].not_synced = None  # gone before it was synced: nothing to say any more
        found = arrivals(events, set(self.sinks), self.pipeline.tables.selects, database)
        if self.pipeline.stream.join_new_tables and not self._looked_for_older:
            self._looked_for_older = True  # once per query: it asks the source
            try:
                older = older_tables(self.pipeline, set(self.sinks) | set(found))
            except LakesyncError as exc:
                log.warning("could not look for selected tables that were never loaded: %s", exc.message)
                older = []
            found.update({name: Arrival(name, "older") for name in older})
        for name, arrival in found.items():
            progress = self.progress.tables.setdefault(name, TableProgress())
            if not self.pipeline.stream.join_new_tables:
                progress.not_synced = not_synced_note(self.pipeline, arrival)
                log.warning("table %s is not synced: %s", name, progress.not_synced)
                continue
            later = arrival.event is not None and any(
                e.position > arrival.event.position and name in (e.table, e.new_table) for e in events)
            joined = join(self.pipeline, arrival, changed_since=later)
            if joined.entry is None:
                progress.not_synced = joined.note
                log.error("table %s is not synced: %s", name, joined.note)
                continue
            self._adopt_load(name, joined.entry)
            progress.not_synced, progress.joined = None, f"{utc_now()}: {joined.note}"
            self.joined.append(name)

    def _debezium_stops(self, raw: DecodedBatch | None) -> dict[str, _Stop]:
        """The tables whose Debezium events (decoded on the driver: the executors send such records raw) after
        the table's load position need a re-load (or a stop), each at the earliest of: the first event carrying
        a column the Delta table lacks (:func:`lakesync.stream.schema_changes.columns_added_in_events` says why
        never in place), and the first snapshot read, Debezium having snapshotted again and maybe lost deletes
        (:func:`lakesync.stream.schema_changes.new_snapshot_in_events`). Events at or before the load change
        nothing: the load holds what they did."""
        stops: dict[str, _Stop] = {}
        for table_name, changes in (raw.tables.items() if raw is not None else ()):
            if table_name not in self.sinks or self._stopped(table_name):
                continue
            after = self._table(table_name).handoff_key
            found = []
            if added := changes.added_columns(user_schema(self.schemas[table_name]), after=after):
                action = columns_added_in_events(table_name, added, pipeline=self.pipeline.name)
                found.append(_Stop(added[0].first_position, action.stop_reason or "", action.reload))
            if (first := changes.first_snapshot_read(after=after)) is not None:
                action = new_snapshot_in_events(table_name, first, pipeline=self.pipeline.name)
                found.append(_Stop(first, action.stop_reason or "", action.reload))
            if found:
                stops[table_name] = min(found, key=lambda stop: stop.key)
        return stops

    def _apply(self, tables: dict[str, ReducedTable], batch_id: int) -> None:
        """One versioned MERGE per table not stopped, up to ``stream.merge_threads`` tables at once, each to its
        end; then the outcomes in table order (progress, summary, a table stopped by its schema), and the first
        failure raised after the tables that committed are counted (the batch's replay skips them)."""
        work = []
        for table_name, reduced in tables.items():
            if self._stopped(table_name):
                continue
            changes, count = reduced.rows, reduced.changes
            if self.sinks[table_name].semantics == "append_log":  # no position rule: drop what the load holds
                changes = changes.filter(pc.greater(changes.column(POS),
                                                    pa.scalar(self._table(table_name).handoff_key)))
                count = changes.num_rows
            if changes.num_rows:
                work.append((table_name, changes, count))
        outcomes = run_concurrently([partial(self._merge, name, changes, batch_id) for name, changes, _ in work],
                                    threads=self.pipeline.stream.merge_threads)
        for (table_name, changes, count), outcome in zip(work, outcomes, strict=True):
            if not isinstance(outcome, Exception) or isinstance(outcome, SchemaChangeError):
                self._record(table_name, changes, count, outcome, batch_id)
        failure = next((o for o in outcomes if isinstance(o, Exception) and not isinstance(o, SchemaChangeError)),
                       None)
        if failure is not None:
            self.progress.save(self.pipeline.pipeline_state_dir)  # what did commit is counted once
            raise failure

    def _merge(self, table_name: str, changes: pa.Table, batch_id: int) -> ApplyResult | Exception:
        """One table's MERGE (in a worker thread); whatever it raised comes back as the outcome."""
        try:
            return self.sinks[table_name].apply_changes(changes, app_id=self.app_id, batch_version=batch_id)
        except Exception as exc:  # judged by _apply once every table's MERGE has ended
            return exc

    def _record(self, table_name: str, changes: pa.Table, count: int, result: ApplyResult | SchemaChangeError,
                batch_id: int) -> None:
        if isinstance(result, SchemaChangeError):
            self._stop(table_name, str(result), batch_id, at=pc.min(changes.column(POS)).as_py())
            return
        if result.skipped:  # the same work, replayed after a crash before Spark's checkpoint: counted already
            log.info("table %s: batch %d was already committed to Delta with the same changes; skipped",
                     table_name, batch_id)
            return
        position, source_ts_ms = newest(changes)
        self.progress.record(table_name, batch_id=batch_id, rows=count, position=position, source_ts_ms=source_ts_ms)
        self.summary.tables[table_name] = self.summary.tables.get(table_name, 0) + count
        self.summary.changes += count


def run_stream(pipeline: Pipeline, *, once: bool = True, tables: list[str] | None = None, spark=None,
               timeout_seconds: float | None = None) -> StreamRunSummary:
    """Run the stream: ``once`` processes what is in Kafka now and returns (availableNow); otherwise it runs
    with the pipeline's trigger interval until stopped (or ``timeout_seconds``).

    When tables joined during a query (``stream.join_new_tables``, stream/new_tables.py), the query is started
    again at once, in this process, with their topics added; with ``once`` that query reads what Kafka holds
    for them now, too."""
    from lakesync.spark.session import build_spark_session

    deadline = time.monotonic() + timeout_seconds if timeout_seconds else None
    session = spark or build_spark_session(f"lakesync-stream-{pipeline.name}")
    summary = StreamRunSummary()
    offset_restarts = 0
    while True:
        try:
            applier = _run_query(pipeline, session, once=once, tables=tables, deadline=deadline)
        except _TopicCreatedWhileStarting as created:
            offset_restarts += 1
            if offset_restarts > OFFSET_RESTARTS:
                raise created.failure from created
            log.warning("a topic of the stream was created while its query started: starting it again with "
                        "offsets that name it")
            continue
        summary.batches += applier.summary.batches
        summary.changes += applier.summary.changes
        for name, count in applier.summary.tables.items():
            summary.tables[name] = summary.tables.get(name, 0) + count
        if not applier.joined or (deadline is not None and time.monotonic() >= deadline):
            return summary
        log.warning("tables %s joined the stream: starting its query again with their topics",
                    ", ".join(applier.joined))


def _run_query(pipeline: Pipeline, session, *, once: bool, tables: list[str] | None, deadline: float | None
               ) -> BatchApplier:
    """One streaming query over the topics of the tables loaded now, until it ends (``once``), the deadline,
    or a table joined (the applier's ``joined``); returns its applier."""
    selected = streamed_tables(pipeline, only=tables)
    client = kafka_client_config(pipeline)
    checkpoint = checkpoint_dir(pipeline)
    batch_written = partial(_batch_written, pipeline)
    read = {topic for topic, _ in committed_offsets(checkpoint) or {}}
    new_topics = bool(read) and any(t.topic not in read for t in selected)
    deferred: list[str] = []
    spark_checkpoint = checkpoint_reader(checkpoint) == SPARK_READER  # a former reader's: moved aside below
    if new_topics and spark_checkpoint and batch_in_flight_written(checkpoint, batch_written):
        # only this checkpoint can finish its batch in flight: the new tables join once it has (the query is
        # then started again with their topics, see BatchApplier.deferred)
        deferred = [t.name for t in selected if t.topic not in read]
        log.warning("tables %s join the stream once its checkpoint has finished the batch it stopped in",
                    ", ".join(deferred))
        selected, new_topics = [t for t in selected if t.topic in read], False
        tables = [t.name for t in selected]  # as with --tables: no other table joins in this query
    carried = prepare_checkpoint(checkpoint, pipeline=pipeline.name, reads_new_topics=new_topics,
                                 batch_written=batch_written)
    fresh = not has_committed_batch(checkpoint)
    app_id = f"lakesync-stream-{stream_id(checkpoint)}"
    schema_topic = pipeline.topic(SCHEMA_TOPIC_TABLE)
    topics = [*(t.topic for t in selected), schema_topic]
    options = spark_options.stream_options(client, topics)
    if pipeline.stream.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(pipeline.stream.max_offsets_per_trigger)
    starting = _handoff_offsets(pipeline, selected, checkpoint, fresh=fresh, carried=carried)
    if starting:
        options["startingOffsets"] = json.dumps(starting)
    ids = topic_ids(client, topics)
    if carried is not None:  # the old checkpoint's topics must be the ones its offsets were read from
        check_topic_identity(carried.old_checkpoint, ids, pipeline=pipeline.name, fresh=False)
    check_topic_identity(checkpoint, ids, pipeline=pipeline.name, fresh=fresh)
    record_reader(checkpoint)
    # a task per executor core at least: a table topic with one partition still decodes on every core
    options["minPartitions"] = str(session.sparkContext.defaultParallelism)
    read_batch: ReadBatch = run_records_on_executors
    if pipeline.stream.decode == "spark_sql":
        from lakesync.stream.sql_decode import run_records_in_sql

        read_batch = run_records_in_sql
    applier = BatchApplier(pipeline, selected, app_id, read_batch, watch_new_tables=not tables, deferred=deferred)
    writer = (session.readStream.format("kafka").options(**options).load()
              .writeStream.foreachBatch(applier).option("checkpointLocation", str(checkpoint)))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(
        processingTime=f"{pipeline.stream.trigger_seconds} seconds")
    applier.monitor.open(serve=not once)
    query = writer.start()
    try:
        _await(query, applier, once=once, deadline=deadline)
    except Exception as exc:  # Spark's StreamingQueryException wraps whatever failed inside the query
        if UNNAMED_PARTITIONS in str(exc) and not has_committed_batch(checkpoint):
            raise _TopicCreatedWhileStarting(stream_failure(pipeline.name, exc)) from exc
        applier.monitor.failed(exc)
        raise stream_failure(pipeline.name, exc) from exc
    finally:
        if query.isActive:
            query.stop()
        applier.monitor.close(applier.progress)
        if log.isEnabledFor(logging.DEBUG):  # where each trigger's time went, for whoever tunes the stream
            for progress in query.recentProgress:
                log.debug("trigger %s: %s ms", progress.batchId, progress.durationMs)
    failure = query.exception()
    if failure and RESTARTING not in str(failure):
        raise stream_failure(pipeline.name, failure)
    return applier


def _await(query, applier: BatchApplier, *, once: bool, deadline: float | None) -> None:
    """Until the query ends, the deadline passes, or (continuous) a table joined: then the applier refuses
    further batches before the query is stopped, so no batch of the old query writes after the new one
    started."""
    while True:
        # one whole second at a time: PySpark's API takes an int; the deadline is kept to within a second
        if query.awaitTermination(1):
            return
        if deadline is not None and time.monotonic() >= deadline:
            return
        if applier.joined and not once:
            applier.close()
            _until_trigger_ends(query, deadline)
            return


def _until_trigger_ends(query, deadline: float | None) -> None:
    """Wait until the query's trigger in flight has committed its batch in the checkpoint (or the query ended).

    Why: a query stopped between its batch's Delta writes and Spark's commit of the batch leaves a batch that
    only its own checkpoint can replay, so the tables that joined would wait a query more (seen on a loaded
    CI machine). A trigger started after :meth:`BatchApplier.close` writes nothing and ends the query."""
    while query.isActive and query.status["isTriggerActive"]:
        if deadline is not None and time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def _handoff_offsets(pipeline: Pipeline, selected: list[StreamedTable], checkpoint: Path, *, fresh: bool,
                     carried: CarriedOffsets | None = None) -> dict[str, dict[str, int]]:
    """Where the query starts on each topic it has not read yet (Spark's ``startingOffsets``).

    A new stream: every table's topic at the first change at or after its handoff position, once the relay's
    coverage is proven to reach back to each (:mod:`lakesync.stream.handoff`); the schema topic at the
    smallest. A stream resuming from its checkpoint: only the topics the checkpoint has no offsets for (a
    table that joined), at their handoff position; the rest resume where they were. Before resuming, the
    records it would read next must still be in Kafka. A stream whose checkpoint was moved aside (``carried``,
    stream/kafka_reader.py) is a new checkpoint resuming the old one: each topic where the old one would have
    read next, and every partition of each topic named, as Spark's Kafka source wants."""
    from lakesync.kafka.offsets import offset_consumer
    from lakesync.relay import covered_range

    schema_topic = pipeline.topic(SCHEMA_TOPIC_TABLE)
    consumer = offset_consumer(kafka_client_config(pipeline))
    try:
        if carried is not None:
            return _carried_offsets(pipeline, selected, consumer, carried)
        if fresh:
            covered = covered_range(pipeline)
            stopped = {name for name, p in StreamProgress.load(pipeline.pipeline_state_dir).tables.items()
                       if p.stopped_reason}  # not streamed until re-loaded, at a position the coverage reaches
            check_handoff_coverage(pipeline.name, consumer,
                                   {t.name: (t.topic, t.handoff_key) for t in selected if t.name not in stopped},
                                   covered[0] if covered else None,
                                   debezium_history=(pipeline.kafka.topic_prefix, pipeline.source.database))
            topic_keys = {t.topic: t.handoff_key for t in selected}
            topic_keys[schema_topic] = min(t.handoff_key for t in selected)
            offsets = starting_offsets(consumer, topic_keys, pipeline)
            log.info("new stream starts at the handoff offsets %s", offsets)
            return offsets
        log.info("stream resumes from its checkpoint %s", checkpoint)
        check_nothing_deleted(pipeline.name, checkpoint, consumer,
                              {t.topic: t.name for t in selected} | {schema_topic: "(schema changes)"})
        read = {topic for topic, _ in committed_offsets(checkpoint) or {}}
        unread = {t.topic: t.handoff_key for t in selected if t.topic not in read}
        if not unread:
            return {}
        offsets = starting_offsets(consumer, unread, pipeline)
        log.info("topics new to the checkpoint start at their tables' handoff offsets %s", offsets)
        return offsets
    finally:
        consumer.close()


def _batch_written(pipeline: Pipeline, checkpoint: Path, batch_id: int) -> bool:
    """Whether any Delta table of ``pipeline`` recorded batch ``batch_id`` (or a later one) of the stream that
    owns ``checkpoint`` (its app transaction); a checkpoint without its stream id counts as written."""
    id_file = checkpoint / STREAM_ID_FILE
    if not id_file.exists():
        return True
    app_id = f"lakesync-stream-{id_file.read_text().strip()}"
    for table in streamed_tables(pipeline):
        version = _sink(pipeline, table).committed_batch_version(app_id)
        if version is not None and version >= batch_id:
            return True
    return False


def _carried_offsets(pipeline: Pipeline, selected: list[StreamedTable], consumer: Consumer, carried: CarriedOffsets
                     ) -> dict[str, dict[str, int]]:
    """The starting offsets of a new checkpoint that carries an old one (stream/kafka_reader.py): the old
    checkpoint's next records (checked to be still in Kafka), a table topic it never read at its table's
    handoff, any other partition (added since, or of a schema topic created since) at its first record."""
    from lakesync.kafka.offsets import EARLIEST, list_partitions

    schema_topic = pipeline.topic(SCHEMA_TOPIC_TABLE)
    topics = {t.topic: t.name for t in selected} | {schema_topic: "(schema changes)"}
    check_nothing_deleted(pipeline.name, carried.old_checkpoint, consumer, topics)
    read = {topic for topic, _ in carried.offsets}
    unread = {t.topic: t.handoff_key for t in selected if t.topic not in read}
    offsets = starting_offsets(consumer, unread, pipeline) if unread else {}
    # every partition named: Spark's Kafka source refuses startingOffsets that leave one out
    for topic, partition in list_partitions(consumer, topics=sorted(set(topics) - set(unread))):
        offsets.setdefault(topic, {})[str(partition)] = carried.offsets.get((topic, partition), EARLIEST)
    log.info("the new checkpoint starts at the old one's committed offsets %s", offsets)
    return offsets


def stream_failure(pipeline_name: str, exc: object) -> LakesyncError:
    """The lakesync error a failed query carries (a GapError raised in the Kafka source, a SinkError in a
    batch) as itself, instead of Spark's wrapper with the JVM stack; anything else with its first line."""
    text = str(exc)
    carried = errors.carried_error(text)
    if carried is not None:
        return type(carried)(f"the stream of pipeline {pipeline_name!r} failed: {carried.message}", hint=carried.hint)
    first = next((line for line in text.splitlines() if line.strip()), text)
    return LakesyncError(f"the stream of pipeline {pipeline_name!r} failed: {first[:2000]}",
                         hint="run with --debug for Spark's full error")
