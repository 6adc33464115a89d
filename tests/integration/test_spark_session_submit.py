"""Under ``spark-submit`` the launcher's master wins: a cluster job must not silently run in local mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

_APP = """
from lakesync.spark.session import build_spark_session
spark = build_spark_session("master-probe")
print("MASTER=" + spark.sparkContext.master)
spark.stop()
"""


def test_spark_submit_master_is_kept_by_the_session(tmp_path: Path):
    app = tmp_path / "probe.py"
    app.write_text(_APP)
    env = {key: value for key, value in os.environ.items() if key != "LAKESYNC_SPARK_MASTER"}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    submit = Path(sys.executable).parent / "spark-submit"
    done = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(app)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert "MASTER=local[1]" in done.stdout, done.stdout[-1000:] + done.stderr[-2000:]
