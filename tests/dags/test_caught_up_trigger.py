"""The caught-up trigger fires once every table's applied position reaches its target, and not before."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import yaml
from deltalake import write_deltalake
from lakesync_devkit.dev.airflow_runner import AirflowRunner

_RUN_TRIGGER = """
import asyncio, json, sys
from lakesync_airflow.triggers import StreamCaughtUpTrigger
targets = json.loads(sys.argv[1])
trigger = StreamCaughtUpTrigger("tr", targets, poll_seconds=0.2, deadline=float(sys.argv[2]))
classpath, kwargs = trigger.serialize()
async def first_event():
    async for event in trigger.run():
        return event.payload
print("RESULT " + json.dumps({"classpath": classpath, "event": asyncio.run(first_event())}))
"""

KEY = "00000001.{:012d}.000000"


@pytest.fixture
def runner(tmp_path) -> AirflowRunner:
    pipelines, delta = tmp_path / "pipelines", tmp_path / "delta"
    pipelines.mkdir()
    (pipelines / "tr.yaml").write_text(yaml.safe_dump({
        "name": "tr", "source": {"conn_id": "x", "database": "db"},
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "tr"},
        "delta": {"root": str(delta)}, "state_dir": str(tmp_path / "state"),
    }))
    write_deltalake(str(delta / "orders"), pa.table({"id": [1, 2], "_lakesync_pos": [KEY.format(100), KEY.format(250)]}))
    return AirflowRunner(tmp_path / "airflow", connections={}, pipelines_dir=pipelines)


def _fire(runner: AirflowRunner, targets: dict[str, str], *, deadline: float) -> dict:
    runner.env["PYTHONPATH"] = runner.env["AIRFLOW__CORE__PLUGINS_FOLDER"]
    done = runner.run("-c", _RUN_TRIGGER, json.dumps(targets), str(deadline))
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    raise AssertionError(done.stderr[-3000:])


def test_trigger_fires_when_every_table_reached_its_target(runner):
    result = _fire(runner, {"orders": KEY.format(250)}, deadline=9e12)
    assert result["classpath"] == "lakesync_airflow.triggers.StreamCaughtUpTrigger"
    assert result["event"] == {"status": "caught_up", "applied": {"orders": KEY.format(250)}}


def test_trigger_times_out_naming_the_tables_behind(runner):
    result = _fire(runner, {"orders": KEY.format(300), "missing": KEY.format(1)}, deadline=0)
    assert result["event"]["status"] == "timeout"
    assert set(result["event"]["behind"]) == {"orders", "missing"}
