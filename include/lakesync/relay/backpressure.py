"""Backpressure: the relay pauses reading the binlog while the stream is too far behind.

Source and sink don't know about each other; if the relay writes faster than the stream applies, the
table topics grow until retention deletes changes nobody has read. So the relay checks the stream's lag
(records between the stream's newest committed offsets and the log ends, :mod:`lakesync.stream.lag`)
every ``stream.backpressure_check_seconds`` and, above ``stream.backpressure_max_lag``, stops reading at
a transaction end, stores its progress there, and waits until the lag is back under the bound. Nothing
is dropped: the binlog keeps the changes (the relay checks the position is still on the server when it
reads on) and the relay resumes exactly where it stopped.

Throttling is logged (when it starts and ends) and written to ``<pipeline state dir>/relay_backpressure.json``
for ``lakesync status``. Before the stream's first committed batch there is no lag to measure (the stream
may not exist yet), so the relay does not throttle.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lakesync.core.config import Pipeline
from lakesync.core.errors import LakesyncError

log = logging.getLogger(__name__)

STATE_FILE = "relay_backpressure.json"


@dataclass
class BackpressureState:
    """What ``lakesync status`` shows: whether the relay is waiting for the stream, and why."""

    throttling: bool
    lag_records: int | None
    max_lag: int
    since_ms: int | None
    updated_ms: int
    throttled_seconds_total: float = 0.0

    def save(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(state_dir / STATE_FILE)


def load_state(state_dir: Path) -> dict[str, Any] | None:
    """The last backpressure state the relay wrote, or None (never throttled, or no relay yet)."""
    try:
        return json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def stream_lag_reader(pipeline: Pipeline) -> Callable[[], int | None]:
    """A function that measures the stream's lag in records now (None before its first committed batch)."""
    from lakesync.core.connections import kafka_client_config
    from lakesync.kafka.offsets import end_offsets, offset_consumer
    from lakesync.stream.app import checkpoint_dir
    from lakesync.stream.lag import committed_offsets, records_behind

    checkpoint = checkpoint_dir(pipeline)
    client = kafka_client_config(pipeline)

    def read() -> int | None:
        committed = committed_offsets(checkpoint)
        if committed is None:
            return None
        consumer = offset_consumer(client)
        try:
            return records_behind(committed, end_offsets(consumer, list(committed)))
        except LakesyncError as exc:
            # e.g. the topics the checkpoint names are gone (broker data loss): the stream will refuse to resume
            # and say so; the relay goes on unthrottled rather than dying on a measurement it can't make
            log.warning("backpressure: cannot measure the stream's lag (%s); not throttling", exc.message)
            return None
        finally:
            consumer.close()

    return read


class Backpressure:
    """Decides when the relay must pause, and waits while it must. ``max_lag`` None disables it."""

    def __init__(self, state_dir: Path, *, max_lag: int | None, check_seconds: float,
                 lag: Callable[[], int | None], sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state_dir = state_dir
        self.max_lag = max_lag
        self.check_seconds = check_seconds
        self._lag = lag
        self._sleep = sleep
        self._clock = clock
        self._last_check = -float("inf")
        self.throttled_seconds = 0.0
        self.pauses = 0

    @classmethod
    def for_pipeline(cls, pipeline: Pipeline) -> Backpressure:
        return cls(pipeline.pipeline_state_dir, max_lag=pipeline.stream.backpressure_max_lag,
                   check_seconds=pipeline.stream.backpressure_check_seconds, lag=stream_lag_reader(pipeline))

    def must_pause(self, flush: Callable[[], object] | None = None) -> bool:
        """Whether the stream is over the bound (measured at most every ``check_seconds``); ``flush`` runs
        before measuring, so the records still in the producer's buffer count."""
        if self.max_lag is None or self._clock() - self._last_check < self.check_seconds:
            return False
        self._last_check = self._clock()
        if flush is not None:
            flush()
        lag = self._lag()
        return lag is not None and lag > self.max_lag

    def wait(self, should_stop: Callable[[], bool]) -> None:
        """Wait until the stream's lag is back under the bound (or ``should_stop``), saying so."""
        assert self.max_lag is not None
        started = self._clock()
        since_ms = int(time.time() * 1000)
        self.pauses += 1
        lag = self._lag()
        log.warning("relay throttled: the stream is %s records behind (bound %d, stream.backpressure_max_lag); "
                    "binlog reading paused, nothing is dropped", lag, self.max_lag)
        while lag is not None and lag > self.max_lag and not should_stop():
            self._save(True, lag, since_ms, started)
            self._sleep(self.check_seconds)
            lag = self._lag()
        waited = self._clock() - started
        self.throttled_seconds += waited
        self._last_check = self._clock()
        self._save(False, lag, None, None)
        log.info("relay released after %.1f s: the stream is %s records behind (bound %d)", waited, lag, self.max_lag)

    def _save(self, throttling: bool, lag: int | None, since_ms: int | None, started: float | None) -> None:
        extra = self._clock() - started if started is not None else 0.0
        BackpressureState(throttling, lag, self.max_lag or 0, since_ms, int(time.time() * 1000),
                          round(self.throttled_seconds + extra, 3)).save(self.state_dir)
