"""Passwords and tokens never reach logs, errors, XCom values, the status view or the Delta history.

The pipeline runs through the real CLI with ``--debug`` (snapshot, relay, stream, status, validate, and a
snapshot with a wrong password); then every byte it produced is searched for the secrets: all output,
every file under the pipeline's state and Delta folders (``_delta_log`` JSON and data files included),
the validation report (what the validate task returns as XCom) and the Airflow status view's HTML and
JSON. The one place the embedded stack keeps its passwords, ``stack.json``, must be mode 0600.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lakesync.validation.validate import validate_pipeline
from tests.bad_input.badkit import Lab

pytestmark = [pytest.mark.security, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
WRONG_PASSWORD = "Wr0ng-Pa55-b1c7e9"
SASL_TOKEN = "sasl-T0ken-5d2a8f"


def _cli(lab: Lab, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "LAKESYNC_PIPELINES_DIR": str(lab.pipelines_dir), **(env or {})}
    return subprocess.run([sys.executable, "-m", "lakesync.cli.main", "--debug", *args], env=environment,
                          capture_output=True, text=True, timeout=300, check=False)


def _files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


def test_no_password_or_token_reaches_output_files_history_xcom_or_the_status_view(
        stack, monkeypatch, tmp_path, fresh_database):
    monkeypatch.setenv("SEC_SASL_TOKEN", SASL_TOKEN)
    lab = Lab(stack, monkeypatch, tmp_path, fresh_database, name="sec")
    # The token travels like a SASL password would: from the environment, through kafka.settings, to the
    # client. Without sasl.mechanism librdkafka ignores it, so the plaintext embedded broker still works.
    lab.document["kafka"]["settings"] = {"sasl.password": "${SEC_SASL_TOKEN}"}
    lab.root_sql("CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR(20))",
                 "INSERT INTO accounts VALUES (1, 'ann'), (2, 'bo')")
    pipeline = lab.pipeline()
    secrets = {"lakesync password": stack.settings.lakesync_password, "root password": stack.settings.root_password,
               "wrong password": WRONG_PASSWORD, "sasl token": SASL_TOKEN}

    outputs: list[str] = []
    steps = [("snapshot", "--pipeline", "sec"), ("relay", "--pipeline", "sec", "--stop-when-idle", "2")]
    for step in steps:
        done = _cli(lab, *step)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs += [done.stdout, done.stderr]
    lab.root_sql("INSERT INTO accounts VALUES (3, 'cy')", "UPDATE accounts SET owner = 'ann2' WHERE id = 1")
    for step in [("relay", "--pipeline", "sec", "--stop-when-idle", "2"), ("stream", "--pipeline", "sec", "--once"),
                 ("status", "--pipeline", "sec", "--json"), ("validate", "--pipeline", "sec", "--json")]:
        done = _cli(lab, *step)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs += [done.stdout, done.stderr]
    assert json.loads(outputs[-2])["tables"][0]["status"] == "equal"

    port = stack.settings.mariadb_port
    refused = _cli(lab, "snapshot", "--pipeline", "sec",
                   env={"AIRFLOW_CONN_LAKESYNC_DEMO_MYSQL": f"mysql://lakesync:{WRONG_PASSWORD}@127.0.0.1:{port}/"})
    assert refused.returncode != 0 and "refused the credentials of lakesync@127.0.0.1" in refused.stderr
    outputs += [refused.stdout, refused.stderr]

    xcom = json.dumps(validate_pipeline(pipeline, store=False).to_json(), default=str)
    monkeypatch.syspath_prepend(str(REPO / "plugins"))
    monkeypatch.setenv("LAKESYNC_PIPELINES_DIR", str(lab.pipelines_dir))
    from lakesync_airflow import views

    view = views.render(views.all_status()) + json.dumps(views.status_json(), default=str)
    assert "pipeline sec" in view

    texts = {f"output of step {i}": text for i, text in enumerate(outputs)}
    texts.update({"validate XCom": xcom, "status view": view})
    blobs = {str(path): path.read_bytes() for path in _files(tmp_path) if "pipelines" not in path.parts}
    assert any("_delta_log" in name for name in blobs) and any("checkpoints" in name for name in blobs)
    leaks = [f"{what} in {where}" for what, secret in secrets.items()
             for where, text in texts.items() if secret in text]
    leaks += [f"{what} in {where}" for what, secret in secrets.items()
              for where, data in blobs.items() if secret.encode() in data]
    assert not leaks, leaks
    print(f"searched {len(texts)} outputs ({sum(map(len, texts.values()))} chars) and {len(blobs)} files "
          f"({sum(map(len, blobs.values()))} bytes) for {len(secrets)} secrets: none found")


def test_the_stack_keeps_its_passwords_only_in_files_of_mode_0600(stack):
    for secret_file in (stack.settings_file, stack.env_file):
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600, secret_file
    assert stack.settings.lakesync_password in stack.settings_file.read_text()


def test_connection_objects_never_show_the_password(stack, monkeypatch, tmp_path, fresh_database):
    from lakesync.core.connections import mysql_connection

    lab = Lab(stack, monkeypatch, tmp_path, fresh_database)
    connection = mysql_connection(lab.pipeline())
    password = stack.settings.lakesync_password
    assert password not in repr(connection) and password not in str(connection)
    assert password not in connection.describe()
    assert connection.pymysql_kwargs()["password"] == password
