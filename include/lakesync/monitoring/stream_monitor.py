"""What the stream reports about itself: metrics (served while it runs) and the history table.

:class:`BatchApplier` makes one and calls :meth:`StreamMonitor.batch` once per micro-batch; ``run_stream``
opens and closes it around the query. Kept out of the stream's modules so their hooks stay one line each.
"""

from __future__ import annotations

from lakesync.core.config import Pipeline
from lakesync.monitoring.history import HistoryRecorder
from lakesync.monitoring.metrics import STREAM_PORT_OFFSET, PipelineMetrics
from lakesync.stream.progress import StreamProgress


class StreamMonitor:
    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.metrics = PipelineMetrics(pipeline)
        self.history = HistoryRecorder(pipeline)
        self.url: str | None = None

    def open(self, *, serve: bool) -> None:
        """Serve the metrics (continuous streams only: an ``--once`` run ends before anyone scrapes it)."""
        if serve:
            self.url = self.metrics.serve(self.pipeline.monitoring.metrics_address, port_offset=STREAM_PORT_OFFSET)

    def batch(self, batch_id: int, progress: StreamProgress, seconds: float) -> None:
        self.metrics.stream_batch(batch_id, progress, seconds)
        self.history.batch(batch_id, progress)

    def failed(self, exc: BaseException) -> None:
        self.metrics.error("stream", exc)

    def close(self, progress: StreamProgress) -> None:
        """Write the last (partial) interval and stop serving."""
        self.history.flush(progress)
        self.metrics.close()
