"""The Spark jars for a cluster lakesync does not start: ``--packages`` coordinates and an Ivy settings file.

lakesync's own entry points put the cached jars on the classpath (``spark.jars``, :mod:`lakesync.jvm.fetch`).
A team that submits to its own cluster with ``--packages`` resolves through Ivy instead, whose default
settings also read ``~/.m2``: there a POM without its jar (common on machines that run Maven) fails the
resolution ("download failed: ...!slf4j-api.jar"). The settings file written here resolves from Maven
Central only, into a cache of its own.
"""

from __future__ import annotations

from pathlib import Path

from lakesync.jvm.artifacts import jar_set, repository_url

SPARK_SET = "spark"

IVY_SETTINGS = """\
<ivysettings>
  <!-- lakesync: resolve --packages from Maven Central only; never from ~/.m2 (see lakesync.spark.packages) -->
  <settings defaultResolver="central"/>
  <caches defaultCacheDir="{cache}"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="{repository}/"/>
  </resolvers>
</ivysettings>
"""


def spark_packages() -> str:
    """The roots of the Spark set as ``spark.jars.packages`` / ``--packages`` wants them (comma-separated)."""
    return ",".join(str(coordinate) for coordinate in jar_set(SPARK_SET).roots)


def write_ivy_settings(path: str | Path, *, cache: str | Path | None = None) -> Path:
    """Write an Ivy settings file that resolves from Maven Central (or ``$LAKESYNC_MAVEN_REPOSITORY``) only."""
    target = Path(path).expanduser().resolve()
    cache_dir = Path(cache).expanduser().resolve() if cache else target.parent / "ivy-cache"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(IVY_SETTINGS.format(cache=cache_dir, repository=repository_url()))
    return target
