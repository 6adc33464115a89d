"""Building the SparkSession lakesync's apps and tests run in.

Defaults suit one machine (local mode, few shuffle partitions, no UI); ``spark-submit`` settings given by
the caller (master, conf) win, because ``getOrCreate`` keeps what the launcher already set.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable

from pyspark.sql import SparkSession

from lakesync.core.errors import LakesyncError


def build_spark_session(app_name: str, *, master: str | None = None, extra_conf: dict[str, str] | None = None
                        ) -> SparkSession:
    # Python workers must run this interpreter, or they won't find lakesync and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    # spark-submit starts the Python driver with its gateway already running (PYSPARK_GATEWAY_PORT) and its
    # --master in the JVM's conf: setting a master here would silently turn a cluster job into a local one.
    if master or not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.master(master or os.environ.get("LAKESYNC_SPARK_MASTER", "local[2]"))
    defaults = {
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": os.environ.get("LAKESYNC_SPARK_DRIVER_MEMORY", "2g"),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
    }
    for key, value in {**defaults, **(extra_conf or {})}.items():
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
