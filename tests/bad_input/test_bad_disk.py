"""A full disk under the Delta root (a 20 MB tmpfs): the full load fails with a clear SinkError and commits
nothing; ``full_load.json`` does not claim the table. Needs root for ``mount`` (skipped otherwise)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lakesync.core.errors import LakesyncError
from tests.bad_input.badkit import Lab, done_tables

pytestmark = [pytest.mark.bad_input, pytest.mark.integration]


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "delta"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_disk_fails_the_load_clearly_and_commits_nothing(stack, monkeypatch, tmp_path, fresh_database,
                                                                small_disk):
    lab = Lab(stack, monkeypatch, tmp_path, fresh_database)
    lab.root_sql("CREATE TABLE fat (id INT PRIMARY KEY, data VARBINARY(60000))",
                 "INSERT INTO fat SELECT seq, RANDOM_BYTES(1024) FROM seq_1_to_1",
                 # ~45 MB of incompressible bytes: more than the 20 MB disk holds
                 "INSERT INTO fat SELECT seq, CONCAT(" + ", ".join(["RANDOM_BYTES(1024)"] * 48)
                 + ") FROM seq_2_to_900")
    pipeline = lab.pipeline()
    with pytest.raises(LakesyncError) as caught:
        lab.full_load(pipeline)
    text = str(caught.value)
    assert "fat" in text and ("No space left on device" in text or "disk" in text.lower()), text
    assert "nothing" in text and "committed" in text, text
    assert done_tables(pipeline) == set()
    log = small_disk / "fat" / "_delta_log"
    assert not log.exists() or not list(log.glob("*.json")), "no Delta commit on a full disk"
