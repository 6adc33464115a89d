"""Which class archive a Spark driver is given, and that a failed build leaves no archive behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lakesync.core.errors import LakesyncError
from lakesync.jvm import class_archive


@pytest.fixture
def fake_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("LAKESYNC_JARS_DIR", str(tmp_path / "jars"))
    monkeypatch.setattr(class_archive, "ensure_jars", lambda name, offline: [Path("/jars/a.jar")])
    monkeypatch.setattr(class_archive, "archive_folder", lambda: tmp_path / "venv-share")
    return java


def test_no_option_until_the_archive_exists_and_none_when_switched_off(fake_java: Path, monkeypatch) -> None:
    assert class_archive.driver_java_options() is None
    path = class_archive.archive_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert class_archive.driver_java_options() == f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
    monkeypatch.setenv(class_archive.ENABLED_ENV, "0")
    assert class_archive.driver_java_options() is None


def test_another_java_build_or_jar_set_gets_another_archive(fake_java: Path, monkeypatch) -> None:
    first = class_archive.archive_file()
    fake_java.write_text("#!/bin/sh\n# upgraded\n")
    assert class_archive.archive_file() != first
    second = class_archive.archive_file()
    monkeypatch.setattr(class_archive, "ensure_jars", lambda name, offline: [Path("/jars/b.jar")])
    assert class_archive.archive_file() not in (first, second)


def test_missing_jars_mean_no_archive_option_rather_than_an_error(fake_java: Path, monkeypatch) -> None:
    def missing(name, offline):
        raise LakesyncError("not fetched")

    monkeypatch.setattr(class_archive, "ensure_jars", missing)
    assert class_archive.driver_java_options() is None


def test_a_failed_build_says_so_and_leaves_no_archive_or_partial_file(fake_java: Path, monkeypatch) -> None:
    def failing_submit(argv, **kwargs):
        partial = next(a for a in argv if "ArchiveClassesAtExit=" in a).split("=", 2)[2].split()[0]
        Path(partial).write_bytes(b"half an archive")  # the JVM died while writing it
        return subprocess.CompletedProcess(argv, 1, "", "java.lang.OutOfMemoryError")

    monkeypatch.setattr("lakesync.spark.session.submit_args", lambda archive: [])
    monkeypatch.setattr(subprocess, "run", failing_submit)
    with pytest.raises(LakesyncError, match=r"exit 1.*OutOfMemoryError"):
        class_archive.build_archive()
    folder = class_archive.archive_file().parent
    assert not any(folder.iterdir())
