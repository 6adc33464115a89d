"""A class-data-sharing archive of the Spark driver's classes, so each local Spark start is seconds faster.

Every lakesync Spark process (an Airflow task's ``spark-submit``, the stream, a CLI command) starts a JVM that
loads and verifies about 25,000 classes of Spark, Delta and the Kafka connector before its first job. The JVM
can map them ready-made from an archive instead (JDK class data sharing, ``-XX:SharedArchiveFile``). Measured
on the 2-core test machine: a session started in 5.5 s instead of 9 s and its first Delta write took 6 s
instead of 9-16 s (docs/operations.md, "Faster Spark starts").

The archive is built once (``lakesync jars warm-start``, run by the setup) by a small Spark job that touches
what lakesync's jobs touch, and then used by every driver this machine starts: :func:`driver_java_options`
gives the option, :mod:`lakesync.spark.session` passes it. It is valid only for the JVM, Spark and jars it
was built with, so its file name carries a digest of them (this virtualenv's Spark included: the archive lives
in the virtualenv) and a change simply goes back to a normal start until it is built again. The JVM's own messages about a refused archive are silenced: it then starts as usual.

Why a separate build step and not ``-XX:+AutoCreateSharedArchive``: that flag needs Java 19; and a half-written
archive makes the JVM abort, so the archive is written under a temporary name and renamed once complete.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import pyspark

from lakesync.core.errors import LakesyncError
from lakesync.jvm.fetch import ensure_jars

#: Set to 0 to start Spark without the archive (to compare, or to rule it out while diagnosing a JVM).
ENABLED_ENV = "LAKESYNC_SPARK_CLASS_ARCHIVE"
#: Unified-logging tags that report a refused archive on stdout, where Spark apps print their results.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

#: The job whose classes go into the archive: a Delta write with deletion vectors, a position-guarded MERGE,
#: a read, a JSON decode and the Kafka source's planning classes (no broker needed to load them).
_WORKLOAD = """
import sys
from lakesync.spark.session import build_spark_session
spark = build_spark_session("lakesync-class-archive")
path = sys.argv[1]
spark.range(100).selectExpr("id", "id * 2 AS pos", "CAST(id AS STRING) AS v").write.format("delta").save(path)
spark.range(50, 150).selectExpr("id", "id * 3 AS pos", "'x' AS v").createOrReplaceTempView("changes")
spark.sql(f"MERGE INTO delta.`{path}` t USING changes s ON t.id = s.id AND t.id BETWEEN 50 AND 149 "
          "WHEN MATCHED AND s.pos > t.pos THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
spark.read.format("delta").load(path).selectExpr(
    "from_json(to_json(named_struct('id', id, 'v', v)), 'id BIGINT, v STRING') AS r").groupBy("r.v").count().collect()
spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t").load()
spark.stop()
"""


def _java() -> Path | None:
    """The java binary spark-submit starts (``$JAVA_HOME/bin/java``, else the one on the PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_folder() -> Path:
    """The virtualenv's own folder for the archive: it belongs to this environment's Spark (the JVM checks the
    classpath, which names this environment's ``pyspark/jars``), and goes away with it."""
    return Path(sys.prefix) / "share" / "lakesync"


def archive_file() -> Path | None:
    """Where the archive for this JVM, this Spark and these jars lives (None without a java binary)."""
    java = _java()
    if java is None:
        return None
    stat = java.stat()
    jars = "\n".join(sorted(str(path) for path in ensure_jars("spark", offline=True)))
    spark_home = Path(pyspark.__file__).resolve().parent
    identity = f"{java}|{stat.st_size}|{stat.st_mtime_ns}|{spark_home} {version('pyspark')}|{jars}"
    return archive_folder() / f"spark-class-archive-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.jsa"


def driver_java_options() -> str | None:
    """The driver JVM options that use the archive, or None when it is switched off or not built yet."""
    if os.environ.get(ENABLED_ENV, "1") == "0":
        return None
    try:
        path = archive_file()
    except LakesyncError:  # the jars are not fetched: the session's own ensure_jars says so
        return None
    return f"-XX:SharedArchiveFile={path} {_QUIET}" if path is not None and path.is_file() else None


def build_archive(*, force: bool = False) -> tuple[Path, float]:
    """Build the archive by running :data:`_WORKLOAD` under ``spark-submit``; returns its path and the seconds it
    took (0 when it already existed). This environment's archives of other JVMs or jar sets are removed."""
    target = archive_file()
    if target is None:
        raise LakesyncError("no java binary found (JAVA_HOME or the PATH)", hint="install a Java 17 runtime")
    if target.is_file() and not force:
        return target, 0.0
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    started = time.monotonic()
    from lakesync.spark.session import submit_args

    spark_submit = Path(sys.executable).parent / "spark-submit"
    with tempfile.TemporaryDirectory(prefix="lakesync-class-archive-") as scratch:
        script = Path(scratch) / "workload.py"
        script.write_text(_WORKLOAD)
        done = subprocess.run(
            [str(spark_submit), "--master", "local[2]", *submit_args(archive=False),
             "--conf", f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={partial} {_QUIET}",
             str(script), str(Path(scratch) / "table")],
            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise LakesyncError(f"building the class archive failed (exit {done.returncode}): {done.stderr[-1500:]}",
                            hint="Spark still starts without it; `lakesync jars warm-start` tries again")
    partial.replace(target)  # whole or not at all: a truncated archive makes the JVM abort
    for stale in target.parent.glob("spark-class-archive-*.jsa"):
        if stale != target:
            stale.unlink(missing_ok=True)
    return target, time.monotonic() - started
