"""Build each pipeline's DAGs from its file in ``include/pipelines/``: adding a pipeline is adding a file.

Per pipeline ``p``:

* ``lakesync_p_full_load`` (manual): check the source -> full load (spark-submit) -> handoff (the relay's log
  reaches back to the load's positions) -> stream (availableNow) -> wait, deferred, until the stream applied
  every table past its target -> validate. The trigger form picks tables and mode.
* ``lakesync_p_stream``: availableNow runs every few minutes, one at a time.
* ``lakesync_p_health``: every few minutes, fails when a table is stopped or lags past
  ``stream.lag_alert_seconds``, or the relay has been silent for longer (the alert goes through Airflow:
  failure e-mails, callbacks, notifiers).
* ``lakesync_p_settlement``: nightly, on a timetable with real data intervals, one task per watermarked
  table; catchup off, ``airflow backfill create`` for past days.
* ``lakesync_p_maintenance``: weekly OPTIMIZE, tombstone purge, VACUUM, report.

Parsing reads only the YAML files. An invalid file fails the parse with its file and field named, so it
shows as the DAG file's import error in the UI and in ``airflow dags list-import-errors``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from lakesync.core.config import Pipeline, load_pipeline_file, pipeline_files, pipelines_dir
from lakesync.core.errors import ConfigError
from lakesync_airflow.assets import table_asset, tables_alias
from lakesync_airflow.health import HealthCheckOperator
from lakesync_airflow.operators import (
    CheckSourceOperator,
    FullLoadOperator,
    HandoffOperator,
    MaintenanceOperator,
    SettleIntervalOperator,
    StreamOperator,
    ValidateTablesOperator,
)
from lakesync_airflow.sensors import StreamCaughtUpSensor

#: No run is ever scheduled before this date; backfills may reach back to it.
START_DATE = datetime(2024, 1, 1)
STREAM_EVERY = timedelta(minutes=5)


def _tags(pipeline: Pipeline, kind: str) -> list[str]:
    return ["lakesync", f"pipeline:{pipeline.name}", kind]


def full_load_dag(pipeline: Pipeline) -> DAG:
    p = pipeline.name
    with DAG(
        dag_id=f"lakesync_{p}_full_load",
        description=f"Full load of {pipeline.source.database} into Delta, then hand off to the stream",
        doc_md=__doc__,
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=_tags(pipeline, "full_load"),
        params={
            "tables": Param([], type="array", items={"type": "string"},
                            description="Tables to load (empty: every table the pipeline selects)."),
            "mode": Param(pipeline.snapshot.mode, enum=["consistent", "chunked"],
                          description="consistent: one snapshot; chunked: lock-free key-range chunks."),
            "restart": Param(False, type="boolean",
                             description="Load every table again (default: resume, skipping tables already loaded)."),
        },
    ) as dag:
        alias = tables_alias(pipeline)
        check = CheckSourceOperator(task_id="check_source", pipeline=p)
        load = FullLoadOperator(task_id="full_load", pipeline=p, outlets=[alias])
        handoff = HandoffOperator(task_id="handoff", pipeline=p)
        stream = StreamOperator(task_id="stream", pipeline=p, outlets=[alias])
        caught_up = StreamCaughtUpSensor(
            task_id="wait_caught_up", pipeline=p, poll_seconds=pipeline.stream.trigger_seconds,
            targets_from="handoff", timeout=int(pipeline.stream.lag_alert_seconds * 4),
        )
        validate = ValidateTablesOperator(task_id="validate", pipeline=p)
        check >> load >> handoff >> stream >> caught_up >> validate
    return dag


def stream_dag(pipeline: Pipeline) -> DAG:
    with DAG(
        dag_id=f"lakesync_{pipeline.name}_stream",
        description="Apply the change stream (availableNow) on a short schedule",
        schedule=STREAM_EVERY,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=timedelta(minutes=30),
        tags=_tags(pipeline, "stream"),
    ) as dag:
        StreamOperator(task_id="stream", pipeline=pipeline.name, outlets=[tables_alias(pipeline)])
    return dag


def health_dag(pipeline: Pipeline) -> DAG:
    with DAG(
        dag_id=f"lakesync_{pipeline.name}_health",
        description="Fail when a table is stopped or its lag passes stream.lag_alert_seconds, or the relay is silent",
        schedule=STREAM_EVERY,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=_tags(pipeline, "health"),
    ) as dag:
        HealthCheckOperator(task_id="check_health", pipeline=pipeline.name)
    return dag


def settlement_tables(pipeline: Pipeline) -> list[str]:
    """The tables the pipeline file gives a watermark (the only ones known at parse time, and all we need)."""
    return sorted(t for t, s in pipeline.tables.overrides.items() if s.watermark and pipeline.tables.selects(t))


def settlement_dag(pipeline: Pipeline) -> DAG | None:
    tables = settlement_tables(pipeline)
    if not tables:
        return None
    with DAG(
        dag_id=f"lakesync_{pipeline.name}_settlement",
        description="Nightly settlement: each data interval of each watermarked table in one Delta commit",
        schedule=CronDataIntervalTimetable(pipeline.settlement.schedule, timezone=pipeline.settlement.timezone),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=_tags(pipeline, "settlement"),
    ) as dag:
        for table in tables:
            SettleIntervalOperator(
                task_id=f"settle_{table}", pipeline=pipeline.name, table=table,
                outlets=[table_asset(pipeline, table)], retries=2, retry_delay=timedelta(minutes=1),
            )
    return dag


def maintenance_dag(pipeline: Pipeline) -> DAG:
    with DAG(
        dag_id=f"lakesync_{pipeline.name}_maintenance",
        description="OPTIMIZE, tombstone purge, VACUUM and a report for every Delta table of the pipeline",
        schedule="@weekly",
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=_tags(pipeline, "maintenance"),
    ) as dag:
        # OPTIMIZE loses a commit race against the stream's MERGE now and then (a conflict, not damage: it
        # commits nothing); running it again is safe, so the task retries.
        MaintenanceOperator(task_id="maintain", pipeline=pipeline.name, retries=2, retry_delay=timedelta(seconds=20),
                            vacuum_retention_hours=pipeline.stream.tombstone_retention_hours)
    return dag


def pipeline_dags(directory: str | None = None) -> list[DAG]:
    """Every DAG of every pipeline file; raises one :class:`ConfigError` naming each invalid file and field."""
    pipelines, problems = [], []
    for file in pipeline_files(directory):
        try:
            pipelines.append(load_pipeline_file(file))
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(
            f"invalid pipeline configuration in {pipelines_dir(directory)}:\n" + "\n".join(problems),
            hint="fix the files and fields named above; no lakesync DAG loads until every file is valid",
        )
    dags: list[DAG] = []
    for pipeline in pipelines:
        dags += [full_load_dag(pipeline), stream_dag(pipeline), health_dag(pipeline), maintenance_dag(pipeline)]
        settlement = settlement_dag(pipeline)
        if settlement is not None:
            dags.append(settlement)
    return dags
