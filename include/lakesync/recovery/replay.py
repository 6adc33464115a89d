"""``lakesync recover``: replay from the binlog what Kafka lost, re-loading only the tables the binlog can't cover.

The steps, in an order that makes the command safe to run again when it stopped half-way (the plan is made
from the same state each time):

1. **Plan** (:mod:`lakesync.recovery.plan`): per loaded table, its replay start, or a re-load, with why.
2. **Refuse while the relay runs**: its heartbeats are fresh. A recovery under a live relay would race it.
3. **Re-load** the tables the binlog can't cover (each its own full load, as after a DDL).
4. **Hand each replayed table off** at its replay start (``full_load.json``): the stream starts there.
5. **Fence the relay and empty the topics**: a producer with the relay's ``transactional.id`` fences any relay
   still holding it; then every record of the pipeline's table and schema topics is deleted. What they held
   is either in Delta already or comes again in the replay; keeping it would append an ``append_log``
   table's changes twice. The log starts this leaves are recorded (:mod:`lakesync.recovery.marker`).
6. **Store the relay's progress** at the earliest start (replays and re-loads), committed under its
   ``transactional.id``: the next relay start, wherever it is supervised, replays from there.
7. **Move the stream's checkpoint aside**: its offsets point into records that are gone; the stream starts
   afresh at the handoffs.

Keyed tables are exact (the position rule skips what Delta has); ``append_log`` tables are exact with one
partition per topic, else re-loaded (:mod:`lakesync.recovery.plan`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from lakesync.core.config import Pipeline
from lakesync.core.connections import kafka_client_config, mysql_connection
from lakesync.core.errors import BinlogPurgedError, ConfigError
from lakesync.core.positions import SourcePosition, file_stem
from lakesync.core.table_layout import APPEND_LOG, table_semantics
from lakesync.events.envelope import SCHEMA_TOPIC_TABLE
from lakesync.full_load.state import LoadState, position_to_json, utc_now
from lakesync.recovery.marker import save_log_starts
from lakesync.recovery.plan import RecoveryPlan, TableFacts, plan_recovery
from lakesync.stream.progress import StreamProgress, applied_position

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryResult:
    plan: RecoveryPlan
    relay_from: SourcePosition | None
    checkpoint_moved_to: Path | None


class Recovery:
    """One pipeline's recovery by position (see the module doc)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.load = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)

    def _stem(self) -> str:
        if self.load.position is None:
            raise ConfigError(f"pipeline {self.pipeline.name} has no full load to recover from",
                              hint=f"run the full load: `lakesync snapshot --pipeline {self.pipeline.name}`")
        return file_stem(self.load.position.file)

    def position(self, key: str) -> SourcePosition:
        return SourcePosition.from_key(key, file_stem=self._stem())

    def facts(self) -> dict[str, TableFacts]:
        """The loaded, selected tables the stream follows (a stopped table keeps its own command)."""
        progress = StreamProgress.load(self.pipeline.pipeline_state_dir).tables
        found = {}
        for name, entry in sorted(self.load.tables.items()):
            if entry.status != "done" or not entry.position_key or not self.pipeline.tables.selects(name):
                continue
            table_progress = progress.get(name)
            if table_progress is not None and table_progress.stopped_reason:
                continue
            settings = self.pipeline.tables.settings_for(name)
            semantics = table_semantics(settings.semantics, bool(settings.key_columns or entry.key_columns))
            found[name] = TableFacts(
                handoff=entry.position_key,
                consumed_through=table_progress.consumed_through if table_progress else None,
                applied=applied_position(self.pipeline, name),
                append_log=semantics == APPEND_LOG)
        return found

    def plan(self) -> RecoveryPlan:
        from lakesync.source.server_checks import check_position_available
        from lakesync.source.snapshot import connect

        facts = self.facts()
        if not facts:
            raise ConfigError(f"pipeline {self.pipeline.name} has no loaded table to recover",
                              hint=f"run the full load: `lakesync snapshot --pipeline {self.pipeline.name}`")
        if all(f.consumed_through is None for f in facts.values()) \
                and any(f.applied is not None and f.applied > f.handoff for f in facts.values()):
            raise ConfigError(
                f"pipeline {self.pipeline.name}: no table has a consumed-through mark, though changes were applied: "
                "its topics are not the relay's (Debezium's?), or its stream ran before lakesync kept the marks; "
                "a replay by lakesync's relay could not tell where each table is",
                hint=f"re-load every table: `lakesync snapshot --pipeline {self.pipeline.name} --restart` (for "
                     "Debezium's topics, recover the connector's side first: docs/debezium.md)")
        conn = connect(mysql_connection(self.pipeline))
        try:
            def available(key: str) -> bool:
                try:
                    check_position_available(conn, self.position(key))
                except BinlogPurgedError:
                    return False
                return True

            return plan_recovery(facts, partitions=self.pipeline.kafka.partitions, available=available)
        finally:
            conn.close()

    def refuse_if_relay_runs(self) -> None:
        from lakesync.relay.offsets import ProgressStore

        stored = ProgressStore.for_pipeline(self.pipeline).load()
        if stored is None or stored.stopped or not stored.updated_ms:
            return
        silent = time.time() - stored.updated_ms / 1000
        if silent < 3 * self.pipeline.relay.heartbeat_seconds + 5:
            raise ConfigError(
                f"the relay of pipeline {self.pipeline.name} is running (its last heartbeat is {silent:.0f} s old): "
                "a recovery would race it",
                hint="stop the relay (its Airflow task, service or `lakesync relay` process), then run this again")

    def run(self, plan: RecoveryPlan) -> RecoveryResult:
        from lakesync.stream.app import checkpoint_dir

        self.refuse_if_relay_runs()
        starts = {t.table: t.replay_from for t in plan.tables if t.replay_from is not None}
        if plan.reloaded:
            from lakesync.full_load.load import FullLoad

            log.warning("re-loading %s: the binlog can't cover them", ", ".join(plan.reloaded))
            FullLoad(self.pipeline, tables=plan.reloaded, restart=True).run()
            self.load = LoadState.for_pipeline_dir(self.pipeline.pipeline_state_dir)
            starts |= {name: self.load.tables[name].position_key or "" for name in plan.reloaded}
        for table in plan.tables:
            if table.handoff is not None:
                entry = self.load.tables[table.table]
                entry.position_key, entry.position = table.handoff, position_to_json(self.position(table.handoff))
                entry.mode = "replay"
        self.load.forget([])  # the load's position: the smallest of the tables' (now their handoffs)
        self.load.save()
        relay_from = self.position(min(starts.values()))
        self._reset_kafka(relay_from)
        checkpoint = checkpoint_dir(self.pipeline)
        moved = None
        if checkpoint.exists():
            moved = checkpoint.with_name(f"{checkpoint.name}.before-recovery-{time.strftime('%Y%m%dT%H%M%S')}")
            checkpoint.rename(moved)
            log.warning("moved the stream's checkpoint aside to %s: the stream starts afresh at the handoffs", moved)
        return RecoveryResult(plan, relay_from, moved)

    def _reset_kafka(self, relay_from: SourcePosition) -> None:
        """Fence the relay, empty the topics, store the relay's progress at ``relay_from`` (as stopped: a
        recovery run again is not refused as if the relay were running)."""
        from lakesync.relay.offsets import ProgressStore, RelayProgress
        from lakesync.relay.publisher import Publisher, transactional_id
        from lakesync.relay.topics import TopicManager

        client = kafka_client_config(self.pipeline)
        fencing = transactional_id(self.pipeline.kafka.topic_prefix, self.pipeline.name,
                                   self.pipeline.source.server_id) if self.pipeline.kafka.transactions else None
        publisher = Publisher(client, transactional_id=fencing)
        try:
            topics = TopicManager(client)
            names = [self.pipeline.topic(name) for name in self.load.tables] + [self.pipeline.topic(SCHEMA_TOPIC_TABLE)]
            log_starts = topics.truncate(names)
            log.warning("deleted the records of %d topic partitions before the replay", len(log_starts))
            save_log_starts(self.pipeline.pipeline_state_dir, log_starts, relay_from=relay_from.key(), at=utc_now())
            store = ProgressStore.for_pipeline(self.pipeline)
            store.ensure_topic(topics)
            store.save(RelayProgress(relay_from, relay_from, 0, stopped=True), publisher)
        finally:
            publisher.close()
