"""Operators for the pipeline steps. Each holds the step's parameters and calls the hook and the library.

Heavy modules (deltalake, PyMySQL, pyarrow, the Spark apps) are imported inside ``execute``: this module
is imported whenever the DAG file is parsed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator, Context

from lakesync.core.connections import SPARK_CONN_ID
from lakesync.core.errors import ConfigError, LakesyncError, SinkError
from lakesync_airflow.assets import emit_table_assets
from lakesync_airflow.health import table_figures
from lakesync_airflow.hooks import LakesyncHook


class CheckSourceOperator(BaseOperator):
    """Fail early, with the fix, when the source is not set up for lakesync (binlog, row image, server id)."""

    def __init__(self, *, pipeline: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline

    def execute(self, context: Context) -> dict[str, Any]:
        from lakesync.source.server_checks import (
            check_binlog_settings,
            check_server_id_unique,
            current_position,
        )

        hook = LakesyncHook(self.pipeline)
        with hook.source_connection() as conn:
            check_binlog_settings(conn)
            check_server_id_unique(conn, hook.pipeline.source.server_id)
            position = current_position(conn)
        self.log.info("source %s is ready; binlog at %s", hook.source().describe(), position)
        return {"position": position.key()}


def spark_apps_dir() -> Path:
    """Where the ``spark_apps/`` entry points are: ``$LAKESYNC_SPARK_APPS_DIR``, else ``$LAKESYNC_REPO/spark_apps``,
    else the ``spark_apps/`` beside this plugins folder (the project's layout, which compose mounts as is)."""
    explicit = os.environ.get("LAKESYNC_SPARK_APPS_DIR")
    if explicit:
        return Path(explicit)
    repo = os.environ.get("LAKESYNC_REPO")
    return Path(repo) / "spark_apps" if repo else Path(__file__).resolve().parents[2] / "spark_apps"


def _selected_tables(context: Context) -> list[str]:
    """The trigger form's ``tables`` param: a list, or a comma-separated string; empty means all."""
    raw = context["params"].get("tables") or []
    names = raw.split(",") if isinstance(raw, str) else list(raw)
    return [name.strip() for name in names if name and name.strip()]


class LakesyncSparkSubmitOperator(SparkSubmitOperator):
    """``spark-submit spark_apps/<app>.py --pipeline <p> [...]`` with the stack's Spark connection, delta-spark
    and Spark's Kafka connector (lakesync's cached jars, :func:`lakesync.spark.session.submit_conf`; a task's
    own ``conf`` wins)."""

    def __init__(self, *, pipeline: str, app: str, extra_args: Sequence[str] = (), **kwargs: Any) -> None:
        kwargs.setdefault("conn_id", SPARK_CONN_ID)
        kwargs.setdefault("name", f"lakesync-{pipeline}-{app}")
        super().__init__(application=str(spark_apps_dir() / f"{app}.py"),
                         application_args=["--pipeline", pipeline, *extra_args], **kwargs)
        self.pipeline = pipeline

    def execute(self, context: Context) -> None:
        from lakesync.spark.session import submit_conf  # at run time: it may fetch the jars once

        self.conf = {**submit_conf(), **(self.conf or {})}
        super().execute(context)


class FullLoadOperator(LakesyncSparkSubmitOperator):
    """Run ``spark_apps/full_load.py`` for the tables and mode picked in the trigger form."""

    def __init__(self, *, pipeline: str, **kwargs: Any) -> None:
        super().__init__(pipeline=pipeline, app="full_load", **kwargs)

    def execute(self, context: Context) -> None:
        tables = _selected_tables(context)
        mode = context["params"].get("mode")
        self.application_args = [
            "--pipeline", self.pipeline, *(["--tables", ",".join(tables)] if tables else []),
            *(["--mode", mode] if mode else []), *(["--restart"] if context["params"].get("restart") else []),
        ]
        super().execute(context)
        from lakesync.full_load.state import LoadState

        hook = LakesyncHook(self.pipeline)
        state = LoadState.for_pipeline_dir(hook.pipeline.pipeline_state_dir)
        emit_table_assets(context, hook.pipeline, [t for t in state.tables if state.is_done(t)])


class StreamOperator(LakesyncSparkSubmitOperator):
    """Run ``spark_apps/stream.py --once``: apply what Kafka holds now (availableNow), then stop."""

    def __init__(self, *, pipeline: str, **kwargs: Any) -> None:
        super().__init__(pipeline=pipeline, app="stream", extra_args=["--once"], **kwargs)

    def execute(self, context: Context) -> None:
        from lakesync.monitoring.status import pipeline_status
        from lakesync.stream.progress import StreamProgress

        hook = LakesyncHook(self.pipeline)
        before = StreamProgress.load(hook.pipeline.pipeline_state_dir)
        super().execute(context)
        progress = StreamProgress.load(hook.pipeline.pipeline_state_dir)
        emit_table_assets(context, hook.pipeline, list(progress.tables))
        # with the broker: each table's lag after this run (what is left unapplied), not only its counts
        figures = table_figures(pipeline_status(hook.pipeline, relay=True, relay_timeout_s=5.0, binlog=False))
        for table, values in figures.items():
            old = before.tables.get(table)
            values["applied_this_run"] = (values["changes_applied"] or 0) - (old.rows_total if old else 0)
            self.log.info("table %s: %s", table, values)
        context["ti"].xcom_push(key="figures", value=figures)  # what this run applied, per table


class HandoffOperator(BaseOperator):
    """Check that the relay's change log reaches back to the full load's positions; return catch-up targets.

    The targets (``{table: position key}``) are the newest change each table's topic holds now; the
    caught-up sensor waits for the stream to apply them."""

    def __init__(self, *, pipeline: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline

    def execute(self, context: Context) -> dict[str, str]:
        from lakesync.full_load.state import LoadState
        from lakesync.relay import covered_range
        from lakesync.stream.handoff import check_coverage

        hook = LakesyncHook(self.pipeline)
        state = LoadState.for_pipeline_dir(hook.pipeline.pipeline_state_dir)
        handoff = {t: entry.position_key for t, entry in state.tables.items() if entry.position_key}
        if not handoff:
            raise ConfigError(
                f"pipeline {self.pipeline!r} has no finished full load in {state.path}",
                hint=f"run the DAG lakesync_{self.pipeline}_full_load first",
            )
        covered = covered_range(hook.pipeline)
        check_coverage(self.pipeline, handoff, covered[0] if covered else None)
        published = hook.last_published_positions(sorted(handoff))
        targets = {t: key for t, key in published.items() if key > handoff[t]}
        self.log.info("handoff positions %s; catch-up targets %s", handoff, targets)
        return targets


class ValidateTablesOperator(BaseOperator):
    """Compare source and Delta table by table (``lakesync.validation.validate.validate_pipeline``: counts, row
    fingerprints, differing keys, tolerant of changes still in flight) and record the run for the status view.

    The validation library resolves the source from the ``AIRFLOW_CONN_*`` environment, not through the hook."""

    def __init__(self, *, pipeline: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline

    def execute(self, context: Context) -> dict[str, Any]:
        from lakesync.validation.validate import validate_pipeline

        report = validate_pipeline(LakesyncHook(self.pipeline).pipeline, tables=_selected_tables(context) or None,
                                   store=True)
        for table in report.tables:
            self.log.info("%s", table.describe())
        report.raise_for_mismatch()
        return report.to_json()


class SettleIntervalOperator(BaseOperator):
    """Settle one table's data interval in one Delta commit, then validate the interval.

    Keyed on the run's ``data_interval_start/end``: re-running a run (clear, backfill) settles the same
    interval again, which changes nothing unless the source changed."""

    def __init__(self, *, pipeline: str, table: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.table = table

    def execute(self, context: Context) -> dict[str, Any]:
        from lakesync.settlement.sync import settle_table, validate_interval

        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None or start >= end:
            raise ConfigError(
                f"run {context['run_id']} has no data interval",
                hint="settlement DAGs need a timetable with real data intervals (CronDataIntervalTimetable)",
            )
        hook = LakesyncHook(self.pipeline)
        with hook.source_connection() as conn:
            result = settle_table(hook.pipeline, self.table, interval_start=start, interval_end=end, conn=conn)
            check = validate_interval(hook.pipeline, self.table, interval_start=start, interval_end=end, conn=conn)
        self.log.info(
            "%s %s: %d source rows, %d inserted, %d updated, %d deleted, commit %s, run %d; validated %s",
            self.table, result.interval, result.source_rows, result.inserted, result.updated, result.deleted,
            result.delta_version, result.run, check,
        )
        return result.as_dict()


class MaintenanceOperator(BaseOperator):
    """OPTIMIZE, purge expired tombstones, VACUUM, and report, for each Delta table.

    OPTIMIZE orders a keyed table's files by its key (``z_order`` on the key columns): the stream's MERGEs
    rewrite touched files in arrival order, and files that each cover a narrow key range are what lets a
    batch of changes touch few of them (docs/stream.md, "Table layout"). Tables without a key are compacted.

    Tombstones live in the sink's side table (``lakesync.sink.tombstones``); those of deletes older than
    ``stream.tombstone_retention_hours`` are purged, after which a replayed change that old could no longer
    be recognised as stale: keep the retention above the Kafka retention and the worst stream lag.
    OPTIMIZE and VACUUM go through ``lakesync.sink.writer`` (commit-conflict retries; VACUUM keeps at least a
    week of removed files, so a running reader or the stream never loses a file it still needs); with
    ``delta.writer: delta_spark`` through ``lakesync.sink.spark_maintenance`` (delta-spark commits, deletion
    vectors purged between OPTIMIZE and VACUUM). Each table's tombstone side table is then maintained the
    same way once it has 50 files (``lakesync.sink.maintenance``): the stream appends a small file to it per
    batch with deletes."""

    def __init__(self, *, pipeline: str, vacuum_retention_hours: float = 168, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.vacuum_retention_hours = vacuum_retention_hours

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        from lakesync.full_load.state import LoadState
        from lakesync.sink.maintenance import maintain_with_tombstones
        from lakesync.source.schema import selected_tables

        hook = LakesyncHook(self.pipeline)
        pipeline = hook.pipeline
        options = pipeline.delta.storage_options or None
        cutoff_ms = int((time.time() - pipeline.stream.tombstone_retention_hours * 3600) * 1000)
        # The tables are named by the source, not by listing the Delta root: an object store has no folders
        # to list cheaply, and the same code then serves local and s3:// roots alike.
        with hook.source_connection() as conn:
            names = selected_tables(conn, pipeline)
        reports = []
        failed: dict[str, LakesyncError] = {}
        loaded = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables
        for name in names:
            uri = pipeline.delta.table_uri(name)
            if not DeltaTable.is_deltatable(uri, storage_options=options):
                continue
            state = loaded.get(name)
            keys = pipeline.tables.settings_for(name).key_columns or (state.key_columns if state else None)
            try:
                steps = maintain_with_tombstones(pipeline.delta.writer, uri, key_columns=list(keys) if keys else None,
                                                 retention_hours=self.vacuum_retention_hours,
                                                 tombstones_before_ms=cutoff_ms, storage_options=options)
            except LakesyncError as exc:  # the other tables are still maintained; the task fails at the end
                self.log.error("maintenance of %s failed: %s", name, exc)
                failed[name] = exc
                continue
            report = {"table": name, "version": DeltaTable(uri, storage_options=options).version(), **steps}
            self.log.info("%s", report)
            reports.append(report)
        if failed:
            first = next(iter(failed.values()))
            raise SinkError(f"maintenance failed for {len(failed)} of {len(reports) + len(failed)} tables "
                            f"({', '.join(failed)}); the others were maintained. First: {first.message}",
                            hint=first.hint)
        return reports
