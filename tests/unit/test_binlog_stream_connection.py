"""The binlog stream is connected once per reader: a lost stream reaches the relay, which resumes from its
committed progress, instead of pymysqlreplication re-requesting it from inside a transaction."""

from __future__ import annotations

import pymysql
import pytest

from lakesync.core import mysql_client
from lakesync.source.binlog import StreamConnectedOnce
from lakesync.source.server_checks import is_connection_error


@pytest.fixture
def connects(monkeypatch):
    made = []
    monkeypatch.setattr(mysql_client, "MySQLClientConnection", lambda **settings: made.append(settings) or object())
    return made


def test_a_second_stream_connection_is_refused_as_a_lost_connection(connects):
    factory = StreamConnectedOnce()
    factory(host="db", port=3306)

    with pytest.raises(pymysql.err.OperationalError) as refused:
        factory(host="db", port=3306)

    assert is_connection_error(refused.value)  # the relay's resume path, not a fatal source error
    assert len(connects) == 1


def test_the_control_connection_is_made_again_freely(connects):
    factory = StreamConnectedOnce()
    factory(host="db", port=3306)
    for _ in range(3):
        factory(host="db", port=3306, db="information_schema")

    assert [settings.get("db") for settings in connects] == [None, "information_schema", "information_schema",
                                                             "information_schema"]
