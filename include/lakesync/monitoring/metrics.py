"""OpenMetrics/Prometheus figures of the relay and the stream, served on ``monitoring.metrics_address``.

Each long-running process (the relay, a continuous stream) owns one :class:`PipelineMetrics` with its own
registry, and serves it with ``prometheus_client``'s HTTP server only when the pipeline names an address
(off by default; docs/configuration.md). The stream serves on the configured port + 1, so a relay and a
stream on one machine don't collide. The metric names, their labels and a sample alert rule are listed in
docs/operations.md ("Metrics"); the tests scrape them during a real stream.

The hooks in the relay and the stream are one call per batch or progress save: the figures are read from
what those loops already keep (``StreamProgress``, ``RelayStats``), never computed a second time; the
stream's lag is measured once per batch by :class:`lakesync.monitoring.stream_monitor.StreamMonitor`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from lakesync.core.config import Pipeline
from lakesync.core.errors import ConfigError
from lakesync.core.positions import SourcePosition
from lakesync.stream.progress import StreamProgress

log = logging.getLogger(__name__)

STREAM_PORT_OFFSET = 1
_BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class PipelineMetrics:
    """The metric families of one pipeline, in a registry of their own (tests make several per process)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline.name
        self.registry = registry = CollectorRegistry()
        table = ["pipeline", "table"]
        self.changes_applied = Counter("lakesync_stream_changes_applied", "Changes merged into Delta, per table",
                                       table, registry=registry)
        self.batches = Counter("lakesync_stream_batches", "Micro-batches the stream finished", ["pipeline"],
                               registry=registry)
        self.batch_duration = Histogram("lakesync_stream_batch_duration_seconds",
                                        "Time to decode and merge one micro-batch", ["pipeline"],
                                        buckets=_BATCH_BUCKETS, registry=registry)
        self.apply_lag = Gauge("lakesync_stream_apply_lag_seconds",
                               "After the newest batch: how far the oldest change not applied was behind (0: "
                               "nothing pending)", table, registry=registry)
        self.stopped = Gauge("lakesync_table_stopped", "1 when the stream stopped applying a table's changes",
                             table, registry=registry)
        self.relay_events = Counter("lakesync_relay_events", "Row changes the relay sent to Kafka, per table",
                                    table, registry=registry)
        self.relay_binlog_file = Gauge("lakesync_relay_binlog_file_index",
                                       "Sequence number of the binlog file of the relay's stored position",
                                       ["pipeline"], registry=registry)
        self.relay_binlog_offset = Gauge("lakesync_relay_binlog_offset_bytes",
                                         "Offset in that binlog file of the relay's stored position",
                                         ["pipeline"], registry=registry)
        self.relay_lag_seconds = Gauge("lakesync_relay_lag_seconds",
                                       "Seconds since the last relayed commit (0 when caught up)", ["pipeline"],
                                       registry=registry)
        self.relay_lag_bytes = Gauge("lakesync_relay_lag_bytes", "Binlog bytes the relay has not read yet",
                                     ["pipeline"], registry=registry)
        self.relay_throttled = Gauge("lakesync_relay_throttled",
                                     "1 while the relay holds back because the stream is behind (backpressure)",
                                     ["pipeline"], registry=registry)
        self.errors = Counter("lakesync_errors", "Errors that stopped a component, by error class",
                              ["pipeline", "component", "error"], registry=registry)
        self._relay_events_seen: dict[str, int] = {}
        self._server: Any = None

    # -- the stream -------------------------------------------------------------------------------------
    def stream_batch(self, batch_id: int, progress: StreamProgress, seconds: float,
                     lags: Mapping[str, float]) -> None:
        """After a batch: count what it applied (the tables whose progress names this batch) and set each
        table's lag as measured then (``lags``: :meth:`lakesync.monitoring.stream_monitor.StreamMonitor.lags`;
        a table it leaves out keeps its last value)."""
        self.batches.labels(self.pipeline).inc()
        self.batch_duration.labels(self.pipeline).observe(seconds)
        for table, state in progress.tables.items():
            if state.last_batch_id == batch_id and state.last_batch_rows:
                self.changes_applied.labels(self.pipeline, table).inc(state.last_batch_rows)
            if table in lags:
                self.apply_lag.labels(self.pipeline, table).set(lags[table])
            self.stopped.labels(self.pipeline, table).set(1 if state.stopped_reason else 0)

    # -- the relay --------------------------------------------------------------------------------------
    def relay_progress(self, position: SourcePosition | None, tables: dict[str, int]) -> None:
        """After a progress save: the stored position and the events sent per table (running totals)."""
        if position is not None:
            self.relay_binlog_file.labels(self.pipeline).set(_file_index(position.file))
            self.relay_binlog_offset.labels(self.pipeline).set(position.offset)
        for table, total in tables.items():
            new = total - self._relay_events_seen.get(table, 0)
            if new > 0:
                self.relay_events.labels(self.pipeline, table).inc(new)
                self._relay_events_seen[table] = total

    def relay_lag(self, seconds: float, bytes_behind: int) -> None:
        self.relay_lag_seconds.labels(self.pipeline).set(seconds)
        if bytes_behind >= 0:
            self.relay_lag_bytes.labels(self.pipeline).set(bytes_behind)

    def set_throttled(self, throttled: bool) -> None:
        """For the relay's backpressure: 1 while it holds back."""
        self.relay_throttled.labels(self.pipeline).set(1 if throttled else 0)

    # -- both -------------------------------------------------------------------------------------------
    def error(self, component: str, exc: BaseException) -> None:
        self.errors.labels(self.pipeline, component, type(exc).__name__).inc()

    def serve(self, address: str | None, *, port_offset: int = 0) -> str | None:
        """Serve the registry on ``address`` (+ ``port_offset``); returns the URL, or None when off."""
        if address is None:
            return None
        host, _, port = address.rpartition(":")
        port_number = int(port) + port_offset
        host = host.strip("[]")
        try:
            self._server, _ = start_http_server(port_number, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {host}:{port_number}: {exc}",
                              hint="pick a free port in monitoring.metrics_address, or unset it") from exc
        url = f"http://{address.rpartition(':')[0]}:{port_number}/metrics"
        log.info("metrics of pipeline %s at %s", self.pipeline, url)
        return url

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _file_index(binlog_file: str) -> int:
    """``mysql-bin.000042`` -> 42 (a gauge needs a number; 0 when the name has no numeric suffix)."""
    suffix = binlog_file.rpartition(".")[2]
    return int(suffix) if suffix.isdigit() else 0
