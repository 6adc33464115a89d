"""``lakesync status`` from real state files, real Delta tables and the relay's progress on the real broker."""

from __future__ import annotations

import json
import time
import uuid

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakesync.cli.main import main
from lakesync.core.config import parse_pipeline
from lakesync.core.positions import SourcePosition
from lakesync.full_load.state import LoadState
from lakesync.monitoring.status import pipeline_status
from lakesync.relay.offsets import ProgressStore, RelayProgress
from lakesync.relay.publisher import Publisher
from lakesync.relay.topics import TopicManager
from lakesync.stream.progress import StreamProgress

pytestmark = pytest.mark.integration

LOAD_POS = SourcePosition("binlog.000002", 4000)
TABLE = "orders ä`x"


@pytest.fixture
def pipeline(broker, tmp_path):
    return parse_pipeline({
        "name": "watched",
        "source": {"conn_id": "unused", "database": "shop"},
        "tables": {"overrides": {"audit": {"semantics": "append_log"},
                                 TABLE: {"key_columns": ["id"]}}},
        "kafka": {"bootstrap_servers": broker.bootstrap, "topic_prefix": f"st{uuid.uuid4().hex[:8]}"},
        "delta": {"root": str(tmp_path / "delta")},
        "stream": {"lag_alert_seconds": 60},
        "state_dir": str(tmp_path / "state"),
    }, source_name="watched.yaml")


def write_state(pipeline) -> None:
    load = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir)
    load.record_position(LOAD_POS)
    entry = load.table(TABLE)
    entry.status, entry.rows, entry.position_key, entry.mode, entry.delta_version = "done", 3, LOAD_POS.key(), \
        "consistent", 0
    load.mode, load.started_at, load.finished_at = "consistent", "2026-11-22T00:00:00Z", "2026-11-22T00:01:00Z"
    load.save()
    progress = StreamProgress()
    applied = LOAD_POS.with_row(1).key()
    progress.record(TABLE, batch_id=4, rows=2, position=applied, source_ts_ms=int(time.time() * 1000) - 120_000)
    progress.tables[TABLE].stopped_reason = "schema change: DROP COLUMN note"
    progress.save(pipeline.pipeline_state_dir)
    rows = pa.table({"id": [1, 2, 3], "_lakesync_pos": [LOAD_POS.key(), LOAD_POS.key(), applied],
                     "_lakesync_op": ["r", "r", "u"], "_lakesync_ts_ms": [0, 0, 0]})
    write_deltalake(pipeline.delta.table_uri(TABLE), rows)


def test_status_reports_load_stream_delta_and_lag_per_table(pipeline):
    write_state(pipeline)
    status = pipeline_status(pipeline, relay=False)
    json.dumps(status)
    assert "relay" not in status
    assert status["full_load"]["position"] == LOAD_POS.key()
    by_name = {entry["table"]: entry for entry in status["tables"]}
    assert set(by_name) == {TABLE, "audit"}
    orders = by_name[TABLE]
    assert orders["key_columns"] == ["id"]
    assert orders["full_load"]["rows"] == 3 and orders["full_load"]["finished_at"] == "2026-11-22T00:01:00Z"
    assert orders["stream"]["applied_position"] == LOAD_POS.with_row(1).key()
    assert orders["stream"]["last_batch_rows"] == 2
    assert orders["stream"]["stopped_reason"].startswith("schema change")
    # without the broker (relay=False) no lag is known; the newest change being 2 minutes old is not lag
    assert orders["stream"]["lag_seconds"] is None and orders["stream"]["pending"] is None
    assert orders["lagging"] is False
    assert orders["delta"] == {"version": 0, "files": 1, "rows": 3, "max_position": LOAD_POS.with_row(1).key()}
    assert orders["applied_position"] == LOAD_POS.with_row(1).key()  # the one answer, as the view shows it
    assert by_name["audit"]["applied_position"] is None
    assert orders["last_validation"] is None
    assert by_name["audit"]["semantics"] == "append_log" and by_name["audit"]["delta"] is None


def test_status_shows_the_relay_position_from_its_offsets_topic(pipeline):
    assert pipeline_status(pipeline)["relay"]["position"] is None  # never ran
    store = ProgressStore.for_pipeline(pipeline)
    publisher = Publisher({"bootstrap.servers": pipeline.kafka.bootstrap_servers})
    store.ensure_topic(TopicManager({"bootstrap.servers": pipeline.kafka.bootstrap_servers}))
    store.save(RelayProgress(SourcePosition("binlog.000002", 9000), LOAD_POS, int(time.time() * 1000)), publisher)
    relay = pipeline_status(pipeline)["relay"]
    assert relay["position"] == SourcePosition("binlog.000002", 9000).key()
    assert relay["covered_from"] == LOAD_POS.key()


def test_status_says_when_the_broker_cannot_be_read(pipeline):
    unreachable = pipeline.model_copy(update={"kafka": pipeline.kafka.model_copy(
        update={"bootstrap_servers": "127.0.0.1:1"})})
    relay = pipeline_status(unreachable, relay_timeout_s=1)["relay"]
    assert "error" in relay


def test_status_cli_prints_json_and_a_table(pipeline, tmp_path, monkeypatch, capsys):
    import yaml

    write_state(pipeline)
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "watched.yaml").write_text(yaml.safe_dump(pipeline.model_dump(), allow_unicode=True))
    monkeypatch.setenv("LAKESYNC_PIPELINES_DIR", str(folder))
    monkeypatch.setenv("COLUMNS", "240")
    assert main(["status", "--pipeline", "watched", "--json", "--no-relay"]) == 0
    assert {t["table"] for t in json.loads(capsys.readouterr().out)["tables"]} == {TABLE, "audit"}
    assert main(["status", "--pipeline", "watched"]) == 0
    out = capsys.readouterr().out
    assert TABLE in out and "relay:" in out
