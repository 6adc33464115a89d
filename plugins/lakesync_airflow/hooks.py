"""The hook: lakesync's configuration and source connection, built from Airflow's connections.

The library resolves a pipeline's ``conn_id`` from ``AIRFLOW_CONN_*`` variables on its own; inside Airflow
the hook asks Airflow instead (``BaseHook.get_connection``), so connections defined in the UI, in the
metadata database or in a secrets backend all work. Operators call the hook; no operator opens a
connection itself.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from lakesync.core.config import Pipeline, load_pipeline
from lakesync.core.connections import MySQLConnection, mysql_connection_from_fields

if TYPE_CHECKING:
    import pymysql


class LakesyncHook(BaseHook):
    """Everything a task needs to reach one pipeline's source and targets."""

    conn_name_attr = "conn_id"
    hook_name = "lakesync"

    def __init__(self, pipeline: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline_name = pipeline

    @cached_property
    def pipeline(self) -> Pipeline:
        return load_pipeline(self.pipeline_name)

    def source(self) -> MySQLConnection:
        """The source's connection settings from the Airflow connection the pipeline names."""
        conn_id = self.pipeline.source.conn_id
        conn = self.get_connection(conn_id)
        fields = {"host": conn.host, "port": conn.port, "login": conn.login, "password": conn.password,
                  "schema": conn.schema}
        return mysql_connection_from_fields(fields, conn_id=conn_id, ssl=self.pipeline.source.ssl)

    def source_connection(self) -> AbstractContextManager[pymysql.connections.Connection]:
        """An autocommit PyMySQL connection to the source, closed on exit."""
        return self.source().connect(conn_id=self.pipeline.source.conn_id)

    def delta_uri(self, table: str) -> str:
        return self.pipeline.delta.table_uri(table)

    def kafka_config(self) -> dict[str, str]:
        """confluent-kafka settings: the pipeline's, with bootstrap servers from the Airflow connection."""
        kafka = self.pipeline.kafka
        settings = dict(kafka.settings)
        if kafka.bootstrap_servers:
            return {**settings, "bootstrap.servers": kafka.bootstrap_servers}
        assert kafka.conn_id is not None  # the config requires one of the two
        conn = self.get_connection(kafka.conn_id)
        extra = {str(k): str(v) for k, v in (conn.extra_dejson or {}).items()}
        merged = {**extra, **settings}
        if "bootstrap.servers" not in merged and conn.host:
            merged["bootstrap.servers"] = f"{conn.host}:{conn.port or 9092}"
        return merged

    def last_published_positions(self, tables: list[str]) -> dict[str, str]:
        """Per table, the ``lakesync.pos`` of the newest change in its topic (tables with none are left out).

        The stream has caught up with a table once it applied that position (or a newer one)."""
        from confluent_kafka import TopicPartition

        from lakesync.kafka.offsets import end_offsets, list_partitions, offset_consumer

        topics = {self.pipeline.topic(table): table for table in tables}
        consumer = offset_consumer(self.kafka_config())
        found: dict[str, str] = {}
        try:
            ends = end_offsets(consumer, list_partitions(consumer, topics=list(topics)))
            for (topic, partition), end in ends.items():
                if end <= 0:
                    continue
                consumer.assign([TopicPartition(topic, partition, end - 1)])
                message = consumer.poll(10.0)
                consumer.unassign()
                if message is None or message.error():
                    continue
                key = dict(message.headers() or ()).get("lakesync.pos")
                if key is not None:
                    key = key.decode() if isinstance(key, bytes) else str(key)
                    table = topics[topic]
                    found[table] = max(found.get(table, key), key)
        finally:
            consumer.close()
        return found
