"""The relay: binlog -> Kafka, one topic per table, with durable progress.

:class:`Relay` is lakesync's own small Kafka Connect source worker. It checks the source (binlog settings,
the start position still on the server, a unique server id), picks its start position, streams the
selected tables' row changes to ``<prefix>.<db>.<table>`` (Debezium envelope, key = primary key) and DDL
to ``<prefix>.<db>._schema``, and stores its progress in the offsets topic only at transaction ends and
only after the broker acknowledged every record before it. After a crash it resumes from that progress;
events re-sent from there are harmless because the sink orders changes by their source position.

Start position, first found wins: ``from_position`` (``--from-position``) > the stored progress > the
position the last full load recorded (``<pipeline state dir>/full_load.json``) > the server's current
position. The choice is logged. One exception: when the stored progress is no longer on the server (the
binlog was purged) and the full load's position is newer, the load re-captured every table after the stored
progress (``full_load.json`` keeps the smallest position of all loaded tables), so the relay starts from the
load's position, once the load has finished: after a purge, ``lakesync snapshot --pipeline NAME --restart``
is the whole recovery. With ``recovery.when_purged: reload`` the relay runs that re-load itself.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pymysql

from lakesync.core.config import Pipeline
from lakesync.core.connections import kafka_client_config, mysql_connection
from lakesync.core.errors import (
    BinlogPurgedError,
    BrokerError,
    BrokerUnavailableError,
    LakesyncError,
    ServerIdInUseError,
    SourceError,
    SourceUnavailableError,
)
from lakesync.core.mysql_client import connect_mysql
from lakesync.core.positions import SourcePosition
from lakesync.events.envelope import (
    SCHEMA_TOPIC_TABLE,
    ChangeEvent,
    SchemaChangeEvent,
    encode,
    encode_schema_change,
)
from lakesync.full_load.state import STATE_FILE_NAME, LoadState
from lakesync.monitoring.metrics import PipelineMetrics
from lakesync.relay.backpressure import Backpressure
from lakesync.relay.offsets import ProgressStore, RelayProgress
from lakesync.relay.publisher import Publisher, transactional_id
from lakesync.relay.topics import TopicManager, retention_config
from lakesync.source.binlog import BinlogSource, DdlStatement, Heartbeat, TransactionEnd
from lakesync.source.ddl import DROP_DATABASE, UNKNOWN, DdlChange, parse_ddl
from lakesync.source.server_checks import (
    binary_logs,
    check_binlog_settings,
    check_position_available,
    check_server_id_unique,
    current_position,
    is_connection_error,
)

log = logging.getLogger(__name__)

_GIVE_UP_HINT = ("bring the server (or the broker) back, then start the relay again: it resumes from its committed "
                 "progress. relay.give_up_after_seconds sets how long it keeps trying by itself")


@dataclass
class Lag:
    """How far the relay is behind the source: by commit time and by binlog bytes."""

    seconds: float
    bytes: int


@dataclass
class RelayStats:
    """What one :meth:`Relay.run` did (returned when it stops)."""

    start: SourcePosition
    start_origin: str
    events: int = 0
    schema_changes: int = 0
    transactions: int = 0
    position: SourcePosition | None = None
    elapsed_seconds: float = 0.0
    tables: dict[str, int] = field(default_factory=dict)

    @property
    def events_per_second(self) -> float:
        return self.events / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0


def _load_position(pipeline: Pipeline, *, finished: bool) -> SourcePosition | None:
    """The full load's position (``full_load.json``), None before a load recorded one; with ``finished``, only
    once the load has finished (every table it selected is loaded at or after it). A damaged file is an error
    with its fix: starting elsewhere instead could skip changes the load did not capture."""
    state = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    return state.position if state.finished_at or not finished else None


def _not_on_server(conn: Any, position: SourcePosition) -> bool:
    try:
        check_position_available(conn, position)
    except BinlogPurgedError:
        return True
    return False


class Relay:
    """One pipeline's relay. ``run`` streams until stopped, idle, or ``max_events``."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        heartbeat_seconds: float = 1.0,
        log_every_seconds: float = 10.0,
        blocking: bool = True,
    ) -> None:
        self.pipeline = pipeline
        self.heartbeat_seconds = heartbeat_seconds
        self.log_every = log_every_seconds
        self.blocking = blocking
        self.database = pipeline.source.database
        self._mysql = mysql_connection(pipeline)
        self._kafka = kafka_client_config(pipeline)
        self.store = ProgressStore.for_pipeline(pipeline)
        self.topics = TopicManager(self._kafka)
        #: ``None`` when the pipeline turned Kafka transactions off (``kafka.transactions: false``)
        self.transactional_id = transactional_id(pipeline.kafka.topic_prefix, pipeline.name,
                                                 pipeline.source.server_id) if pipeline.kafka.transactions else None
        #: how long each Kafka commit took, over every run (the benchmark's p50/p99)
        self.commit_seconds: list[float] = []
        self._commits = 0
        self._split_at: SourcePosition | None = None
        self._stop_requested = False
        self.metrics = PipelineMetrics(pipeline)  # backpressure code sets metrics.set_throttled(...)
        self.backpressure = Backpressure.for_pipeline(pipeline)
        self._position: SourcePosition | None = None
        self._last_ts_ms = 0
        self._caught_up = False
        self._key_overrides = {
            table: tuple(settings.key_columns)
            for table, settings in pipeline.tables.overrides.items() if settings.key_columns
        }

    # -- control --------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask a running :meth:`run` to stop at the next event or heartbeat (signal handlers call this)."""
        self._stop_requested = True

    def _connect(self) -> Any:
        try:
            return connect_mysql(**self._mysql.pymysql_kwargs(), autocommit=True)
        except pymysql.err.MySQLError as exc:
            error = SourceUnavailableError if is_connection_error(exc) else SourceError
            raise error(f"cannot connect to the source {self._mysql.describe()}: {exc}") from exc

    def lag(self, conn: Any | None = None) -> Lag:
        """Seconds since the last relayed commit (0 when caught up) and binlog bytes not yet read."""
        seconds = 0.0 if self._caught_up or not self._last_ts_ms else max(0.0, time.time() - self._last_ts_ms / 1000)
        if self._position is None:
            return Lag(seconds, 0)
        own = conn is None
        conn = conn or self._connect()
        try:
            behind = 0
            for name, size in binary_logs(conn):
                if name == self._position.file:
                    behind += max(0, size - self._position.offset)
                elif SourcePosition(name, 0) > SourcePosition(self._position.file, 0):
                    behind += size
            return Lag(seconds, behind)
        finally:
            if own:
                conn.close()

    def _check_server_id(self, conn: Any, *, grace_seconds: float = 5.0) -> None:
        """Refuse a server id another binlog reader uses, after a grace period: a relay restarted right
        after a crash may still see its own dead connection registered until the source notices it."""
        deadline = time.monotonic() + grace_seconds + 2 * self.heartbeat_seconds
        while True:
            try:
                check_server_id_unique(conn, self.pipeline.source.server_id)
                return
            except ServerIdInUseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    # -- start position -------------------------------------------------------------------------------
    def _start_position(self, conn: Any, explicit: SourcePosition | None, stored: RelayProgress | None
                        ) -> tuple[SourcePosition, str]:
        if explicit is not None:
            return explicit, "--from-position"
        if stored is not None:
            reloaded = _load_position(self.pipeline, finished=True)
            if reloaded is not None and reloaded > stored.position and _not_on_server(conn, stored.position):
                return reloaded, (f"the full load's position: the stored progress {stored.position.token()} is no "
                                  "longer on the server, and the finished load (newer) re-captured every table")
            return stored.position, f"stored progress in {self.store.topic}"
        loaded = _load_position(self.pipeline, finished=False)
        if loaded is not None:
            return loaded, f"the full load's position ({self.pipeline.pipeline_state_dir / STATE_FILE_NAME})"
        return current_position(conn), "the server's current position (no progress, no full load yet)"

    def _reload_after_purge(self, conn: Any, purged: SourcePosition) -> tuple[SourcePosition, str]:
        """``recovery.when_purged: reload``: the changes after ``purged`` are gone from the source, so re-load
        the tables that need them, as Debezium's ``when_needed`` does: each selected table whose load position
        is purged too (every table loaded before the relay's progress). A table loaded since (after a DDL, by
        hand) keeps its Delta table: the relay starts at or before its position. Then the relay starts from
        the smallest load position. Nothing is published meanwhile, so Kafka holds no change newer than a
        re-load for the stream to merge."""
        from lakesync.full_load.load import FullLoad  # the loader's Delta writer only when needed

        state = LoadState.for_pipeline_dir(self.pipeline.pipeline_state_dir)
        loaded = [name for name, entry in sorted(state.tables.items())
                  if entry.status == "done" and entry.position and self.pipeline.tables.selects(name)]
        gone = [name for name in loaded
                if _not_on_server(conn, SourcePosition.from_json(state.tables[name].position or {}))]
        if loaded and not gone:  # every table was loaded since (its load's bookkeeping unfinished): none to load
            smallest = min(SourcePosition.from_json(state.tables[name].position or {}) for name in loaded)
            return smallest, (f"the smallest load position, as every table was loaded after {purged.token()} "
                           "(recovery.when_purged: reload)")
        what = f"{len(gone)} of {len(loaded)} tables, those loaded before it" if gone else "every table"
        log.warning("relay %s: the binlog at %s is no longer on the source; re-loading %s (recovery.when_purged: "
                    "reload)", self.store.relay, purged.token(), what)
        FullLoad(self.pipeline, tables=gone or None, restart=True).run()
        start = _load_position(self.pipeline, finished=True)
        if start is None:  # a load of no table records no position
            command = f"lakesync snapshot --pipeline {self.pipeline.name} --restart"
            raise BinlogPurgedError(f"binlog purged: {purged.token()} is no longer on the server, and the re-load "
                                    "recorded no position (no table selected?)",
                                    hint=f"check tables.include, then run `{command}`")
        log.warning("relay %s: re-load done; starting at %s", self.store.relay, start.token())
        return start, f"a re-load of {what} (recovery.when_purged: reload; {purged.token()} was purged)"

    # -- DDL ------------------------------------------------------------------------------------------
    def _selected(self, table: str) -> bool:
        return bool(table) and table != SCHEMA_TOPIC_TABLE and self.pipeline.tables.selects(table)

    def _schema_events(self, item: DdlStatement) -> list[SchemaChangeEvent]:
        out = []
        for change in parse_ddl(item.sql, default_db=item.schema or self.database):
            if change.kind == DROP_DATABASE:
                if change.db == self.database:
                    out.append(self._schema_event(change, item, table=""))
                continue
            ours = change.db == self.database and self._selected(change.table)
            renamed_in = change.new_db == self.database and self._selected(change.new_table or "")
            if not (ours or renamed_in):
                continue
            if change.kind == UNKNOWN:
                # Never the end of the relay: the stream stops this one table and says how to re-load it.
                log.warning("cannot understand a DDL statement on the selected table %s.%s at %s (%s); the "
                            "stream will stop that table: %s", change.db, change.table, item.position,
                            change.reason, item.sql.strip()[:500])
                change = replace(change, changes=({"change": "unknown", "reason": change.reason},))
            out.append(self._schema_event(change, item, table=change.table))
        return out

    def _schema_event(self, change: DdlChange, item: DdlStatement, *, table: str) -> SchemaChangeEvent:
        return SchemaChangeEvent(
            db=change.db, table=table, kind=change.kind, ddl=item.sql, position=item.position, ts_ms=item.ts_ms,
            changes=list(change.changes), new_table=change.new_table,
            server_id=self.pipeline.source.server_id, name=self.pipeline.kafka.topic_prefix,
        )

    # -- the loop -------------------------------------------------------------------------------------
    def run(
        self,
        from_position: SourcePosition | None = None,
        stop_when_idle_seconds: float | None = None,
        max_events: int | None = None,
    ) -> RelayStats:
        """Stream changes until :meth:`stop`, ``stop_when_idle_seconds`` without changes, or the first source
        transaction end after ``max_events`` changes.

        When the source or the broker goes away, the relay starts over from its committed progress, with
        backoff (each attempt logged), for up to ``relay.give_up_after_seconds``; then it stops with the
        last error. A fenced relay (another took over), a purged binlog or a misconfigured source stop it
        at once."""
        give_up = self.pipeline.relay.give_up_after_seconds
        failing_since: float | None = None
        attempt, backoff = 0, 1.0
        stats: RelayStats | None = None
        while True:
            committed_before = self._commits
            try:
                stats = self._run_once(from_position if self._commits == 0 else None, stats,
                                       stop_when_idle_seconds, max_events)
                return stats
            except (SourceUnavailableError, BrokerUnavailableError) as exc:
                now = time.monotonic()
                if self._commits > committed_before:  # it made progress: a new outage, a fresh budget
                    failing_since, attempt, backoff = None, 0, 1.0
                failing_since = failing_since or now
                attempt += 1
                failing = now - failing_since
                if failing >= give_up or self._stop_requested:
                    raise type(exc)(f"the relay gave up after {failing:.0f} s of failed attempts ({attempt}): "
                                    f"{exc.message}", hint=exc.hint or _GIVE_UP_HINT) from exc
                wait = min(backoff, give_up - failing)  # the last attempt comes when the time is up, not later
                log.warning("relay: %s; attempt %d to resume from the committed progress in %.0f s (gives up after "
                            "%.0f s: relay.give_up_after_seconds)", exc.message, attempt, wait, give_up)
                self._sleep_unless_stopped(wait)
                backoff = min(backoff * 2, 30.0)
                if self._stop_requested:
                    return stats or RelayStats(start=self._position or SourcePosition("binlog.000001", 4),
                                               start_origin="stopped before the first start")

    def _sleep_unless_stopped(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._stop_requested:
            time.sleep(min(0.2, deadline - time.monotonic()))

    def _run_once(self, from_position: SourcePosition | None, previous: RelayStats | None,
                  stop_when_idle_seconds: float | None, max_events: int | None) -> RelayStats:
        """One start: connect, check, pick the start position, stream. ``previous`` carries the counts over."""
        conn = self._connect()
        publisher: Publisher | None = None
        try:
            self.metrics.serve(self.pipeline.monitoring.metrics_address)
            check_binlog_settings(conn)
            self._check_server_id(conn)
            publisher = Publisher(self._kafka, transactional_id=self.transactional_id)
            self.store.ensure_topic(self.topics)
            stored = self.store.load()
            start, origin = self._start_position(conn, from_position, stored)
            if from_position is None and self.pipeline.recovery.when_purged == "reload" \
                    and _not_on_server(conn, start):
                start, origin = self._reload_after_purge(conn, start)
            check_position_available(conn, start)
            covered_from = start
            if stored is not None and start <= stored.position:
                covered_from = min(stored.covered_from, start)
            log.info("relay %s starting at %s, from %s; coverage since %s; %s", self.store.relay, start, origin,
                     covered_from, f"Kafka transactions as {self.transactional_id}" if self.transactional_id
                     else "without Kafka transactions (kafka.transactions: false)")
            stats = RelayStats(start=start, start_origin=origin, position=start)
            if previous is not None:
                stats = replace(previous, position=start)
            self._position = start
            self._commit(publisher, RelayProgress(start, covered_from, int(time.time() * 1000)))
            self._stream(conn, publisher, stats, covered_from, stop_when_idle_seconds, max_events)
            return stats
        except pymysql.err.MySQLError as exc:
            if not is_connection_error(exc):
                raise
            lost = SourceUnavailableError(f"lost the connection to the source {self._mysql.describe()}: {exc}")
            self.metrics.error("relay", lost)
            raise lost from exc
        except LakesyncError as exc:
            self.metrics.error("relay", exc)
            raise
        finally:
            self.metrics.close()
            if publisher is not None:
                self.commit_seconds.extend(publisher.commit_seconds)
                publisher.close()
            with contextlib.suppress(pymysql.err.MySQLError):
                conn.close()

    def _commit(self, publisher: Publisher, progress: RelayProgress) -> None:
        publisher.commit(self.store.record(progress))
        self._commits += 1

    def _stream(self, conn: Any, publisher: Publisher, stats: RelayStats, covered_from: SourcePosition,
                stop_when_idle: float | None, max_events: int | None) -> None:
        pipeline = self.pipeline
        settings = pipeline.relay

        def open_source(start: SourcePosition) -> BinlogSource:
            return BinlogSource(
                self._mysql.pymysql_kwargs(), server_id=pipeline.source.server_id, database=self.database,
                start=start, selects=self._selected, key_overrides=self._key_overrides,
                name=pipeline.kafka.topic_prefix, blocking=self.blocking, heartbeat_seconds=self.heartbeat_seconds,
            )

        source = open_source(stats.start)
        topics: dict[str, str] = {}
        table_topic_config = retention_config(pipeline.kafka.retention_hours)
        partitions = pipeline.kafka.partitions
        send = publisher.send
        started = time.monotonic()
        last_log = last_activity = last_commit = started
        committed = saved = stats.start
        logged_events = events_seen = 0
        # the open unit of work: when its first change was sent, and how many changes it holds
        unit_opened: float | None = None
        unit_changes = 0
        # a source transaction longer than this is split (see _split), well inside transaction.timeout.ms
        split_after = publisher.transaction_timeout_s / 2 if publisher.transactional else float("inf")

        def checkpoint(*, heartbeat: bool = False, stopping: bool = False) -> None:
            """Commit the open unit with the progress up to ``committed`` (a heartbeat, or the record of a clean
            stop: even when nothing changed, so readers see the relay alive and caught up, or stopped)."""
            nonlocal saved, unit_opened, unit_changes, last_commit
            if unit_opened is None and committed == saved and not heartbeat and not stopping:
                return
            self._commit(publisher, RelayProgress(committed, covered_from, int(time.time() * 1000), stopping))
            saved, unit_opened, unit_changes, last_commit = committed, None, 0, time.monotonic()
            self._position = committed
            stats.position = committed
            self.metrics.relay_progress(committed, stats.tables)

        def finish(*, stopping: bool = False) -> None:
            """Commit what is whole (``stopping``: marked as the last record of a clean stop); a unit that ends
            inside a source transaction is aborted instead (never shown), and the next start republishes it
            from the last committed progress."""
            if in_source_transaction and publisher.transactional:
                publisher.abort()
            else:
                checkpoint(stopping=stopping)

        in_source_transaction = False
        try:
            while True:
                throttled = False
                for item in source:
                    if type(item) is ChangeEvent:
                        topic = topics.get(item.table)
                        if topic is None:
                            topic = topics[item.table] = pipeline.topic(item.table)
                            self.topics.ensure(topic, partitions=partitions, config=table_topic_config)
                        item.emitted_ms = int(time.time() * 1000)
                        key, value, headers = encode(item)
                        send(topic, key, value, headers)
                        stats.events += 1
                        unit_changes += 1
                        if unit_opened is None:
                            unit_opened = time.monotonic()
                        elif unit_changes & 0x3FF == 0 and time.monotonic() - unit_opened > split_after:
                            self._split(item.position, committed, split_after)
                            checkpoint()  # progress stays at the last whole source transaction
                        stats.tables[item.table] = stats.tables.get(item.table, 0) + 1
                        in_source_transaction = True
                        continue
                    now = time.monotonic()
                    if stats.events != events_seen:
                        last_activity, events_seen = now, stats.events
                    if type(item) is TransactionEnd:
                        committed = item.position
                        in_source_transaction = False
                        stats.transactions += 1
                        self._last_ts_ms = item.ts_ms
                        self._caught_up = False
                        if unit_opened is not None and (now - unit_opened >= settings.transaction_seconds
                                                        or unit_changes >= settings.transaction_max_changes):
                            checkpoint()
                        if max_events is not None and stats.events >= max_events:
                            break  # at a transaction end: everything up to it is in the open unit
                    elif type(item) is DdlStatement:
                        last_activity = now
                        for change in self._schema_events(item):
                            topic = pipeline.topic(SCHEMA_TOPIC_TABLE)
                            self.topics.ensure(topic, partitions=1)
                            send(topic, *encode_schema_change(change))
                            stats.schema_changes += 1
                            if unit_opened is None:
                                unit_opened = now
                    elif type(item) is Heartbeat:
                        self._caught_up = True
                        checkpoint(heartbeat=now - last_commit >= settings.heartbeat_seconds)
                    if unit_opened is None and committed != saved and now - last_commit >= settings.heartbeat_seconds:
                        checkpoint()  # transactions of other tables move the position on
                    if now - last_log >= self.log_every:
                        self._log_progress(conn, stats, stats.events - logged_events, now - last_log)
                        last_log, logged_events = now, stats.events
                    if self._stop_requested:
                        break
                    if stop_when_idle is not None and now - last_activity >= stop_when_idle:
                        log.info("no changes for %.1f s: stopping (--stop-when-idle)", now - last_activity)
                        break
                    if type(item) is TransactionEnd and self.backpressure.must_pause(lambda: checkpoint()):
                        throttled = True  # at a transaction end: nothing past `committed` was sent
                        break
                if not throttled:
                    break
                checkpoint()
                source.close()
                self.metrics.set_throttled(True)
                try:
                    self.backpressure.wait(lambda: self._stop_requested)
                finally:
                    self.metrics.set_throttled(False)
                if self._stop_requested:
                    break
                check_position_available(conn, committed)  # never silently skip a purged binlog
                source = open_source(committed)
                last_activity = time.monotonic()
            finish(stopping=True)
        except BrokerError:
            raise  # the open transaction is aborted (Publisher.close): nothing past the progress is visible
        except LakesyncError:
            finish()  # everything up to the last transaction end is safe; then report the problem
            raise
        finally:
            source.close()
            stats.elapsed_seconds += time.monotonic() - started
            log.info("relay stopped at %s: %d events, %d transactions, %d schema changes in %.1f s",
                     stats.position, stats.events, stats.transactions, stats.schema_changes, stats.elapsed_seconds)

    def _split(self, at: SourcePosition, progress: SourcePosition, limit_s: float) -> None:
        """Say so when a source transaction is committed to Kafka in parts (it has been open longer than half of
        the producer's ``transaction.timeout.ms``, where the broker would abort it and a retry would abort again).
        The progress stays at the last whole source transaction, so a crash republishes the parts; readers may
        see the first parts before the rest, which the sink's position rule keeps right."""
        if self._split_at != progress:
            self._split_at = progress
            log.warning("relay: the source transaction after %s is still open in Kafka after %.0f s (half of the "
                        "producer's transaction.timeout.ms); committing it in parts (now at %s)", progress, limit_s,
                        at)

    def _log_progress(self, conn: Any, stats: RelayStats, events: int, seconds: float) -> None:
        try:
            lag = self.lag(conn)
        except pymysql.err.MySQLError:
            lag = Lag(0.0, -1)
        self.metrics.relay_lag(lag.seconds, lag.bytes)
        log.info("relay at %s: %d events (%.0f/s), lag %.1f s / %d bytes",
                 stats.position, stats.events, events / seconds if seconds else 0.0, lag.seconds, lag.bytes)
