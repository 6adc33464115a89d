"""Debezium over a benchmark workload: primed before the workload is written, then timed over it, as often
as asked, each time over exactly the same binlog events.

Priming starts the connector once with ``snapshot.mode=no_data`` on the benchmark's (empty) table: it records
the schema and the current binlog position, the one the relay is given as ``from_position``; a graceful stop
flushes that position to the offsets file. Its offsets and schema history are kept, and every timed run starts
from a copy of them, so each run re-reads the same events into the same topic (pre-created with
``LogAppendTime``); a run's records are the ones past the topic's end when it started.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from lakesync.core.errors import StackError
from lakesync.core.positions import SourcePosition
from lakesync_devkit.bench.append_times import (
    TopicWindow,
    create_log_append_topic,
    end_offset,
    read_window,
    wait_for_offset,
)
from lakesync_devkit.dev.debezium import ConnectorSettings, DebeziumConnect
from lakesync_devkit.dev.stack import DevStack


@dataclass
class DebeziumRun:
    """One timed run: what it wrote (``window``), when its JVM was launched, its peak RSS."""

    window: TopicWindow
    launched_at: float
    peak_rss_mb: float

    @property
    def start_seconds(self) -> float:
        """JVM launch to the first record's append (start-up, connector start, binlog connect)."""
        return self.window.first_ms / 1000 - self.launched_at


_OFFSET_JSON = re.compile(rb'\{"[^{}]*"file":"[^{}]*"pos":\d+[^{}]*\}')


def stored_position(offsets: bytes) -> SourcePosition:
    """The binlog position in a Connect standalone offsets file (a Java-serialized map whose values are the
    connector's offsets as JSON: ``{"file": ..., "pos": ..., "gtids": ...}``)."""
    found = _OFFSET_JSON.findall(offsets)
    if len(found) != 1:
        raise StackError(f"expected one Debezium offset in the offsets file, found {len(found)}")
    offset = json.loads(found[0])
    return SourcePosition(offset["file"], int(offset["pos"]))


class DebeziumRuns:
    """Debezium for one benchmark table, in its own folder under the stack's state folder."""

    def __init__(self, stack: DevStack, database: str, table: str, *, server_id: int, home: Path) -> None:
        self.stack = stack
        self.connector = ConnectorSettings(
            databases=(database,), tables=(f"{database}.{table}",), topic_prefix=f"dbzbench{server_id}",
            snapshot_mode="no_data", server_id=server_id, name="bench-debezium")
        self.topic = f"{self.connector.topic_prefix}.{database}.{table}"
        self.home = home
        self._primed = home / "primed"
        self.settings: dict[str, str] = {}
        #: the binlog position priming recorded: where every timed run starts
        self.position: SourcePosition | None = None

    def _worker(self) -> DebeziumConnect:
        return self.stack.debezium(self.connector, home=self.home)

    def prime(self) -> SourcePosition:
        """Record the current binlog position as the connector's (call it before the workload is written);
        returns that position, read back from the offsets file."""
        create_log_append_topic(self.stack.broker.bootstrap, self.topic)
        connect = self.stack.start_debezium(self.connector, home=self.home)
        try:
            connect.wait_streaming()
        finally:
            connect.stop()
        if not connect.offsets_file.is_file() or not connect.offsets_file.stat().st_size:
            raise StackError(f"Debezium stopped without storing its position in {connect.offsets_file}",
                             hint=f"see {connect.log_file}")
        self.position = stored_position(connect.offsets_file.read_bytes())
        self._primed.mkdir(parents=True, exist_ok=True)
        shutil.copy2(connect.offsets_file, self._primed / "offsets")
        shutil.copy2(connect.history_file, self._primed / "history")
        self.settings = {key: value for key, value in connect.worker_properties().items()
                         if key.startswith("producer.")} | {"heap": " ".join(connect.heap)}
        return self.position

    def run(self, expected_records: int, *, timeout: float = 900.0) -> DebeziumRun:
        """Start from the primed position, wait for ``expected_records`` new records, stop; what it wrote."""
        connect = self._worker()
        connect.offsets_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self._primed / "offsets", connect.offsets_file)
        shutil.copy2(self._primed / "history", connect.history_file)
        bootstrap = self.stack.broker.bootstrap
        start = end_offset(bootstrap, self.topic)
        connect = self.stack.start_debezium(self.connector, home=self.home)
        try:
            wait_for_offset(bootstrap, self.topic, start + expected_records, timeout=timeout, check=connect.check,
                            what="Debezium")
            peak = connect.peak_rss_mb() or 0.0
        finally:
            connect.stop()
        return DebeziumRun(read_window(bootstrap, self.topic, start), connect.launched_at, peak)
