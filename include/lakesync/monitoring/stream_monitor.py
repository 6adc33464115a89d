"""What the stream reports about itself: metrics (served while it runs) and the history table.

:class:`BatchApplier` makes one and calls :meth:`StreamMonitor.batch` once per micro-batch; ``run_stream``
opens and closes it around the query. Kept out of the stream's modules so their hooks stay one line each.

After each batch it measures each table's lag the way ``lakesync status`` does (:mod:`lakesync.stream.lag`):
the batch's planned ends (the offsets the stream reads next) against the log ends now, so a table that had
no change for hours is not lagging. A measurement that fails is logged and skipped: it is observation only.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from confluent_kafka import Consumer

from lakesync.core.config import Pipeline
from lakesync.core.connections import kafka_client_config
from lakesync.core.errors import LakesyncError
from lakesync.monitoring.history import HistoryRecorder
from lakesync.monitoring.metrics import STREAM_PORT_OFFSET, PipelineMetrics
from lakesync.stream.lag import backlog_consumer, planned_offsets, table_backlogs
from lakesync.stream.progress import StreamProgress

log = logging.getLogger(__name__)


class StreamMonitor:
    def __init__(self, pipeline: Pipeline, checkpoint: Path) -> None:
        self.pipeline = pipeline
        self.checkpoint = checkpoint
        self.metrics = PipelineMetrics(pipeline)
        self.history = HistoryRecorder(pipeline)
        self.url: str | None = None
        self._consumer: Consumer | None = None

    def open(self, *, serve: bool) -> None:
        """Serve the metrics (continuous streams only: an ``--once`` run ends before anyone scrapes it)."""
        if serve:
            self.url = self.metrics.serve(self.pipeline.monitoring.metrics_address, port_offset=STREAM_PORT_OFFSET)

    def batch(self, batch_id: int, progress: StreamProgress, seconds: float, tables: list[str]) -> None:
        """After batch ``batch_id``: metrics and history, with the lag of ``tables`` (the query's: a table it does
        not read has no offsets in its checkpoint, and measuring it would scan its topic up to its handoff)."""
        lags = self.lags(batch_id, tables)
        self.metrics.stream_batch(batch_id, progress, seconds, lags)
        self.history.batch(batch_id, progress, lags)

    def lags(self, batch_id: int, tables: list[str]) -> dict[str, float]:
        """Per table, its lag once batch ``batch_id`` is applied; empty when it can't be measured."""
        offsets = planned_offsets(self.checkpoint, batch_id)
        if offsets is None or not tables:
            return {}
        try:
            if self._consumer is None:
                self._consumer = backlog_consumer(kafka_client_config(self.pipeline))
            backlogs = table_backlogs(self.pipeline, self._consumer, tables, offsets, timeout=3.0)
        except LakesyncError as exc:
            log.warning("could not measure the stream's lag after batch %d (not shown this time): %s", batch_id,
                        exc.message)
            return {}
        now_ms = int(time.time() * 1000)
        return {name: backlog.lag_seconds(now_ms) for name, backlog in backlogs.items()}

    def failed(self, exc: BaseException) -> None:
        self.metrics.error("stream", exc)

    def close(self, progress: StreamProgress) -> None:
        """Write the last (partial) interval and stop serving."""
        self.history.flush(progress)
        self.metrics.close()
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
