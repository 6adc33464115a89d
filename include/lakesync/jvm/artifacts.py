"""The JVM artifacts lakesync runs with: which jars, pinned by Maven coordinate and checksum, in one file.

``jars.toml`` (beside this module) is the one place the JVM side is pinned. Each *set* names the roots a
person chose (``roots``: Maven coordinates) and the jars Maven resolved from them (``jars``: every jar with
its SHA-256), so a run never resolves anything: it downloads exactly the listed files, checks each one's
checksum, and keeps them in a cache (:mod:`lakesync.jvm.fetch`). The sets:

* ``spark``: what Spark needs beyond ``pyspark/jars`` (delta-spark, Spark's Kafka connector, S3 support);
  the product's set, put on every Spark entry point's classpath;
* ``kafka``: the Apache Kafka broker of the embedded stack (the dev kit);
* ``debezium``: Debezium's MariaDB connector in Kafka Connect standalone, on a classpath of its own (the
  dev kit).

To change a version, edit the roots and run ``lakesync dev lock-jars`` (the dev kit resolves them with
Maven, isolated from ``~/.m2``, and rewrites ``jars``).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from lakesync.core.errors import ConfigError

LOCK_FILE = Path(__file__).with_name("jars.toml")
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


@dataclass(frozen=True, order=True)
class Coordinate:
    """A Maven coordinate ``group:artifact:version`` (``group:artifact:jar:classifier:version`` also reads)."""

    group: str
    artifact: str
    version: str
    classifier: str = ""

    @classmethod
    def parse(cls, text: str) -> Coordinate:
        parts = text.strip().split(":")
        if len(parts) == 3 and all(parts):
            return cls(*parts)
        if len(parts) == 5 and all(parts) and parts[2] == "jar":
            return cls(parts[0], parts[1], parts[4], parts[3])
        raise ConfigError(f"{text!r} is not a Maven coordinate", hint="write it as group:artifact:version")

    def __str__(self) -> str:
        if self.classifier:
            return f"{self.group}:{self.artifact}:jar:{self.classifier}:{self.version}"
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.jar"

    @property
    def repository_path(self) -> str:
        """Where the jar sits in a Maven repository (the layout Maven Central serves)."""
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"

    @property
    def cache_path(self) -> str:
        """Where the jar sits in lakesync's cache: by group, so equal file names of two groups can't clash."""
        return f"{self.group}/{self.file_name}"


@dataclass(frozen=True)
class LockedJar:
    """One resolved jar and the checksum every download of it must match."""

    coordinate: Coordinate
    sha256: str
    size: int


@dataclass(frozen=True)
class JarSet:
    """A named set of jars: the roots someone chose, and everything Maven resolved from them."""

    name: str
    description: str
    roots: tuple[Coordinate, ...]
    jars: tuple[LockedJar, ...]
    #: roots taken without their dependencies (``group:artifact``): a POM that drags in far more than is used
    #: (hadoop-aws wants the whole 600 MB AWS SDK bundle; the few SDK modules S3A uses are roots themselves)
    intransitive: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return sum(jar.size for jar in self.jars)


def parse_lock(document: dict) -> dict[str, JarSet]:
    """The sets of a parsed ``jars.toml``."""
    sets = {}
    for name, body in (document.get("sets") or {}).items():
        try:
            jars = tuple(LockedJar(Coordinate.parse(j["coordinate"]), str(j["sha256"]).lower(), int(j["size"]))
                         for j in body.get("jars", []))
            roots = tuple(Coordinate.parse(text) for text in body["roots"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{LOCK_FILE}: set {name!r} is malformed ({exc})",
                              hint="re-create it with `lakesync dev lock-jars`") from exc
        sets[name] = JarSet(name, str(body.get("description", "")), roots, jars,
                            tuple(str(item) for item in body.get("intransitive", [])))
    return sets


@cache
def jar_sets() -> dict[str, JarSet]:
    """Every set in the lock file, by name."""
    with LOCK_FILE.open("rb") as lock:
        return parse_lock(tomllib.load(lock))


def jar_set(name: str) -> JarSet:
    sets = jar_sets()
    if name not in sets:
        raise ConfigError(f"no JVM jar set named {name!r} in {LOCK_FILE}",
                          hint=f"the sets are: {', '.join(sorted(sets))}")
    found = sets[name]
    if not found.jars:
        raise ConfigError(f"the JVM jar set {name!r} has roots but no resolved jars in {LOCK_FILE}",
                          hint="resolve it with `lakesync dev lock-jars`")
    return found


def repository_url() -> str:
    """The Maven repository jars are downloaded from: Maven Central, or ``$LAKESYNC_MAVEN_REPOSITORY`` (a
    mirror or proxy that serves the same layout)."""
    return os.environ.get("LAKESYNC_MAVEN_REPOSITORY", MAVEN_CENTRAL).rstrip("/")
