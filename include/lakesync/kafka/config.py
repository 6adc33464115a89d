"""Options of the lakesync Kafka source, checked once at the edge and turned into confluent-kafka settings.

The option names follow Spark's own Kafka source (``subscribe``, ``subscribePattern``, ``startingOffsets``,
``endingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``, and every ``kafka.``-prefixed option passed
to the client with the prefix removed), so a job written for ``format("kafka")`` moves over by changing
the format name. TLS and SASL settings (``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.*``)
pass through untouched; their secret values never appear in a message, a repr or a log line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from lakesync.core.errors import ConfigError

KAFKA_PREFIX = "kafka."

#: What a read returns: Spark's Kafka columns, or the planned offset ranges only.
OUTPUTS = ("records", "ranges")

#: Spark's conventions inside offset JSON: -2 is the earliest offset, -1 the latest.
EARLIEST, LATEST = -2, -1

#: Settings lakesync must own: offsets live in Spark's checkpoint, never in a consumer group; and only what
#: committed transactions hold is read (the relay publishes in transactions: aborted records are never changes).
_FORCED = {"enable.auto.commit": "false", "enable.auto.offset.store": "false", "isolation.level": "read_committed"}
_DEFAULT_GROUP_ID = "lakesync-kafka-source"
#: Fragments of librdkafka property names whose values are secrets.
_SECRET_MARKERS = ("password", "secret", "jaas", "key.pem", "oauthbearer.config", "token")
_REDACTED = "***"


def is_secret(key: str) -> bool:
    """Whether a client property holds a credential (``sasl.password``, ``ssl.key.password``, ...)."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redacted(config: Mapping[str, str]) -> dict[str, str]:
    """A copy of a client or source config that is safe to log: secret values replaced by ``***``."""
    return {key: (_REDACTED if is_secret(key) else value) for key, value in config.items()}


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The confluent-kafka config carried by the ``kafka.``-prefixed options (prefix removed).

    ``bootstrap.servers`` is required. A group id is filled in because librdkafka refuses a consumer
    without one, although lakesync never joins a group (it always ``assign``\\ s explicit offsets).
    """
    config = {key[len(KAFKA_PREFIX):]: str(value) for key, value in options.items()
              if key.lower().startswith(KAFKA_PREFIX)}
    if not config.get("bootstrap.servers", "").strip():
        raise ConfigError(
            "the Kafka source needs the broker address: option 'kafka.bootstrap.servers' is missing",
            hint="add .option('kafka.bootstrap.servers', 'host1:9092,host2:9092')",
        )
    auto_commit = config.get("enable.auto.commit", "false").lower()
    if auto_commit != "false":
        raise ConfigError(
            "option 'kafka.enable.auto.commit' cannot be turned on for the Kafka source",
            hint="offsets are kept in Spark's checkpoint; remove the option",
        )
    config.setdefault("group.id", _DEFAULT_GROUP_ID)
    config.update(_FORCED)
    return config


def _parse_offsets_json(name: str, text: str, *, allow_earliest: bool) -> dict[str, dict[int, int]]:
    """Spark's per-partition offset JSON ``{"topic": {"0": 23, "1": -2}}`` as ``{topic: {partition: offset}}``."""
    hint = f'write {name} as earliest, latest or JSON like {{"orders": {{"0": 23, "1": -2}}}}'
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {name} is neither earliest, latest nor valid JSON: {exc}", hint=hint) from exc
    if not isinstance(raw, dict) or not all(isinstance(parts, dict) for parts in raw.values()):
        raise ConfigError(f"option {name} must map topics to {{partition: offset}} objects", hint=hint)
    offsets: dict[str, dict[int, int]] = {}
    for topic, parts in raw.items():
        offsets[topic] = {}
        for partition, offset in parts.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int):
                raise ConfigError(f"option {name}: {topic}/{partition} -> {offset!r} is not a partition "
                                  "number mapped to an integer offset", hint=hint)
            if offset < (EARLIEST if allow_earliest else LATEST):
                allowed = "-2 (earliest), -1 (latest)" if allow_earliest else "-1 (latest)"
                raise ConfigError(f"option {name}: offset {offset} for {topic}/{partition} is invalid",
                                  hint=f"offsets are >= 0, or {allowed}")
            offsets[topic][int(partition)] = offset
    return offsets


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends: ``earliest``, ``latest`` or given offsets per partition.

    ``offsets`` holds Spark's JSON form decoded; inside it -2 means earliest and -1 latest.
    """

    kind: str  # "earliest" | "latest" | "specific"
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, name: str, text: str | None, *, allow_earliest: bool = True) -> OffsetSpec | None:
        """None when the option is not given: the default differs between streaming and batch reads."""
        if text is None:
            return None
        value = text.strip()
        if value.lower() in ("earliest", "latest"):
            if value.lower() == "earliest" and not allow_earliest:
                raise ConfigError(f"option {name} cannot be earliest", hint=f"use latest or JSON offsets for {name}")
            return cls(value.lower())
        return cls("specific", _parse_offsets_json(name, value, allow_earliest=allow_earliest))


def _positive_int(name: str, text: str | None) -> int | None:
    if text is None or str(text).strip() == "":
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"option {name} must be a positive integer, got {text!r}")
    return value


def _boolean(name: str, text: str | None, *, default: bool) -> bool:
    if text is None:
        return default
    lowered = str(text).strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigError(f"option {name} must be true or false, got {text!r}")
    return lowered == "true"


@dataclass(frozen=True)
class KafkaSourceOptions:
    """The validated options of one ``lakesync-kafka`` read.

    ``client`` is the confluent-kafka config; it may hold credentials, so it is left out of the repr.
    """

    client: dict[str, str] = field(repr=False)
    topics: tuple[str, ...] | None
    pattern: str | None
    starting: OffsetSpec | None
    ending: OffsetSpec | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    poll_timeout_s: float
    min_partitions: int | None = None
    #: ``records`` (Spark's Kafka columns) or ``ranges``: one row per planned offset range, for an app that
    #: reads the messages on its executors itself (the lakesync stream: see docs/kafka_source.md).
    output: str = "records"

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        """Validate Spark data-source options (Spark hands them over with lower-cased names)."""
        lowered = {key.lower(): value for key, value in options.items()}
        subscribe, pattern = lowered.get("subscribe"), lowered.get("subscribepattern")
        if "assign" in lowered:
            raise ConfigError("option 'assign' is not supported by the lakesync Kafka source",
                              hint="use subscribe (a comma-separated topic list) or subscribePattern")
        if (subscribe is None) == (pattern is None):
            raise ConfigError("the Kafka source needs exactly one of the options subscribe and subscribePattern",
                              hint="e.g. .option('subscribe', 'shop.orders') or "
                                   ".option('subscribePattern', 'shop\\..*')")
        topics = None
        if subscribe is not None:
            topics = tuple(name.strip() for name in subscribe.split(",") if name.strip())
            if not topics:
                raise ConfigError("option subscribe names no topic", hint="give a comma-separated list of topics")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"option subscribePattern {pattern!r} is not a valid regular expression: {exc}"
                                  ) from exc
        poll_ms = _positive_int("kafkaConsumer.pollTimeoutMs", lowered.get("kafkaconsumer.polltimeoutms"))
        output = str(lowered.get("output", "records")).strip().lower()
        if output not in OUTPUTS:
            raise ConfigError(f"option output must be one of {', '.join(OUTPUTS)}, got {output!r}",
                              hint="records gives Spark's Kafka columns; ranges one row per offset range to read")
        return cls(
            client=client_config(lowered),
            topics=topics,
            pattern=pattern,
            starting=OffsetSpec.parse("startingOffsets", lowered.get("startingoffsets")),
            ending=OffsetSpec.parse("endingOffsets", lowered.get("endingoffsets"), allow_earliest=False),
            max_offsets_per_trigger=_positive_int("maxOffsetsPerTrigger", lowered.get("maxoffsetspertrigger")),
            fail_on_data_loss=_boolean("failOnDataLoss", lowered.get("failondataloss"), default=True),
            poll_timeout_s=(poll_ms or 120_000) / 1000.0,
            min_partitions=_positive_int("minPartitions", lowered.get("minpartitions")),
            output=output,
        )

    def safe_client_config(self) -> dict[str, str]:
        """The client config with credentials masked, for logs and error messages."""
        return redacted(self.client)
