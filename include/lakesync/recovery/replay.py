"""``lakesync recover``: replay from the binlog what Kafka lost, re-loading only the tables the binlog can't cover.

The steps, in an order that makes the command safe to run again when it stopped half-way (the plan is made
from the same state each time):

1. **Plan** (:mod:`lakesync.recovery.plan`): per selected table on the source, its replay start, or a re-load,
   with why. Refused without the relay's progress and without marks (Debezium's topics).
2. **Refuse while the relay runs**: fresh heartbeats; without Kafka transactions, anything but a recorded clean
   stop (nothing could fence it).
3. **Re-load** the tables the binlog can't cover (each its own full load, as after a DDL).
4. **Hand each replayed table off** at its replay start (``full_load.json``): the stream starts there.
5. **Check the relay's start is still on the server** (the re-loads may have taken long); nothing in Kafka has
   changed before this.
6. **Fence the relay and empty the topics**: a producer with the relay's ``transactional.id`` fences any relay
   still holding it; then every record of the pipeline's table and schema topics is deleted. What they held
   is either in Delta already or comes again in the replay; keeping it would append an ``append_log``
   table's changes twice. The log starts this leaves are recorded (:mod:`lakesync.recovery.marker`).
7. **Store the relay's progress** at the earliest start (replays and re-loads), committed under its
   ``transactional.id`` and marked as a clean stop: the next relay start, wherever it is supervised, replays
   from there.
8. **Move the stream's checkpoint aside**: its offsets point into records that are gone; the stream starts
   afresh at the handoffs.

Keyed tables are exact (the position rule skips what Delta has); ``append_log`` tables are exact with one
partition per topic, else re-loaded (:mod:`lakesync.recovery.plan`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from lakesync.relay.offsets import RelayProgress

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
        #: the relay's stored progress, read by :meth:`plan`
        self.stored: RelayProgress | None = None

    def _stem(self) -> str:
        if self.load.position is None:
            raise ConfigError(f"pipeline {self.pipeline.name} has no full load to recover from",
                              hint=f"run the full load: `lakesync snapshot --pipeline {self.pipeline.name}`")
        return file_stem(self.load.position.file)

    def position(self, key: str) -> SourcePosition:
        return SourcePosition.from_key(key, file_stem=self._stem())

    def facts(self) -> dict[str, TableFacts]:
        """Every selected table with a load entry: loaded ones with their positions, the others (stopped by the
        stream, a load not finished) to be re-loaded."""
        progress = StreamProgress.load(self.pipeline.pipeline_state_dir).tables
        found = {}
        for name, entry in sorted(self.load.tables.items()):
            if not self.pipeline.tables.selects(name):
                continue
            table_progress = progress.get(name)
            settings = self.pipeline.tables.settings_for(name)
            semantics = table_semantics(settings.semantics, bool(settings.key_columns or entry.key_columns))
            reload_because = None
            if entry.status != "done" or not entry.position_key:
                reload_because = "its load had not finished"
            elif table_progress is not None and table_progress.stopped_reason:
                reload_because = "the stream stopped it (its re-load is its recovery)"
            found[name] = TableFacts(
                handoff=entry.position_key or "",
                consumed_through=table_progress.consumed_through if table_progress else None,
                applied=None if reload_because else applied_position(self.pipeline, name),
                append_log=semantics == APPEND_LOG, reload_because=reload_because)
        return found

    def plan(self) -> RecoveryPlan:
        from lakesync.relay.offsets import ProgressStore
        from lakesync.source.schema import list_tables
        from lakesync.source.server_checks import check_position_available
        from lakesync.source.snapshot import connect

        facts = self.facts()
        if not facts:
            raise ConfigError(f"pipeline {self.pipeline.name} has no loaded table to recover",
                              hint=f"run the full load: `lakesync snapshot --pipeline {self.pipeline.name}`")
        self.stored = ProgressStore.for_pipeline(self.pipeline).load()
        if self.stored is None and all(f.consumed_through is None for f in facts.values()):
            raise ConfigError(
                f"pipeline {self.pipeline.name}: neither the relay's progress nor a consumed-through mark: its topics "
                "are not written by lakesync's relay (Debezium's?), or its stream never applied a batch while the "
                "relay's progress was there; a replay by lakesync's relay could not tell where each table is",
                hint=f"re-load every table: `lakesync snapshot --pipeline {self.pipeline.name} --restart`, then "
                     "remove the stream's checkpoint (for Debezium's topics, recover the connector's side: "
                     "docs/debezium.md)")
        conn = connect(mysql_connection(self.pipeline))
        try:
            def available(key: str) -> bool:
                try:
                    check_position_available(conn, self.position(key))
                except BinlogPurgedError:
                    return False
                return True

            on_source = set(list_tables(conn, self.pipeline.source.database))
            gone = sorted(set(facts) - on_source)
            if gone:
                log.warning("not recovered: %s (no longer on the source; the stream stops such a table)",
                            ", ".join(gone))
            return plan_recovery({name: f for name, f in facts.items() if name in on_source},
                                 partitions=self.pipeline.kafka.partitions, available=available,
                                 shown=lambda key: self.position(key).token())
        finally:
            conn.close()

    def refuse_if_relay_runs(self) -> None:
        """A relay that runs would race the recovery. With Kafka transactions the fence stops it, so only fresh
        heartbeats refuse; without them nothing can stop it, so only a clean stop's record lets it go on."""
        stored = self.stored
        if stored is None or stored.stopped:
            return
        if not self.pipeline.kafka.transactions:
            raise ConfigError(
                f"the relay of pipeline {self.pipeline.name} did not record a clean stop, and without Kafka "
                "transactions (kafka.transactions: false) nothing fences a relay that still runs",
                hint="stop the relay with SIGTERM or Ctrl-C (it records the stop), then run this again")
        silent = time.time() - stored.updated_ms / 1000
        if silent < 3 * self.pipeline.relay.heartbeat_seconds + 5:
            raise ConfigError(
                f"the relay of pipeline {self.pipeline.name} is running (its last heartbeat is {silent:.0f} s old): "
                "a recovery would race it",
                hint="stop the relay (its service or `lakesync relay` process), then run this again")

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
            if table.handoff is not None and (entry := self.load.tables.get(table.table)) is not None:
                entry.position_key, entry.position = table.handoff, position_to_json(self.position(table.handoff))
                entry.mode = "replay"
        self.load.forget([])  # the load's position: the smallest of the tables' (now their handoffs)
        self.load.save()
        relay_from = self.position(min(starts.values()))
        self._check_available(relay_from)  # the re-loads may have taken long: nothing is deleted before this
        self._reset_kafka(relay_from)
        checkpoint = checkpoint_dir(self.pipeline)
        moved = None
        if checkpoint.exists():
            moved = checkpoint.with_name(f"{checkpoint.name}.before-recovery-{time.strftime('%Y%m%dT%H%M%S')}")
            checkpoint.rename(moved)
            log.warning("moved the stream's checkpoint aside to %s: the stream starts afresh at the handoffs", moved)
        return RecoveryResult(plan, relay_from, moved)

    def _check_available(self, position: SourcePosition) -> None:
        from lakesync.source.server_checks import check_position_available
        from lakesync.source.snapshot import connect

        conn = connect(mysql_connection(self.pipeline))
        try:
            check_position_available(conn, position)
        except BinlogPurgedError as exc:
            raise BinlogPurgedError(f"{exc.message}; the recovery changed nothing in Kafka yet",
                                    hint=f"run `lakesync recover --pipeline {self.pipeline.name}` again: it plans "
                                         "anew with what the binlog still has") from exc
        finally:
            conn.close()

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
