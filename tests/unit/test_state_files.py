"""The one state-file writer: readers see the old document or the new one, never part of one."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from lakesync.core import state_files
from lakesync.core.state_files import write_json_atomically, write_text_atomically


def _document(version: int) -> dict[str, object]:
    # Big enough (~0.7 MB) that writing it takes many write calls, so an in-place write would be seen half done.
    return {"version": version, "rows": [f"{version}-{i:07d}" for i in range(50_000)]}


def test_concurrent_reader_never_sees_a_partial_document(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_json_atomically(path, _document(0))
    writes = 20
    done = threading.Event()
    seen: list[int] = []
    partial: list[str] = []

    def read() -> None:
        while not done.is_set():
            text = path.read_text()
            try:
                document = json.loads(text)
            except ValueError:
                partial.append(text[-40:])
                continue
            assert document == _document(document["version"])
            seen.append(document["version"])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for version in range(1, writes + 1):
            write_json_atomically(path, _document(version))
    finally:
        done.set()
        reader.join()
    assert partial == []
    assert seen, "the reader read nothing"
    assert json.loads(path.read_text())["version"] == writes


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    write_json_atomically(path, {"version": 1})

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(state_files.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_json_atomically(path, {"version": 2})
    assert json.loads(path.read_text()) == {"version": 1}
    assert os.listdir(tmp_path) == ["state.json"]


def test_unserialisable_document_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with pytest.raises(TypeError):
        write_json_atomically(path, {"when": object()})
    assert os.listdir(tmp_path) == []


def test_private_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "settings.json"
    write_text_atomically(path, "{}", private=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_text_atomically(path, "{}", private=True)  # replacing keeps it private
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
