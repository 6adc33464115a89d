"""Resolving a pipeline's connection ids into what the MySQL and Kafka clients need.

Connections are Airflow's: an id like ``lakesync_demo_mysql`` is looked up as the environment variable
``AIRFLOW_CONN_LAKESYNC_DEMO_MYSQL`` (a URI or Airflow's JSON form), which is how Airflow itself reads
connections from the environment. Inside Airflow, the plugin's hook passes Airflow's own connection in
instead, so secrets backends work too. Passwords are held as :class:`pydantic.SecretStr` so that a repr,
a log line or an error never shows them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr

from lakesync.core.config import Pipeline
from lakesync.core.errors import ConfigError, SourceError

if TYPE_CHECKING:
    import pymysql

#: The Airflow connection the DAGs' spark-submit tasks use: its host is the Spark master
#: (``local[2]`` in the embedded stack, ``spark://host:7077`` for a cluster).
SPARK_CONN_ID = "lakesync_spark"


@dataclass(frozen=True)
class MySQLConnection:
    host: str
    port: int
    user: str
    password: SecretStr
    database: str | None = None
    ssl: dict[str, str] = field(default_factory=dict)

    def pymysql_kwargs(self) -> dict[str, Any]:
        """Arguments for ``pymysql.connect`` (and python-mysql-replication's connection settings)."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password.get_secret_value(),
            "charset": "utf8mb4",
        }
        if self.ssl:
            kwargs["ssl"] = dict(self.ssl)
        return kwargs

    def describe(self) -> str:
        """Where, for messages: never the password."""
        return f"{self.user}@{self.host}:{self.port}"

    @contextmanager
    def connect(self, *, conn_id: str, autocommit: bool = True) -> Iterator[pymysql.connections.Connection]:
        """A PyMySQL connection, closed on exit; failing to connect is a :class:`SourceError` naming the
        server and the connection id to check (never the password)."""
        import pymysql  # not at import time: DAG files import this module while Airflow parses them

        from lakesync.core.mysql_client import connect_mysql

        try:
            conn = connect_mysql(**self.pymysql_kwargs(), autocommit=autocommit)
        except pymysql.MySQLError as exc:
            raise SourceError(f"cannot connect to the source {self.describe()}: {exc}",
                              hint=f"check the Airflow connection {conn_id!r}") from exc
        try:
            yield conn
        finally:
            conn.close()


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def _raw_connection(conn_id: str) -> dict[str, object]:
    raw = os.environ.get(_env_name(conn_id))
    if raw is None:
        raise ConfigError(
            f"connection {conn_id!r} is not defined",
            hint=(
                f"define it in Airflow (Admin > Connections) or export {_env_name(conn_id)}=mysql://user:pass@host:3306/db; "
                "for the embedded stack run `source .lakesync/env.sh`"
            ),
        )
    if raw.lstrip().startswith("{"):
        try:
            document = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"connection {conn_id!r} is not valid JSON: {exc.msg}") from None
        return dict(document)
    parts = urlsplit(raw)
    return {
        "conn_type": parts.scheme,
        "host": parts.hostname,
        "port": parts.port,
        "login": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
        "schema": parts.path.lstrip("/") or None,
    }


def mysql_connection_from_fields(fields: Mapping[str, object], *, conn_id: str, ssl: dict[str, str] | None = None
                                 ) -> MySQLConnection:
    """Build from Airflow connection fields (``host``, ``port``, ``login``, ``password``, ``schema``)."""
    if not fields.get("host"):
        raise ConfigError(f"connection {conn_id!r} has no host")
    return MySQLConnection(
        host=str(fields["host"]),
        port=int(str(fields.get("port") or 3306)),
        user=str(fields.get("login") or ""),
        password=SecretStr(str(fields.get("password") or "")),
        database=(str(fields["schema"]) if fields.get("schema") else None),
        ssl=dict(ssl or {}),
    )


def mysql_connection(pipeline: Pipeline) -> MySQLConnection:
    conn_id = pipeline.source.conn_id
    return mysql_connection_from_fields(_raw_connection(conn_id), conn_id=conn_id, ssl=pipeline.source.ssl)


def kafka_client_config(pipeline: Pipeline) -> dict[str, str]:
    """confluent-kafka settings: bootstrap servers from the connection or the file, plus pass-through settings."""
    settings = dict(pipeline.kafka.settings)
    if pipeline.kafka.bootstrap_servers:
        settings["bootstrap.servers"] = pipeline.kafka.bootstrap_servers
    else:
        assert pipeline.kafka.conn_id is not None
        fields = _raw_connection(pipeline.kafka.conn_id)
        extra = fields.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra or "{}")
        if not isinstance(extra, dict):
            raise ConfigError(f"the extra field of connection {pipeline.kafka.conn_id!r} is not a JSON object",
                              hint='write it as {"bootstrap.servers": "host:9092", ...}')
        settings = {**{str(k): str(v) for k, v in extra.items()}, **settings}
        if "bootstrap.servers" not in settings and fields.get("host"):
            settings["bootstrap.servers"] = f"{fields['host']}:{fields.get('port') or 9092}"
        if "bootstrap.servers" not in settings:
            raise ConfigError(
                f"connection {pipeline.kafka.conn_id!r} does not say where the broker is",
                hint='put {"bootstrap.servers": "host:9092"} in its extra field',
            )
    return settings
