"""librdkafka settings become the Java client's for Spark's Kafka source: same meaning, Java names."""

from __future__ import annotations

import re

import pytest

from lakesync.core.errors import ConfigError
from lakesync.kafka.spark_options import client_options, java_client_settings, stream_options


def test_plain_settings_keep_their_names_and_librdkafka_only_ones_are_left_out() -> None:
    settings = java_client_settings({"bootstrap.servers": "b:9092", "client.id": "c", "linger.ms": "5",
                                     "enable.partition.eof": "true"})
    assert settings == {"bootstrap.servers": "b:9092", "client.id": "c"}


def test_client_options_are_prefixed_and_read_committed_records_only() -> None:
    assert client_options({"bootstrap.servers": "b:9092"}) == {"kafka.bootstrap.servers": "b:9092",
                                                               "kafka.isolation.level": "read_committed"}


@pytest.mark.parametrize(("mechanism", "module"), [
    ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
    ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
])
def test_sasl_username_and_password_become_a_jaas_login(mechanism: str, module: str) -> None:
    settings = java_client_settings({"bootstrap.servers": "b", "sasl.mechanisms": mechanism,
                                     "sasl.username": 'u"1', "sasl.password": "p\\w"})
    assert settings["sasl.mechanism"] == mechanism
    assert settings["sasl.jaas.config"] == f'{module} required username="u\\"1" password="p\\\\w";'


def test_a_mechanism_without_a_password_login_is_refused_with_the_way_out() -> None:
    with pytest.raises(ConfigError) as refused:
        java_client_settings({"bootstrap.servers": "b", "sasl.mechanism": "GSSAPI", "sasl.username": "u",
                              "sasl.password": "p"})
    assert "GSSAPI" in refused.value.message and "sasl.jaas.config" in (refused.value.hint or "")


def test_pem_files_become_a_pem_truststore_and_keystore(tmp_path) -> None:
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "k.pem").write_text("KEY")
    settings = java_client_settings({"bootstrap.servers": "b", "ssl.ca.location": "/ca.pem",
                                     "ssl.certificate.location": str(tmp_path / "c.pem"),
                                     "ssl.key.location": str(tmp_path / "k.pem")})
    assert settings["ssl.truststore.type"] == "PEM" and settings["ssl.truststore.location"] == "/ca.pem"
    assert settings["ssl.keystore.type"] == "PEM"
    assert (settings["ssl.keystore.certificate.chain"], settings["ssl.keystore.key"]) == ("CERT", "KEY")


def test_an_unreadable_client_key_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read the client certificate or key"):
        java_client_settings({"bootstrap.servers": "b", "ssl.certificate.location": str(tmp_path / "none"),
                              "ssl.key.location": str(tmp_path / "none")})


def test_a_missing_broker_address_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers is not set"):
        java_client_settings({})


def test_the_stream_reads_exactly_its_topics_by_pattern_with_headers_and_fails_on_a_gap() -> None:
    options = stream_options({"bootstrap.servers": "b:9092"}, ["p.db.t", "p.db._schema"])
    pattern = re.compile(options["subscribePattern"])
    assert [bool(pattern.fullmatch(t)) for t in ["p.db.t", "p.db._schema", "p.db.tt", "pxdb.t", "p.db"]] == [
        True, True, False, False, False]
    assert options["includeHeaders"] == "true" and options["failOnDataLoss"] == "true"
    assert options["kafka.isolation.level"] == "read_committed" and "subscribe" not in options


def test_the_stream_fetches_4_mib_per_partition_read_unless_the_pipeline_sets_its_own() -> None:
    default = stream_options({"bootstrap.servers": "b:9092"}, ["p.db.t"])
    assert default["kafka.max.partition.fetch.bytes"] == str(4 * 2**20)
    own = stream_options({"bootstrap.servers": "b:9092", "max.partition.fetch.bytes": "1048576"}, ["p.db.t"])
    assert own["kafka.max.partition.fetch.bytes"] == "1048576"
    alias = stream_options({"bootstrap.servers": "b:9092", "fetch.message.max.bytes": "2097152"}, ["p.db.t"])
    assert alias["kafka.max.partition.fetch.bytes"] == "2097152"


def test_librdkafkas_none_host_name_check_is_the_java_clients_empty_string() -> None:
    assert java_client_settings({"bootstrap.servers": "b", "ssl.endpoint.identification.algorithm": "none"})[
        "ssl.endpoint.identification.algorithm"] == ""
    assert java_client_settings({"bootstrap.servers": "b", "ssl.endpoint.identification.algorithm": "https"})[
        "ssl.endpoint.identification.algorithm"] == "https"
