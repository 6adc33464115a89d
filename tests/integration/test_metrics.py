"""The relay's and the stream's metrics endpoints scraped while they run, against what Delta holds; and the
stream's history table filling during the run."""

from __future__ import annotations

import random
import re
import socket
import threading
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml
from lakesync_devkit.dev.processes import free_port
from lakesync_devkit.dev.stack import KAFKA_CONN_ID, MYSQL_CONN_ID

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.core.table_layout import POS
from lakesync.full_load.load import FullLoad
from lakesync.full_load.state import LoadState
from lakesync.monitoring.history import read_history
from lakesync.monitoring.metrics import STREAM_PORT_OFFSET
from lakesync.relay import Relay, covered_range
from lakesync.source.server_checks import current_position
from lakesync.stream.app import run_stream
from tests.deltakit import delta_table

pytestmark = [pytest.mark.integration, pytest.mark.spark]

INSERTS = 40
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _pipeline(folder: Path, database: str, port: int) -> Pipeline:
    server_id = random.randrange(5_000, 60_000)
    (folder / "pipelines").mkdir()
    (folder / "pipelines" / "metered.yaml").write_text(yaml.safe_dump({
        "name": "metered",
        "source": {"conn_id": MYSQL_CONN_ID, "database": database, "server_id": server_id},
        "kafka": {"conn_id": KAFKA_CONN_ID, "topic_prefix": f"mt{server_id}{uuid.uuid4().hex[:6]}"},
        "delta": {"root": str(folder / "delta")},
        "state_dir": str(folder / "state"),
        "stream": {"trigger_seconds": 1},
        "monitoring": {"metrics_address": f"127.0.0.1:{port}", "history_interval_seconds": 1},
    }))
    return load_pipeline("metered", folder / "pipelines")


def scrape(port: int) -> dict[str, float]:
    """``{"name{labels}": value}`` of every sample the endpoint serves (empty when nothing listens)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    samples = {}
    for line in text.splitlines():
        match = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+|NaN)$", line)
        if match:
            samples[match.group(1)] = float(match.group(2))
    return samples


def _free_port_pair() -> int:
    """A port for the relay's metrics whose neighbour at STREAM_PORT_OFFSET, the stream's, is free too."""
    for _ in range(50):
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port + STREAM_PORT_OFFSET))
            except OSError:
                continue
        return port
    raise AssertionError("no two free neighbouring ports for the metrics endpoints")


def _until(what: str, check, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_metrics_scraped_during_a_real_stream_agree_with_delta_and_the_history_fills(
        stack, mariadb, fresh_database, tmp_path, spark, monkeypatch):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, label VARCHAR(40) NOT NULL)")
        cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, f"item {i}") for i in range(1, 21)])
    port = _free_port_pair()
    pipeline = _pipeline(tmp_path, fresh_database, port)
    FullLoad(pipeline=pipeline).run()
    loaded_at = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables["items"].position_key

    relay = Relay(pipeline, heartbeat_seconds=0.3, log_every_seconds=0.5)
    relay_thread = threading.Thread(target=relay.run, daemon=True)
    relay_thread.start()
    stream_error: list[BaseException] = []

    def stream() -> None:
        try:
            run_stream(pipeline, once=False, spark=spark, timeout_seconds=300)
        except BaseException as exc:  # re-raised by the assertions below
            stream_error.append(exc)

    stream_thread = threading.Thread(target=stream, daemon=True)
    try:
        with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
            for i in range(21, 21 + INSERTS):
                cur.execute("INSERT INTO items VALUES (%s, %s)", (i, f"new {i}"))
            cur.execute("UPDATE items SET label = 'changed' WHERE id = 1")
            target = current_position(conn).key()
        _until("the relay to cover the changes", lambda: (covered_range(pipeline) or ("", ""))[1] >= target)
        table = '{pipeline="metered",table="items"}'
        relay_figures = _until("the relay's metrics", lambda: (s := scrape(port)).get(
            f"lakesync_relay_events_total{table}", 0) >= INSERTS + 1 and "lakesync_relay_lag_bytes"
            '{pipeline="metered"}' in s and s)
        assert relay_figures[f"lakesync_relay_events_total{table}"] == INSERTS + 1
        assert relay_figures['lakesync_relay_binlog_offset_bytes{pipeline="metered"}'] > 0

        stream_thread.start()
        figures = _until("the stream to apply every change", lambda: not stream_error and (
            s := scrape(port + STREAM_PORT_OFFSET)).get(f"lakesync_stream_changes_applied_total{table}", 0)
            >= INSERTS + 1 and s)
        assert not stream_error, stream_error
        history = _until("history rows written during the run", lambda: read_history(pipeline, since=EPOCH))
    finally:
        relay.stop()
        for query in spark.streams.active:
            query.stop()
        if stream_thread.is_alive():
            stream_thread.join(60)
        relay_thread.join(30)

    rows = delta_table(pipeline.delta.table_uri("items")).select([POS])
    applied_in_delta = pc.sum(pc.greater(rows[POS], loaded_at)).as_py()
    assert figures[f"lakesync_stream_changes_applied_total{table}"] == applied_in_delta == INSERTS + 1
    assert rows.num_rows == 20 + INSERTS
    assert figures['lakesync_stream_batches_total{pipeline="metered"}'] >= 1
    assert figures['lakesync_stream_batch_duration_seconds_count{pipeline="metered"}'] == \
        figures['lakesync_stream_batches_total{pipeline="metered"}']
    assert 0 <= figures[f"lakesync_stream_apply_lag_seconds{table}"] < 3600
    assert figures[f"lakesync_table_stopped{table}"] == 0
    assert history and {row["table"] for row in history} == {"items"}
    final = read_history(pipeline, since=EPOCH)
    assert sum(row["changes"] for row in final) == INSERTS + 1, "every applied change is in exactly one interval"
