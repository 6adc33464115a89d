"""The Kafka source's options, offset arithmetic and row layout, without a broker or Spark."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from lakesync.core.errors import ConfigError
from lakesync.kafka.config import KafkaSourceOptions, OffsetSpec, client_config, redacted
from lakesync.kafka.offsets import rate_limited_ends
from lakesync.kafka.spark_source import (
    KafkaInputPartition,
    _record_batch,
    arrow_schema,
    from_json,
    split_ranges,
    to_json,
)

BASE = {"kafka.bootstrap.servers": "b1:9092", "subscribe": "shop.orders"}


def test_kafka_prefixed_options_pass_through_to_the_client_including_tls_and_sasl():
    config = client_config({
        "kafka.bootstrap.servers": "b1:9093", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.username": "etl", "kafka.sasl.password": "s3cret",
        "kafka.ssl.ca.location": "/etc/ca.pem", "subscribe": "t",
    })
    assert config["bootstrap.servers"] == "b1:9093"
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert config["sasl.password"] == "s3cret"
    assert config["ssl.ca.location"] == "/etc/ca.pem"
    assert "subscribe" not in config
    assert config["enable.auto.commit"] == "false"
    assert config["group.id"]


def test_missing_bootstrap_servers_is_a_config_error_that_names_the_option():
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap\.servers"):
        KafkaSourceOptions.from_options({"subscribe": "t"})


def test_auto_commit_cannot_be_turned_on():
    with pytest.raises(ConfigError, match=r"auto\.commit"):
        client_config({**BASE, "kafka.enable.auto.commit": "true"})


def test_secret_values_never_show_in_repr_or_redacted_config():
    options = KafkaSourceOptions.from_options({
        **BASE, "kafka.sasl.password": "hunter2", "kafka.ssl.key.password": "pw2",
        "kafka.sasl.jaas.config": "x password=\"pw3\";", "kafka.sasl.oauthbearer.client.secret": "pw4",
    })
    shown = repr(options) + repr(options.safe_client_config()) + repr(redacted(options.client))
    for secret in ("hunter2", "pw2", "pw3", "pw4"):
        assert secret not in shown
    assert options.safe_client_config()["bootstrap.servers"] == "b1:9092"


def test_exactly_one_of_subscribe_and_subscribe_pattern_is_required():
    with pytest.raises(ConfigError, match="exactly one"):
        KafkaSourceOptions.from_options({"kafka.bootstrap.servers": "b:1"})
    with pytest.raises(ConfigError, match="exactly one"):
        KafkaSourceOptions.from_options({**BASE, "subscribePattern": "shop\\..*"})
    with pytest.raises(ConfigError, match="regular expression"):
        KafkaSourceOptions.from_options({"kafka.bootstrap.servers": "b:1", "subscribePattern": "(unclosed"})


def test_options_are_read_case_insensitively_like_spark_hands_them_over():
    options = KafkaSourceOptions.from_options({
        "kafka.bootstrap.servers": "b:1", "subscribepattern": "shop\\..*", "maxoffsetspertrigger": "500",
        "startingoffsets": "earliest", "failondataloss": "false",
    })
    assert options.pattern == "shop\\..*" and options.topics is None
    assert options.max_offsets_per_trigger == 500
    assert options.starting == OffsetSpec("earliest")
    assert options.fail_on_data_loss is False


def test_subscribe_takes_a_comma_separated_topic_list():
    options = KafkaSourceOptions.from_options({**BASE, "subscribe": " a , b,c "})
    assert options.topics == ("a", "b", "c")


def test_starting_offsets_accept_spark_json_with_earliest_and_latest_markers():
    options = KafkaSourceOptions.from_options({**BASE, "startingOffsets": '{"t": {"0": 23, "1": -2, "2": -1}}'})
    assert options.starting == OffsetSpec("specific", {"t": {0: 23, 1: -2, 2: -1}})
    assert options.ending is None


@pytest.mark.parametrize("bad", ["soonest", '{"t": [1, 2]}', '{"t": {"x": 1}}', '{"t": {"0": -3}}',
                                 '{"t": {"0": "5"}}'])
def test_malformed_starting_offsets_are_refused_with_a_hint(bad):
    with pytest.raises(ConfigError) as info:
        KafkaSourceOptions.from_options({**BASE, "startingOffsets": bad})
    assert info.value.hint


def test_ending_offsets_cannot_be_earliest():
    with pytest.raises(ConfigError, match="endingOffsets"):
        KafkaSourceOptions.from_options({**BASE, "endingOffsets": "earliest"})
    with pytest.raises(ConfigError, match="endingOffsets"):
        KafkaSourceOptions.from_options({**BASE, "endingOffsets": '{"t": {"0": -2}}'})


@pytest.mark.parametrize("bad", ["0", "-5", "many"])
def test_max_offsets_per_trigger_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger"):
        KafkaSourceOptions.from_options({**BASE, "maxOffsetsPerTrigger": bad})


def test_output_is_records_by_default_and_refuses_anything_but_records_or_ranges():
    assert KafkaSourceOptions.from_options(BASE).output == "records"
    assert KafkaSourceOptions.from_options({**BASE, "output": "Ranges"}).output == "ranges"
    with pytest.raises(ConfigError, match="option output") as info:
        KafkaSourceOptions.from_options({**BASE, "output": "rows"})
    assert "ranges" in info.value.hint


def test_assign_option_is_refused_with_the_alternative():
    with pytest.raises(ConfigError, match="assign") as info:
        KafkaSourceOptions.from_options({**BASE, "assign": '{"t": [0]}'})
    assert "subscribe" in info.value.hint


def test_offsets_round_trip_through_spark_json_form():
    offsets = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    as_json = to_json(offsets)
    assert as_json == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert from_json(as_json) == offsets


def test_rate_limit_leaves_ends_alone_when_under_the_budget():
    assert rate_limited_ends({("t", 0): 0, ("t", 1): 5}, {("t", 0): 10, ("t", 1): 6}, 100) == \
        {("t", 0): 10, ("t", 1): 6}


def test_rate_limit_shares_the_budget_in_proportion_to_lag_and_never_exceeds_it():
    starts = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    ends = {("t", 0): 900, ("t", 1): 200, ("t", 2): 50}
    limited = rate_limited_ends(starts, ends, 100)
    moved = {tp: limited[tp] - starts[tp] for tp in starts}
    assert sum(moved.values()) == 100
    assert moved == {("t", 0): 90, ("t", 1): 10, ("t", 2): 0}


def test_rate_limit_lets_a_small_lagging_partition_move_instead_of_starving():
    starts = {("t", 0): 0, ("t", 1): 0}
    limited = rate_limited_ends(starts, {("t", 0): 10_000, ("t", 1): 1}, 10)
    assert limited[("t", 1)] == 1
    assert limited[("t", 0)] == 9


@dataclass
class _Message:
    """The slice of confluent_kafka.Message that the row builder reads."""

    _key: bytes | None
    _value: bytes | None
    _offset: int
    _timestamp: tuple[int, int]
    _headers: list[tuple[str, bytes | None]] | None

    def key(self): return self._key
    def value(self): return self._value
    def topic(self): return "shop.orders"
    def partition(self): return 1
    def offset(self): return self._offset
    def timestamp(self): return self._timestamp
    def headers(self): return self._headers


def test_messages_become_an_arrow_batch_in_spark_kafka_layout():
    batch = _record_batch([
        _Message(b"k1", b"v1", 7, (1, 1_700_000_000_123), [("lakesync.pos", b"p1"), ("h", None)]),
        _Message(None, None, 8, (2, 1_700_000_000_456), None),
        _Message(b"k3", b"v3", 9, (0, -1), []),
    ])
    assert batch.schema.equals(arrow_schema())
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [7, 8, 9]
    assert rows[0]["key"] == b"k1" and rows[1]["value"] is None
    assert rows[0]["topic"] == "shop.orders" and rows[0]["partition"] == 1
    assert [r["timestampType"] for r in rows] == [0, 1, -1]  # CreateTime, LogAppendTime, none
    assert rows[0]["timestamp"].timestamp() == pytest.approx(1_700_000_000.123)
    assert rows[2]["timestamp"] is None
    assert rows[0]["headers"] == [{"key": "lakesync.pos", "value": b"p1"}, {"key": "h", "value": None}]
    assert rows[1]["headers"] == [] and rows[2]["headers"] == []


def test_input_partitions_survive_pickling_for_the_executors():
    import pickle

    part = KafkaInputPartition("t", 0, 5, 10)
    assert pickle.loads(pickle.dumps(part)) == part


def test_min_partitions_cuts_busy_ranges_into_consecutive_pieces_that_cover_them_exactly():
    ranges = [KafkaInputPartition("a", 0, 100, 1100), KafkaInputPartition("b", 0, 5, 7)]
    pieces = split_ranges(ranges, 4)
    assert len(pieces) >= 4
    for original in ranges:
        mine = [p for p in pieces if p.topic == original.topic]
        assert mine[0].start == original.start and mine[-1].end == original.end
        assert all(left.end == right.start for left, right in itertools.pairwise(mine))
    assert split_ranges(ranges, None) == ranges and split_ranges(ranges, 2) == ranges


class _ErrorEvent:
    """A consumer-level error as confluent-kafka delivers it: an event with an error and no offset."""

    def error(self):
        from confluent_kafka import KafkaError

        return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Receive failed: message larger than receive.message.max.bytes")

    def offset(self):
        return None


class _FakeConsumer:
    """Every consume answers with one error event."""

    def __init__(self, _config: dict) -> None: ...

    def assign(self, _partitions) -> None: ...
    def consume(self, _count, timeout):
        return [_ErrorEvent()]
    def close(self) -> None: ...


def test_an_error_event_without_an_offset_fails_the_read_as_a_broker_error(monkeypatch):
    from lakesync.core.errors import BrokerError
    from lakesync.kafka import spark_source

    monkeypatch.setattr(spark_source, "Consumer", _FakeConsumer)
    with pytest.raises(BrokerError, match=r"receive\.message\.max\.bytes"):
        list(spark_source.read_range({"bootstrap.servers": "b:9092"}, KafkaInputPartition("t", 0, 0, 10),
                                     poll_timeout_s=5))
