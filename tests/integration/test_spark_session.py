"""Under spark-submit, the launcher's master and ``--conf`` settings win over lakesync's local defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakesync.spark.session import submit_args

pytestmark = [pytest.mark.spark]

_APP = """
import json
from lakesync.spark.session import build_spark_session

spark = build_spark_session("session-test", extra_conf={"spark.lakesync.test": "from-caller"})
conf = spark.sparkContext.getConf()
print(json.dumps({"master": spark.sparkContext.master,
                  "partitions": conf.get("spark.sql.shuffle.partitions"),
                  "caller": conf.get("spark.lakesync.test"),
                  "zone": conf.get("spark.sql.session.timeZone")}))
spark.stop()
"""


def test_spark_submit_master_and_conf_are_kept(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(_APP)
    env = {key: value for key, value in os.environ.items() if key != "LAKESYNC_SPARK_MASTER"}
    env["PYSPARK_PYTHON"] = sys.executable
    done = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]", *submit_args(),
         "--conf", "spark.sql.shuffle.partitions=7", str(app)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [json.loads(text) for text in done.stdout.splitlines() if text.startswith("{")]
    # The launcher's choices stand; lakesync's defaults fill only what it left unset; the caller's own wins.
    assert line == {"master": "local[1]", "partitions": "7", "caller": "from-caller", "zone": "UTC"}
