"""``lakesync snapshot`` end to end: the summary on stdout, errors as a message and exit code, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lakesync_devkit.dev.stack import MYSQL_CONN_ID

from lakesync.cli.main import main
from lakesync.full_load.state import LoadState

pytestmark = pytest.mark.integration


@pytest.fixture
def pipelines_dir(stack, mariadb, fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    with mariadb.connect(database=fresh_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR(20))")
        cur.execute("INSERT INTO accounts SELECT seq, CONCAT('owner ', seq) FROM seq_1_to_50")
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "cli.yaml").write_text(yaml.safe_dump({
        "name": "cli", "source": {"conn_id": MYSQL_CONN_ID, "database": fresh_database},
        "kafka": {"bootstrap_servers": "127.0.0.1:9", "topic_prefix": "t"},
        "delta": {"root": str(tmp_path / "delta")}, "state_dir": str(tmp_path / "state"),
    }))
    return folder


def test_snapshot_command_loads_and_prints_a_summary(pipelines_dir: Path, tmp_path: Path, capsys) -> None:
    assert main(["snapshot", "--pipeline", "cli", "--pipelines-dir", str(pipelines_dir), "--mode", "chunked"]) == 0
    out = capsys.readouterr().out
    assert "accounts" in out and "50" in out and "binlog." in out
    assert LoadState.for_pipeline_dir(tmp_path / "state" / "cli").is_done("accounts")


def test_snapshot_command_reports_an_unknown_table_without_a_traceback(pipelines_dir: Path, capsys) -> None:
    code = main(["snapshot", "--pipeline", "cli", "--pipelines-dir", str(pipelines_dir), "--tables", "nope"])
    err = capsys.readouterr().err
    assert code == 2 and "error: no table nope" in err and "Traceback" not in err
