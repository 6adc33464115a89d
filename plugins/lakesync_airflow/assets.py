"""The Delta tables as Airflow Assets: what downstream DAGs schedule on.

Settlement tables are known when the DAG is parsed (they are named in the pipeline file), so they are
plain outlets. The full load and the stream write whatever tables the source has, known only at run
time, so they emit their tables' assets through an :class:`AssetAlias` of the pipeline.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import Asset, AssetAlias, Context

from lakesync.core.config import Pipeline


def table_uri(pipeline: Pipeline, table: str) -> str:
    """``s3://...`` as configured, or ``file:///absolute/path`` for a local Delta root."""
    uri = pipeline.delta.table_uri(table)
    if "://" in uri:
        return uri
    return Path(uri).resolve().as_uri()


def table_asset(pipeline: Pipeline, table: str) -> Asset:
    return Asset(uri=table_uri(pipeline, table), name=f"lakesync.{pipeline.name}.{table}", group="lakesync")


def tables_alias(pipeline: Pipeline) -> AssetAlias:
    return AssetAlias(name=f"lakesync.{pipeline.name}.tables")


def emit_table_assets(context: Context, pipeline: Pipeline, tables: list[str]) -> None:
    """Record an update of each table's asset through the pipeline's alias (the task must list it in outlets)."""
    events = context["outlet_events"][tables_alias(pipeline)]
    for table in tables:
        events.add(table_asset(pipeline, table))
