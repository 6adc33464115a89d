"""lakesync's Delta LogStore for S3: built from its Java source on first use, and the settings that select it.

Why it exists: Delta's default LogStore for ``s3a``/``s3`` checks that a commit file is absent and then PUTs it
unconditionally, so two Spark drivers committing the same version of one table can both "succeed" while one
commit is silently replaced (measured with hadoop-aws 3.5.0; no ``fs.s3a.*`` setting changes it).
``ConditionalPutS3LogStore`` (``log_store/ConditionalPutS3LogStore.java`` beside this module) writes commit files
with ``If-None-Match: *`` and turns S3's 412 into the ``FileAlreadyExistsException`` Delta retries on. Its class
comment has the details.

The jar is compiled here rather than pinned in ``jars.toml``: it is a few dozen lines of our own, built with
``javac --release 17`` against the very jars it runs with (delta-storage and the AWS SDK from the ``spark`` set,
Hadoop's client API from ``pyspark/jars``). It goes to ``built/`` in lakesync's jar cache
(:func:`lakesync.jvm.fetch.cache_dir`), named by a digest of the source and of those jars' names, so a changed
source or a new version of them gets a jar of its own; a jar already there is reused. A JDK is needed once per
machine and version, not at every start.

A Spark session uses it with ``spark.jars`` holding :func:`log_store_jar` next to the ``spark`` set, and the
settings of :func:`log_store_conf`. Both must be there when the JVM starts: Delta reads the LogStore class
from the launch configuration (``SparkEnv.conf``), not from runtime SQL settings.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from lakesync.core.errors import LakesyncError
from lakesync.jvm.artifacts import jar_set
from lakesync.jvm.fetch import cache_dir, ensure_jars

CLASS_NAME = "io.lakesync.delta.ConditionalPutS3LogStore"
SOURCE = Path(__file__).with_name("log_store") / "ConditionalPutS3LogStore.java"
#: The URI schemes Delta maps to S3SingleDriverLogStore that lakesync writes through (``s3`` is rewritten to
#: ``s3a`` by :func:`lakesync.spark.storage.spark_path`, but a path given as ``s3://`` must not slip past).
SCHEMES = ("s3a", "s3")
#: The Java release the class is compiled for: Spark 4 runs on 17 and later.
JAVA_RELEASE = "17"
#: What the class compiles against: (group, artifact) of the ``spark`` set, file-name prefix in ``pyspark/jars``.
SPARK_SET_JARS = (("io.delta", "delta-storage"), ("software.amazon.awssdk", "aws-core"),
                  ("software.amazon.awssdk", "sdk-core"), ("software.amazon.awssdk", "utils"))
PYSPARK_JARS = ("hadoop-client-api-", "slf4j-api-")


def log_store_conf() -> dict[str, str]:
    """The Spark settings that make Delta use the conditional-PUT LogStore for ``s3a://`` and ``s3://`` tables
    (Delta reads ``spark.delta.logStore.<scheme>.impl``; don't combine it with ``spark.delta.logStore.class``,
    which Delta refuses)."""
    return {f"spark.delta.logStore.{scheme}.impl": CLASS_NAME for scheme in SCHEMES}


def log_store_jar() -> Path:
    """The path of the LogStore's jar, compiled into lakesync's jar cache first if it isn't there."""
    classpath = compile_classpath()
    target = cache_dir() / "built" / f"lakesync-log-store-{build_digest(SOURCE.read_bytes(), classpath)}.jar"
    if not target.is_file():
        _build(target, classpath)
    return target


def build_digest(source: bytes, classpath: list[Path]) -> str:
    """A short digest of what the jar is built from: the source, the Java release and the classpath jars' names
    (their versions are in the names, and a cached jar is never altered in place)."""
    digest = hashlib.sha256(source)
    digest.update(f"\0release {JAVA_RELEASE}\0".encode())
    digest.update("\n".join(path.name for path in classpath).encode())
    return digest.hexdigest()[:12]


def compile_classpath() -> list[Path]:
    """The jars the Java source compiles against, from the ``spark`` set (fetched first if needed) and from
    PySpark's own ``jars`` folder."""
    spark_set = dict(zip(((j.coordinate.group, j.coordinate.artifact) for j in jar_set("spark").jars),
                         ensure_jars("spark"), strict=True))
    missing = [f"{group}:{artifact}" for group, artifact in SPARK_SET_JARS if (group, artifact) not in spark_set]
    if missing:
        raise LakesyncError(f"the 'spark' jar set has no {', '.join(missing)}, which lakesync's Delta LogStore "
                            "for S3 is compiled against", hint="re-create the lock with `lakesync dev lock-jars`")
    return [spark_set[key] for key in SPARK_SET_JARS] + [_pyspark_jar(prefix) for prefix in PYSPARK_JARS]


def _spark_jars_folder() -> Path | None:
    """Spark's own ``jars`` folder: under ``$SPARK_HOME`` when set (``spark-submit`` sets it, and runs PySpark
    from a zip whose module path has no folder beside it), else beside the installed ``pyspark`` package."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    return Path(spec.origin).parent / "jars" if spec and spec.origin else None


def _pyspark_jar(prefix: str) -> Path:
    folder = _spark_jars_folder()
    found = sorted(folder.glob(f"{prefix}[0-9]*.jar")) if folder else []
    if len(found) != 1:
        raise LakesyncError(f"expected one {prefix}<version>.jar in PySpark's jars folder ({folder}), found "
                            f"{[path.name for path in found]}",
                            hint="reinstall pyspark (pip install --force-reinstall pyspark==<the pinned version>)")
    return found[0]


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if found is None:
        raise LakesyncError(
            "cannot build lakesync's Delta LogStore for S3 (ConditionalPutS3LogStore): no `javac` on PATH "
            "or in $JAVA_HOME/bin (a Java runtime alone can run Spark but not compile it)",
            hint="install a JDK 17 or later (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless) or point "
                 "JAVA_HOME at one; the jar is built once per machine and cached")
    return found


def _build(target: Path, classpath: list[Path]) -> None:
    """Compile and package into ``target``, whole or not at all: the jar is written under a temporary name and
    renamed into place (concurrent builders each write their own and the last rename wins, with equal
    content)."""
    javac = _javac()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as work:
        classes = Path(work) / "classes"
        done = subprocess.run(
            [javac, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8", "-d", str(classes),
             "-cp", os.pathsep.join(str(path) for path in classpath), str(SOURCE)],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LakesyncError(f"javac could not compile {SOURCE.name}:\n{(done.stderr or done.stdout)[-3000:]}",
                                hint="it needs a JDK 17 or later; if javac is one, the source or the jar set "
                                     "changed in a way that breaks it (see the errors above)")
        partial = Path(work) / target.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: lakesync\n\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, target)
