"""Each Airflow home serves its task and trigger logs on ports of its own, kept across commands."""

from __future__ import annotations

import socket

from lakesync_devkit.dev.airflow_home import airflow_env

PORT_KEYS = ("AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT", "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT")


def _ports(env: dict[str, str]) -> set[int]:
    return {int(env[key]) for key in PORT_KEYS}


def test_a_home_keeps_its_log_ports_and_two_homes_do_not_share_them_nor_airflows_fixed_defaults(tmp_path):
    first, second = airflow_env(tmp_path / "one"), airflow_env(tmp_path / "two")
    assert _ports(airflow_env(tmp_path / "one")) == _ports(first)  # every command of a home agrees
    assert len(_ports(first) | _ports(second)) == 4
    assert not (_ports(first) | _ports(second)) & {8793, 8794}
    for port in _ports(first):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))  # free when picked
