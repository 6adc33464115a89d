"""lakesync's Delta LogStore for S3, without servers: the settings that select it, how its jar is named and
reused, and the error when there is no JDK to build it (tests/integration/test_s3_log_store.py races it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lakesync.core.errors import LakesyncError
from lakesync.jvm import log_store
from lakesync.jvm.log_store import CLASS_NAME, SOURCE, build_digest, log_store_conf, log_store_jar

CLASSPATH = [Path("/jars/delta-storage-4.4.0.jar"), Path("/jars/hadoop-client-api-3.5.0.jar")]


def test_conf_selects_the_log_store_for_s3a_and_s3_tables() -> None:
    assert log_store_conf() == {"spark.delta.logStore.s3a.impl": "io.lakesync.delta.ConditionalPutS3LogStore",
                                "spark.delta.logStore.s3.impl": "io.lakesync.delta.ConditionalPutS3LogStore"}


def test_the_java_source_ships_beside_the_module_and_declares_the_configured_class() -> None:
    text = SOURCE.read_text()
    package = re.search(r"^package ([\w.]+);", text, re.MULTILINE)
    assert package is not None and f"{package[1]}.{SOURCE.stem}" == CLASS_NAME
    assert f"public class {SOURCE.stem} extends S3SingleDriverLogStore" in text


def test_jar_name_changes_with_the_source_and_with_the_jars_it_is_built_against() -> None:
    digest = build_digest(b"class A {}", CLASSPATH)
    assert digest == build_digest(b"class A {}", CLASSPATH) and len(digest) == 12
    assert build_digest(b"class A { }", CLASSPATH) != digest
    assert build_digest(b"class A {}", [CLASSPATH[0], Path("/jars/hadoop-client-api-3.5.1.jar")]) != digest


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A jar cache of its own, a fixed classpath (nothing fetched) and no JDK anywhere."""
    monkeypatch.setenv("LAKESYNC_JARS_DIR", str(tmp_path / "jars"))
    monkeypatch.setattr(log_store, "compile_classpath", lambda: CLASSPATH)
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    return tmp_path / "jars"


def test_missing_javac_is_an_error_that_says_to_install_a_jdk_and_builds_nothing(empty_cache: Path) -> None:
    with pytest.raises(LakesyncError) as raised:
        log_store_jar()
    assert "javac" in raised.value.message and "ConditionalPutS3LogStore" in raised.value.message
    assert "openjdk-17-jdk-headless" in (raised.value.hint or "")
    assert not list(empty_cache.rglob("*.jar"))


def test_a_jar_already_built_is_reused_without_a_jdk(empty_cache: Path) -> None:
    built = empty_cache / "built" / f"lakesync-log-store-{build_digest(SOURCE.read_bytes(), CLASSPATH)}.jar"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"PK")
    assert log_store_jar() == built
