"""Downloading a jar set into lakesync's cache, once, and finding it there offline afterwards.

The cache is ``$LAKESYNC_JARS_DIR``, else ``$XDG_CACHE_HOME/lakesync/jars``, else ``~/.cache/lakesync/jars``.
Nothing here reads or writes ``~/.m2`` or ``~/.ivy2``: Spark's own ``spark.jars.packages`` resolves through
Ivy, which fails on a machine whose ``~/.m2`` holds a POM without its jar (an everyday state where Maven is
used), so lakesync downloads the locked files itself and hands Spark local paths.

A download goes to a temporary file, is checked against the lock's SHA-256 and only then renamed into place,
so the cache holds whole, verified jars or nothing. Network errors and server errors are retried with
backoff (CI on a fresh machine downloads every run); a checksum mismatch is not retried: it means the
repository serves another file than the one locked, which must be looked at, not papered over.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lakesync.core.errors import JarFetchError
from lakesync.jvm.artifacts import JarSet, LockedJar, jar_set, repository_url

log = logging.getLogger(__name__)

JARS_DIR_ENV = "LAKESYNC_JARS_DIR"
#: Attempts per jar, and the first wait between them (doubled each time).
ATTEMPTS = 6
FIRST_BACKOFF_S = 1.0
_CHUNK = 1 << 20


def cache_dir() -> Path:
    explicit = os.environ.get(JARS_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser().resolve() / "lakesync" / "jars"


def jar_path(jar: LockedJar, root: Path | None = None) -> Path:
    return (root or cache_dir()) / jar.coordinate.cache_path


def missing_jars(jars: JarSet, root: Path | None = None) -> list[LockedJar]:
    """The jars of ``jars`` not in the cache (a present file of the locked size counts as there: it was
    verified before it was renamed into place)."""
    out = []
    for jar in jars.jars:
        path = jar_path(jar, root)
        if not path.is_file() or path.stat().st_size != jar.size:
            out.append(jar)
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _download(jar: LockedJar, target: Path) -> None:
    """Download one jar to ``target``, verified; retried on network and server errors."""
    url = f"{repository_url()}/{jar.coordinate.repository_path}"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    delay = FIRST_BACKOFF_S
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(url, timeout=60) as body, partial.open("wb") as out:
                while chunk := body.read(_CHUNK):
                    out.write(chunk)
            break
        except urllib.error.HTTPError as exc:
            partial.unlink(missing_ok=True)
            if exc.code < 500 or attempt == ATTEMPTS:
                raise JarFetchError(f"cannot download {jar.coordinate} from {url}: HTTP {exc.code}",
                                    hint="check the repository (LAKESYNC_MAVEN_REPOSITORY) serves it") from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            partial.unlink(missing_ok=True)
            if attempt == ATTEMPTS:
                raise JarFetchError(f"cannot download {jar.coordinate} from {url} after {ATTEMPTS} attempts: {exc}",
                                    hint="check the network and the repository; re-running resumes where it "
                                         "stopped (jars already fetched are kept)") from exc
        log.warning("download of %s failed (attempt %d of %d); retrying in %.0f s", jar.coordinate, attempt,
                    ATTEMPTS, delay)
        time.sleep(delay)
        delay *= 2
    actual = _sha256(partial)
    if actual != jar.sha256:
        partial.unlink(missing_ok=True)
        raise JarFetchError(
            f"{url} does not match the locked checksum of {jar.coordinate} (sha256 {actual}, locked {jar.sha256})",
            hint="the repository serves another file than the one locked in lakesync/jvm/jars.toml; do not use "
                 "it. If the lock is what changed, re-create it with `lakesync dev lock-jars`")
    os.replace(partial, target)


def ensure_jars(name: str, *, root: Path | None = None, progress: Callable[[LockedJar], None] | None = None,
                offline: bool = False) -> list[Path]:
    """The local paths of set ``name``'s jars, downloading the missing ones first (four at a time).

    ``offline`` refuses to download: a missing jar is then an error naming the command that fetches it.
    """
    jars = jar_set(name)
    missing = missing_jars(jars, root)
    if missing and offline:
        raise JarFetchError(f"{len(missing)} jar(s) of the {name!r} set are not in the cache {root or cache_dir()}",
                            hint=f"fetch them once with `lakesync jars fetch {name}` (needs Maven Central)")
    if missing:
        total = sum(jar.size for jar in missing)
        log.info("fetching %d jar(s) of the %s set (%.0f MB) into %s", len(missing), name, total / 1e6,
                 root or cache_dir())

        def one(jar: LockedJar) -> None:
            _download(jar, jar_path(jar, root))
            if progress is not None:
                progress(jar)

        with ThreadPoolExecutor(max_workers=4) as pool:
            for future in [pool.submit(one, jar) for jar in missing]:
                future.result()
    return [jar_path(jar, root) for jar in jars.jars]


def classpath(name: str, *, root: Path | None = None) -> str:
    """Set ``name`` as a Java classpath (``:``-joined paths), fetched first when needed."""
    return os.pathsep.join(str(path) for path in ensure_jars(name, root=root))
