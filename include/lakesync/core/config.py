"""Pipeline configuration: one YAML file per pipeline in ``include/pipelines/``, validated once, at the edge.

A pipeline moves one source database into one Delta root. The file names connections by id (Airflow
connection ids, resolved by :mod:`lakesync.core.connections`), selects tables, and says per table which
semantics it gets. Errors name the file and the field, e.g. ``demo.yaml: tables.overrides.ledger.semantics``.

Strings may use ``${VAR}`` or ``${VAR:-default}``; the embedded stack sets ``LAKESYNC_STATE_DIR``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lakesync.core.errors import ConfigError

log = logging.getLogger(__name__)

PIPELINES_DIR_ENV = "LAKESYNC_PIPELINES_DIR"
_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
_NAME = r"^[A-Za-z][A-Za-z0-9_]{0,62}$"
_TOPIC_ILLEGAL = re.compile(r"[^A-Za-z0-9._-]")
_TOPIC_MAX = 249

Semantics = Literal["exactly_once", "append_log"]


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt setting must not be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Watermark(_Strict):
    """How a settlement sync finds an interval's rows without a binlog."""

    column: str
    kind: Literal["timestamp", "id"] = "timestamp"


class TableSettings(_Strict):
    semantics: Semantics | None = None
    key_columns: list[str] | None = Field(
        default=None, description="Use these columns as the key when the table has no primary key."
    )
    watermark: Watermark | None = None
    chunk_rows: int | None = Field(default=None, gt=0)


#: Names online schema change tools give their shadow, changelog and old copies of table ``t``: gh-ost and
#: pt-online-schema-change (``_t_gho``, ``_t_new``, ...), Facebook's OSC (``__osc_new_t``), LHM (``lhmn_t``,
#: ``lhma_<time>_t``) and Vitess (``_vt_...``). Never selected, so new-table joins never load them.
ONLINE_SCHEMA_CHANGE_SHADOW = re.compile(r"^(_.+_(gho|ghc|del|new|old)|__osc_.+|lhm[na]_.+|_vt_.+)$")


class Tables(_Strict):
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    overrides: dict[str, TableSettings] = Field(default_factory=dict)

    def selects(self, table: str) -> bool:
        """Include/exclude by name or shell pattern (``audit_*``); exclude wins. The shadow tables of online
        schema change tools (:data:`ONLINE_SCHEMA_CHANGE_SHADOW`) are never selected: their rows reach ``t``
        by its own events or its re-load."""
        if ONLINE_SCHEMA_CHANGE_SHADOW.match(table):
            return False
        included = any(fnmatch.fnmatchcase(table, pattern) for pattern in self.include)
        return included and not any(fnmatch.fnmatchcase(table, pattern) for pattern in self.exclude)

    def settings_for(self, table: str) -> TableSettings:
        return self.overrides.get(table, TableSettings())


class Source(_Strict):
    conn_id: str = Field(description="Airflow connection id of the MySQL/MariaDB source.")
    database: str
    server_id: int = Field(
        default=4100, ge=1, lt=2**32, description="Replica server id the relay uses; unique on the source."
    )
    ssl: dict[str, str] = Field(default_factory=dict, description="PyMySQL ssl options (ca, cert, key...).")


class Kafka(_Strict):
    conn_id: str | None = Field(default=None, description="Airflow connection id holding bootstrap.servers.")
    bootstrap_servers: str | None = None
    topic_prefix: str
    partitions: int = Field(default=1, ge=1)
    settings: dict[str, str] = Field(
        default_factory=dict, description="Passed through to the client: security.protocol, sasl.*, ssl.*"
    )
    transactions: bool = Field(
        default=True,
        description="The relay publishes changes and its progress in one Kafka transaction (exactly once); false "
        "for clusters that refuse transactions (at-least-once, made exact by the sink's position rule).",
    )
    retention_hours: float | None = Field(
        default=7 * 24, gt=0,
        description="retention.ms of the table topics the relay creates (and aligns on start); null leaves it to "
        "the broker. The stream must read a change before it is deleted: keep it above the longest outage.",
    )

    @model_validator(mode="after")
    def _one_way_to_reach_the_broker(self) -> Kafka:
        if not (self.conn_id or self.bootstrap_servers):
            raise ValueError("set either conn_id or bootstrap_servers")
        if self.conn_id and self.bootstrap_servers:
            raise ValueError("set conn_id or bootstrap_servers, not both (which broker is meant is ambiguous)")
        return self


class Delta(_Strict):
    root: str = Field(description="Where the pipeline's Delta tables live: a local path or s3://bucket/prefix.")
    storage_options: dict[str, str] = Field(default_factory=dict)
    writer: Literal["delta_rs", "delta_spark"] = Field(
        default="delta_spark",
        description="What commits lakesync's writes to the pipeline's tables: 'delta_spark' (the default: in "
        "Spark's JVM, with deletion vectors; the path that scales out) or 'delta_rs' (on the driver, copy-on-write, "
        "no JVM in the settlement and maintenance tasks; faster on a small machine). With 'delta_spark' the stream's "
        "batches, the full load's commit of each table, the settlement's commit, the maintenance task (OPTIMIZE, "
        "purging deletion vectors, VACUUM), the schema changes the stream follows in place (type widening "
        "included), the tombstone side tables and lakesync's own history and validation tables run on "
        "delta-spark: delta-rs only reads. The first delta-spark write of a table delta-rs created switches its "
        "deletion vectors on: a protocol upgrade (reader 3 / writer 7) that can't be undone; column names with a "
        "backtick, a space or ,;{}()= are refused (docs/sink.md, \"Writing with delta-spark\").",
    )

    def table_uri(self, table: str) -> str:
        return f"{self.root.rstrip('/')}/{table}"


class Snapshot(_Strict):
    mode: Literal["consistent", "chunked"] = "consistent"
    chunk_rows: int = Field(default=250_000, gt=0)


class Stream(_Strict):
    trigger_seconds: float = Field(default=5.0, gt=0)
    #: the batch bound: records per micro-batch (None: unbounded); a backlog of any size streams in batches of this
    max_offsets_per_trigger: int | None = Field(default=100_000, gt=0)
    #: the relay pauses the binlog read while the stream is more than this many records behind (None: never)
    backpressure_max_lag: int | None = Field(default=5_000_000, gt=0)
    backpressure_check_seconds: float = Field(default=5.0, gt=0)
    tombstone_retention_hours: float = Field(default=7 * 24, gt=0)
    lag_alert_seconds: float = Field(default=300, gt=0)
    reload_on_schema_change: bool = Field(
        default=True,
        description="Re-load a table from the stream when a DDL can't be followed in place (the stream waits "
        "while it loads); false: stop the table with the command that re-loads it (docs/schema_changes.md).",
    )
    join_new_tables: bool = Field(
        default=True,
        description="Stream a selected table that appears after the full load without a restart: one created "
        "in the change log from its CREATE TABLE on, one renamed in through its own load (docs/operations.md, "
        "\"A table created after the load\"); false: status names it with the command that loads it, and nothing "
        "loads a table by itself.",
    )
    merge_threads: int = Field(
        default=4, ge=1,
        description="The MERGEs of the tables one micro-batch changed run this many at once (each table is its "
        "own Delta table; delta-rs works outside the GIL); 1: one after another.",
    )
    decode: Literal["python", "spark_sql"] = Field(
        default="spark_sql",
        description="Where the relay's events are decoded: 'spark_sql' (Spark SQL in the executors' JVM, "
        "from_json and casts that refuse a value that does not fit; records it can't take, such as Debezium's, "
        "go the Python way) or 'python' (a Python worker beside each task decodes Arrow batches column-wise) "
        "(docs/stream.md, \"Decoding in Spark SQL\").",
    )

    @model_validator(mode="before")
    @classmethod
    def _kafka_reader_was_removed(cls, data: object) -> object:
        """``kafka_reader`` chose between Spark's Kafka source and lakesync's former Python one, now removed.
        ``spark`` is what the stream does anyway: dropped with a warning (refusing it would stop every
        pipeline's DAGs from loading after an upgrade); ``lakesync`` is refused with what to do."""
        if not isinstance(data, dict) or "kafka_reader" not in data:
            return data
        if data["kafka_reader"] == "spark":
            log.warning("stream.kafka_reader is no longer a setting (the stream always reads with Spark's Kafka "
                        "source): delete the line")
            return {key: value for key, value in data.items() if key != "kafka_reader"}
        raise ValueError(
            "kafka_reader was removed: the stream always reads Kafka with Spark's Kafka source. Delete the "
            "line; a checkpoint of lakesync's former reader is carried over at its committed offsets on the "
            "next run (docs/operations.md, \"Upgrading from lakesync's Python Kafka reader\")")


class Relay(_Strict):
    """How the relay groups its work into Kafka transactions and rides out outages (docs/configuration.md)."""

    transaction_seconds: float = Field(
        default=0.5, gt=0,
        description="A Kafka transaction is committed at the first source transaction end after it has been open "
        "this long: what read_committed readers see lags the binlog by about this much.",
    )
    transaction_max_changes: int = Field(
        default=50_000, gt=0, description="... or after this many change events, whichever comes first.")
    heartbeat_seconds: float = Field(
        default=5.0, gt=0,
        description="While no table changes, the relay writes its progress this often (a heartbeat), so a quiet, "
        "caught-up pipeline is known to be caught up and a dead relay is noticed.",
    )
    give_up_after_seconds: float = Field(
        default=900, gt=0,
        description="After the source or the broker goes away, the relay reconnects with backoff for this long "
        "before it stops with an error.",
    )


class Recovery(_Strict):
    """What the pipeline does by itself when it can't go on as it was (docs/operations.md)."""

    when_purged: Literal["fail", "reload"] = Field(
        default="fail",
        description="When the binlog position the relay resumes from is no longer on the source (purged): "
        "'fail' stops the relay with the command that recovers (`lakesync snapshot --pipeline NAME --restart`); "
        "'reload' makes the relay run that re-load of every table itself, then go on from the load's position "
        "(as Debezium's snapshot.mode when_needed does).",
    )


class Monitoring(_Strict):
    """Where operators read the pipeline's figures (docs/operations.md, "Metrics" and "History")."""

    metrics_address: str | None = Field(
        default=None,
        description="host:port of the OpenMetrics/Prometheus endpoint the relay and a continuous stream serve; "
        "off when unset. Use a loopback host (127.0.0.1) unless a scraper on another machine must reach it.",
    )
    history_interval_seconds: float = Field(default=60, gt=0, description="One history row per table per interval.")
    history_retention_days: float = Field(default=14, gt=0, description="History rows older than this are deleted.")
    binlog_expiry_warning_seconds: float = Field(
        default=6 * 3600, ge=0,
        description="`lakesync status` and the health DAG warn when the binlog file the relay still needs may "
        "expire on the source (binlog_expire_logs_seconds / expire_logs_days) within this many seconds.",
    )

    @field_validator("metrics_address")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"metrics_address {value!r} is not host:port (e.g. 127.0.0.1:9464)")
        return value


class Settlement(_Strict):
    schedule: str = Field(default="0 2 * * *", description="Cron: when each day's interval is settled.")
    timezone: str = "UTC"
    safety_window_seconds: int = Field(default=60, ge=0)


class Pipeline(_Strict):
    name: Annotated[str, Field(pattern=_NAME)]
    description: str = ""
    source: Source
    tables: Tables = Field(default_factory=Tables)
    kafka: Kafka
    delta: Delta
    snapshot: Snapshot = Field(default_factory=Snapshot)
    stream: Stream = Field(default_factory=Stream)
    relay: Relay = Field(default_factory=Relay)
    settlement: Settlement = Field(default_factory=Settlement)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    recovery: Recovery = Field(default_factory=Recovery)
    state_dir: str = Field(
        default="${LAKESYNC_STATE_DIR:-.lakesync}/pipelines",
        description="Where checkpoints and load progress live (per pipeline subfolder).",
        validate_default=True,
    )

    @field_validator("state_dir")
    @classmethod
    def _expand_state_dir(cls, value: str) -> str:
        return str(expand_env(value))

    @field_validator("tables")
    @classmethod
    def _watermark_semantics_agree(cls, tables: Tables) -> Tables:
        for table, settings in tables.overrides.items():
            if settings.key_columns is not None and not settings.key_columns:
                raise ValueError(f"overrides.{table}.key_columns is empty; remove it or name the key columns")
        return tables

    def topic(self, table: str) -> str:
        """``<prefix>.<db>.<table>``, the Debezium naming.

        Kafka allows only letters, digits, ``.``, ``_`` and ``-`` in a topic name (249 at most); a name with
        anything else (a table called ``my table`` or ``größe``) has those characters replaced by ``_`` and a
        short hash of the real name appended, so that two tables never share a topic.
        """
        name = f"{self.kafka.topic_prefix}.{self.source.database}.{table}"
        if _TOPIC_ILLEGAL.search(name) is None and len(name) <= _TOPIC_MAX:
            return name
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        return f"{_TOPIC_ILLEGAL.sub('_', name)[:_TOPIC_MAX - 11]}_{digest}"

    @property
    def pipeline_state_dir(self) -> Path:
        return Path(self.state_dir) / self.name


def expand_env(value: object) -> object:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of a parsed YAML document."""
    if isinstance(value, str):
        def replace(match: re.Match[str]) -> str:
            found = os.environ.get(match["name"])
            if found is None:
                if match["default"] is None:
                    raise ConfigError(
                        f"${{{match['name']}}} is used but not set",
                        hint=f"export {match['name']}=... or write ${{{match['name']}:-default}}",
                    )
                return match["default"]
            return found

        return _ENV_REF.sub(replace, value)
    if isinstance(value, dict):
        return {key: expand_env(item) for key, item in value.items()}
    if isinstance(value, list):
        return [expand_env(item) for item in value]
    return value


def _field_path(location: tuple[object, ...]) -> str:
    return ".".join(str(part) for part in location) or "(top level)"


def parse_pipeline(document: object, *, source_name: str) -> Pipeline:
    """Validate a parsed YAML document; errors name ``source_name`` and each bad field."""
    if not isinstance(document, dict):
        raise ConfigError(f"{source_name}: a pipeline file must be a mapping of settings, got {type(document).__name__}")
    try:
        return Pipeline.model_validate(expand_env(document))
    except ConfigError as exc:
        raise ConfigError(f"{source_name}: {exc.message}", hint=exc.hint) from None
    except ValidationError as exc:
        problems = [f"{_field_path(err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ConfigError(
            f"{source_name}: invalid pipeline configuration\n    " + "\n    ".join(problems),
            hint="fix the fields named above (docs/configuration.md lists every setting)",
        ) from None


def load_pipeline_file(path: str | os.PathLike[str]) -> Pipeline:
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline file {file}: {exc.strerror}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file.name}: not valid YAML: {exc}") from None
    pipeline = parse_pipeline(document, source_name=file.name)
    if pipeline.name != file.stem:
        raise ConfigError(
            f"{file.name}: name is {pipeline.name!r} but the file is {file.stem!r}",
            hint=f"rename the file to {pipeline.name}.yaml or set name: {file.stem}",
        )
    return pipeline


def pipelines_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``explicit``, else ``$LAKESYNC_PIPELINES_DIR``, else ``./include/pipelines``."""
    return Path(explicit or os.environ.get(PIPELINES_DIR_ENV) or "include/pipelines").resolve()


def pipeline_files(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    return sorted(pipelines_dir(directory).glob("*.yaml"))


def load_pipeline(name: str, directory: str | os.PathLike[str] | None = None) -> Pipeline:
    """The pipeline called ``name``, from ``<pipelines dir>/<name>.yaml``."""
    folder = pipelines_dir(directory)
    file = folder / f"{name}.yaml"
    if not file.exists():
        known = ", ".join(path.stem for path in pipeline_files(folder)) or "none"
        raise ConfigError(
            f"no pipeline called {name!r} in {folder}",
            hint=f"pipelines there: {known}; set {PIPELINES_DIR_ENV} to use another folder",
        )
    return load_pipeline_file(file)
