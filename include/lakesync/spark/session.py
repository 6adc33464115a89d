"""Building the SparkSession lakesync's apps and tests run in.

Defaults suit one machine (local mode, few shuffle partitions, no UI). Under ``spark-submit`` the launcher's
master and ``--conf`` settings win: a builder setting would otherwise override them (PySpark's
``getOrCreate`` applies the builder's options on top of the launcher's), so lakesync's defaults fill only
the keys the launcher left unset.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from lakesync.core.errors import LakesyncError


def _launcher_conf() -> dict[str, str]:
    """The settings ``spark-submit`` gave this driver (its master, ``--conf``, spark-defaults), or nothing
    outside it. spark-submit starts the JVM first and hands Python its gateway in ``PYSPARK_GATEWAY_PORT``."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    SparkContext._ensure_initialized()  # connects to the launcher's JVM; SparkConf reads its settings there
    return dict(SparkConf().getAll())


def build_spark_session(app_name: str, *, master: str | None = None, extra_conf: dict[str, str] | None = None
                        ) -> SparkSession:
    """A session named ``app_name``: ``master`` and ``extra_conf`` always apply; otherwise the launcher's
    settings, then lakesync's defaults (``LAKESYNC_SPARK_MASTER``, else ``local[2]``)."""
    # Python workers must run this interpreter, or they won't find lakesync and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    launcher = _launcher_conf()
    builder = SparkSession.builder.appName(app_name)
    if master or "spark.master" not in launcher:
        builder = builder.master(master or os.environ.get("LAKESYNC_SPARK_MASTER", "local[2]"))
    defaults = {
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": os.environ.get("LAKESYNC_SPARK_DRIVER_MEMORY", "2g"),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
    }
    settings = {key: value for key, value in defaults.items() if key not in launcher}
    for key, value in {**settings, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def run_spark_app(app_name: str, work: Callable[[SparkSession], Iterable[dict[str, object]]]) -> int:
    """The body of a ``spark_apps/`` entry point: a session, one JSON line per result, a clean exit code.

    A :class:`LakesyncError` is printed as its message (no traceback) and becomes the exit code, so
    Airflow's SparkSubmitOperator fails the task with a readable log line.
    """
    spark = build_spark_session(app_name)
    try:
        for line in work(spark):
            print(json.dumps(line, default=str), flush=True)
    except LakesyncError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        spark.stop()
    return 0
