"""TLS for MySQL (``source.ssl``) and TLS/SASL for Kafka (``kafka.settings``) reach the clients untouched:
PyMySQL (full load, validation, relay checks), python-mysql-replication (the binlog stream) and
confluent-kafka (relay producer, progress store, the Spark source). Unit level: the clients are replaced by
recorders of the arguments they are built with; nothing connects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakesync.core import mysql_client
from lakesync.core.config import load_pipeline
from lakesync.core.connections import kafka_client_config, mysql_connection
from lakesync.core.positions import SourcePosition
from lakesync.relay.offsets import ProgressStore
from tests.bad_input.badkit import base_document, write_pipeline

pytestmark = pytest.mark.security

SSL = {"ca": "/etc/lakesync/ca.pem", "cert": "/etc/lakesync/client.pem", "key": "/etc/lakesync/client.key",
       "verify_mode": "required"}
KAFKA_SECURITY = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "relay",
                  "sasl.password": "kafka-S3cret", "ssl.ca.location": "/etc/lakesync/kafka-ca.pem"}


class Recorded(Exception):
    """Raised by the recorders once they have the arguments: nothing goes further."""


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKESYNC_DEMO_MYSQL", "mysql://lakesync:db-S3cret@db.example:3306/shop")
    monkeypatch.setenv("AIRFLOW_CONN_LAKESYNC_DEMO_KAFKA",
                       '{"conn_type": "kafka", "extra": {"bootstrap.servers": "kafka.example:9093"}}')
    document = base_document("tls", "shop", tmp_path)
    document["source"]["ssl"] = SSL
    document["kafka"]["settings"] = KAFKA_SECURITY
    write_pipeline(tmp_path / "pipelines", document)
    return load_pipeline("tls", tmp_path / "pipelines")


def _record_pymysql(monkeypatch, seen: list[dict[str, Any]]) -> None:
    def connect(**kwargs: Any) -> None:
        seen.append(kwargs)
        raise Recorded

    monkeypatch.setattr(mysql_client, "MySQLClientConnection", connect)  # every source connection is made here


def test_mysql_tls_reaches_the_full_load_and_validation_connections(pipeline, monkeypatch):
    from lakesync.source.snapshot import connect

    seen: list[dict[str, Any]] = []
    _record_pymysql(monkeypatch, seen)
    with pytest.raises(Recorded):
        connect(mysql_connection(pipeline), database="shop")
    assert seen[0]["ssl"] == SSL and seen[0]["user"] == "lakesync" and seen[0]["host"] == "db.example"


def test_mysql_tls_reaches_the_relay_checks_and_the_binlog_stream(pipeline, monkeypatch):
    from lakesync.relay import Relay
    from lakesync.source import binlog

    seen: list[dict[str, Any]] = []
    _record_pymysql(monkeypatch, seen)
    relay = Relay(pipeline)
    with pytest.raises(Recorded):
        relay._connect()
    assert seen[0]["ssl"] == SSL

    class Reader:
        def __init__(self, *, connection_settings: dict[str, Any], **_: Any) -> None:
            seen.append(connection_settings)

    monkeypatch.setattr(binlog, "BinLogStreamReader", Reader)
    source = binlog.BinlogSource(mysql_connection(pipeline).pymysql_kwargs(), server_id=4242, database="shop",
                                 start=SourcePosition("binlog.000001", 4), selects=lambda table: True)
    source._open()
    assert seen[1]["ssl"] == SSL and seen[1]["user"] == "lakesync"


def test_kafka_tls_and_sasl_reach_the_producer_and_the_progress_store(pipeline, monkeypatch):
    from lakesync.relay import publisher

    config = kafka_client_config(pipeline)
    assert config == {**KAFKA_SECURITY, "bootstrap.servers": "kafka.example:9093"}
    built: list[dict[str, Any]] = []
    monkeypatch.setattr(publisher, "Producer", lambda conf: built.append(conf))
    publisher.Publisher(config)
    assert {key: built[0][key] for key in KAFKA_SECURITY} == KAFKA_SECURITY
    assert ProgressStore.for_pipeline(pipeline).client_config["sasl.password"] == "kafka-S3cret"


def test_kafka_tls_and_sasl_reach_sparks_kafka_source_as_the_java_clients_settings(pipeline):
    # run_stream hands the pipeline's client config to Spark's Kafka source through stream_options.
    from lakesync.kafka.spark_options import stream_options

    options = stream_options(kafka_client_config(pipeline), [pipeline.topic("orders")])
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                                 'username="relay" password="kafka-S3cret";')
    assert options["kafka.ssl.truststore.location"] == "/etc/lakesync/kafka-ca.pem"
    assert options["kafka.isolation.level"] == "read_committed"


def test_the_relay_refuses_settings_that_would_weaken_delivery(pipeline, monkeypatch):
    from lakesync.relay import publisher

    built: list[dict[str, Any]] = []
    monkeypatch.setattr(publisher, "Producer", lambda conf: built.append(conf))
    publisher.Publisher({**kafka_client_config(pipeline), "acks": "0", "enable.idempotence": "false"})
    assert built[0]["acks"] == "all" and built[0]["enable.idempotence"] == "true"
