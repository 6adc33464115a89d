"""Building the SparkSession lakesync's apps and tests run in: delta-spark and Spark's Kafka connector on the
classpath, Delta's SQL extension and catalog, and settings that suit small jobs.

The jars are the ``spark`` set of ``lakesync/jvm/jars.toml``, from lakesync's jar cache (fetched once,
:mod:`lakesync.jvm.fetch`), given to Spark as local paths (``spark.jars``), so nothing resolves through Ivy and
the state of ``~/.m2`` or ``~/.ivy2`` doesn't matter; the driver serves them to a cluster's executors. With
them goes lakesync's Delta LogStore for S3 (:mod:`lakesync.jvm.log_store`, built once from its source with a
JDK): Delta's own can lose a commit when two drivers (the stream, a settlement, maintenance) write one S3
table, and the LogStore is chosen at launch, so every session carries it.

Defaults suit one machine (local mode, few shuffle partitions, no UI) and the many small jobs a stream runs
(see :data:`SPARK_DEFAULTS`). Under ``spark-submit`` the launcher's master and ``--conf`` settings win: a
builder setting would otherwise override them (PySpark's ``getOrCreate`` applies the builder's options on top
of the launcher's), so lakesync's defaults fill only the keys the launcher left unset; the launcher must have
been given :func:`submit_conf` (jars and Delta's extension), which the Airflow operator and the dev kit do.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterable

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from lakesync.core.errors import LakesyncError
from lakesync.jvm.fetch import ensure_jars
from lakesync.jvm.log_store import log_store_conf, log_store_jar

log = logging.getLogger(__name__)


def _launcher_conf() -> dict[str, str]:
    """The settings ``spark-submit`` gave this driver (its master, ``--conf``, spark-defaults), or nothing
    outside it. spark-submit starts the JVM first and hands Python its gateway in ``PYSPARK_GATEWAY_PORT``."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    SparkContext._ensure_initialized()  # connects to the launcher's JVM; SparkConf reads its settings there
    return dict(SparkConf().getAll())


#: Delta's SQL extension and catalog (DeltaTable, MERGE, ALTER TABLE on path tables, OPTIMIZE, VACUUM), and
#: lakesync's LogStore for s3/s3a tables (commits two drivers can't both make: :mod:`lakesync.jvm.log_store`).
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    **log_store_conf(),
}

#: lakesync's defaults (docs/stream.md, "Settings that matter", has the measurements behind them).
SPARK_DEFAULTS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": os.environ.get("LAKESYNC_SPARK_DRIVER_MEMORY", "2g"),
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # Delta rebuilds a table's state with this many tasks; its default (50) is for big clusters.
    "spark.databricks.delta.snapshotPartitions": "2",
    # Source options shown in plans and the UI: the Kafka client's JAAS login and PEM key too, not only URLs.
    "spark.sql.redaction.options.regex": "(?i)url|jaas|keystore|password|secret|token",
    # Tables lakesync creates mark changed rows instead of rewriting files (deletion vectors).
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "true",
}


def spark_jars() -> list[str]:
    """The local paths of the ``spark`` jar set (fetched into the cache first if needed) and of lakesync's S3
    LogStore (built into it first if needed). Without a JDK to build the LogStore the session starts without it:
    local tables are unaffected, and a Delta table on S3 then fails to open with the class named (lakesync's
    errors add how to build it) rather than being written by a LogStore that can lose commits."""
    jars = [str(path) for path in ensure_jars("spark")]
    try:
        jars.append(str(log_store_jar()))
    except LakesyncError as exc:
        log.warning("%s; Delta tables on S3 can't be read or written until it is built (%s)", exc.message, exc.hint)
    return jars


def submit_conf() -> dict[str, str]:
    """The settings a ``spark-submit`` of a lakesync app needs at launch: the jars and Delta's extension
    (they can't be added to a running JVM), then lakesync's defaults."""
    return {"spark.jars": ",".join(spark_jars()), **DELTA_CONF, **SPARK_DEFAULTS}


def submit_args() -> list[str]:
    """:func:`submit_conf` as ``spark-submit`` arguments (``--conf key=value`` pairs)."""
    return [part for key, value in submit_conf().items() for part in ("--conf", f"{key}={value}")]


def build_spark_session(app_name: str, *, master: str | None = None, extra_conf: dict[str, str] | None = None
                        ) -> SparkSession:
    """A session named ``app_name``: ``master`` and ``extra_conf`` always apply; otherwise the launcher's
    settings, then lakesync's defaults (``LAKESYNC_SPARK_MASTER``, else ``local[2]``)."""
    # Python workers must run this interpreter, or they won't find lakesync and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    launcher = _launcher_conf()
    if launcher and DELTA_CONF["spark.sql.extensions"] not in launcher.get("spark.sql.extensions", ""):
        raise LakesyncError(
            "this spark-submit was launched without delta-spark (spark.sql.extensions does not name Delta's)",
            hint="launch lakesync's Spark apps with the settings of lakesync.spark.session.submit_conf() "
                 "(Airflow's LakesyncSparkSubmitOperator does), or `lakesync jars packages` for --packages")
    builder = SparkSession.builder.appName(app_name)
    if master or "spark.master" not in launcher:
        builder = builder.master(master or os.environ.get("LAKESYNC_SPARK_MASTER", "local[2]"))
    defaults = {**SPARK_DEFAULTS, **DELTA_CONF, "spark.jars": ",".join(spark_jars())}
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
