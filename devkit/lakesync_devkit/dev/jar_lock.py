"""``lakesync dev lock-jars``: resolve each jar set's roots with Maven and rewrite ``lakesync/jvm/jars.toml``.

Maven runs with a repository of its own in a temporary folder (``-Dmaven.repo.local``), so neither the
state of ``~/.m2`` nor an earlier run changes the result, and is retried on a network error. For the
``spark`` set, jars whose artifact pyspark already ships (``pyspark/jars``, any version) are left out:
two versions of one library on Spark's classpath is a bug waiting to happen, and Spark's are the ones its
own code was built with.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

from lakesync.core.errors import StackError
from lakesync.jvm.artifacts import LOCK_FILE, Coordinate, JarSet, LockedJar, parse_lock

MAVEN_ATTEMPTS = 3
#: Sets whose jars sit beside pyspark's own: what pyspark ships is left out of them.
BESIDE_PYSPARK = frozenset({"spark"})
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[^/]*\.jar$")


def _pom(roots: tuple[Coordinate, ...], intransitive: tuple[str, ...] = ()) -> str:
    alone = "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
    deps = "\n".join(
        f"    <dependency><groupId>{c.group}</groupId><artifactId>{c.artifact}</artifactId>"
        f"<version>{c.version}</version>" + (f"<classifier>{c.classifier}</classifier>" if c.classifier else "")
        + (alone if f"{c.group}:{c.artifact}" in intransitive else "") + "</dependency>" for c in roots)
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>lakesync</groupId><artifactId>jar-lock</artifactId><version>1</version>"
            "<packaging>pom</packaging>\n  <dependencies>\n" + deps + "\n  </dependencies>\n</project>\n")


def _resolve(roots: tuple[Coordinate, ...], intransitive: tuple[str, ...], work: Path) -> list[Path]:
    """The runtime jars of ``roots``, in a Maven repository layout under ``work/out``."""
    (work / "pom.xml").write_text(_pom(roots, intransitive))
    command = ["mvn", "-q", "-B", f"-Dmaven.repo.local={work / 'm2'}", "-f", str(work / "pom.xml"),
               "dependency:copy-dependencies", f"-DoutputDirectory={work / 'out'}", "-DincludeScope=runtime",
               "-Dmdep.useRepositoryLayout=true"]
    for attempt in range(1, MAVEN_ATTEMPTS + 1):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode == 0:
            return sorted((work / "out").rglob("*.jar"))
        if attempt == MAVEN_ATTEMPTS:
            raise StackError(f"Maven could not resolve {', '.join(map(str, roots))}:\n{done.stdout[-3000:]}",
                             hint="check the coordinates and that Maven Central is reachable")
        time.sleep(5 * attempt)
    raise AssertionError("unreachable")


def _coordinate(jar: Path, out: Path) -> Coordinate:
    """A jar's coordinate from its place in the repository layout (``group/path/artifact/version/file``)."""
    *group, artifact, version, file_name = jar.relative_to(out).parts
    stem = file_name[:-len(".jar")]
    classifier = stem[len(f"{artifact}-{version}-"):] if stem != f"{artifact}-{version}" else ""
    return Coordinate(".".join(group), artifact, version, classifier)


def pyspark_artifacts() -> set[str]:
    """The artifact names of the jars pyspark ships."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {match["artifact"] for path in jars.glob("*.jar") if (match := _VERSIONED_JAR.match(path.name))}


def lock_set(jar_set: JarSet, *, provided: set[str] | None = None) -> JarSet:
    """``jar_set`` with its jars resolved afresh from its roots, minus the ``provided`` artifacts."""
    with tempfile.TemporaryDirectory(prefix="lakesync-jar-lock-") as tmp:
        work = Path(tmp)
        locked = []
        for jar in _resolve(jar_set.roots, jar_set.intransitive, work):
            coordinate = _coordinate(jar, work / "out")
            if provided and coordinate.artifact in provided:
                continue
            locked.append(LockedJar(coordinate, hashlib.sha256(jar.read_bytes()).hexdigest(), jar.stat().st_size))
    return JarSet(jar_set.name, jar_set.description, jar_set.roots, tuple(sorted(locked, key=lambda j: j.coordinate)),
                  jar_set.intransitive)


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_lock(sets: dict[str, JarSet], header: str) -> str:
    """The lock file's text: the header comment, then each set's roots and jars."""
    lines = [header.rstrip(), ""]
    for name, jar_set in sets.items():
        lines += [f"[sets.{name}]", f"description = {_toml_string(jar_set.description)}",
                  "roots = [" + ", ".join(_toml_string(str(c)) for c in jar_set.roots) + "]"]
        if jar_set.intransitive:
            lines.append("intransitive = [" + ", ".join(_toml_string(i) for i in jar_set.intransitive) + "]")
        lines.append("jars = [")
        lines += [f"  {{coordinate = {_toml_string(str(j.coordinate))}, sha256 = \"{j.sha256}\", size = {j.size}}},"
                  for j in jar_set.jars]
        lines += ["]", ""]
    return "\n".join(lines)


def lock_jars(names: list[str] | None = None, lock_file: Path = LOCK_FILE) -> dict[str, JarSet]:
    """Resolve the named sets (all by default) and rewrite the lock file; returns every set."""
    text = lock_file.read_text()
    sets = parse_lock(tomllib.loads(text))
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    for name in names or list(sets):
        if name not in sets:
            raise StackError(f"no jar set {name!r} in {lock_file}", hint=f"the sets are: {', '.join(sets)}")
        sets[name] = lock_set(sets[name], provided=pyspark_artifacts() if name in BESIDE_PYSPARK else None)
    lock_file.write_text(render_lock(sets, header))
    tomllib.loads(lock_file.read_text())  # the file we wrote must read back
    return sets
