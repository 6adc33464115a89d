"""The separate phases of ``lakesync bench stream``: relay alone, stream alone (per executor count), backpressure.

Every phase starts from a copy of the same fully loaded state (Delta table + load state), so each one
applies exactly the generated changes to the same 1,000,000-row table, and phases don't disturb each other.
The relay-only phase fills its own topics (from the full load's position, so they hold exactly the
generated changes); the stream-only phases read those pre-filled topics with fresh checkpoints.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakesync.core.config import Pipeline
from lakesync.core.errors import LakesyncError

log = logging.getLogger(__name__)


def copy_pipeline(base: Pipeline, base_dir: Path, target_dir: Path, *, topic_prefix: str, server_id: int,
                  writer: str | None = None, **stream: Any) -> Pipeline:
    """``base`` with its fully loaded state copied to ``target_dir``, its own topics and relay id, its tables
    written by ``writer`` (``delta.writer``; None: ``base``'s, the shipped default) and ``stream`` settings."""
    shutil.copytree(base_dir, target_dir)
    return base.model_copy(update={
        "delta": base.delta.model_copy(update={"root": str(target_dir / "delta"),
                                               "writer": writer or base.delta.writer}),
        "state_dir": str(target_dir / "pipelines"),
        "kafka": base.kafka.model_copy(update={"topic_prefix": topic_prefix}),
        "source": base.source.model_copy(update={"server_id": server_id}),
        "stream": base.stream.model_copy(update=stream),
    })


def relay_only(pipeline: Pipeline, changes: int) -> float:
    """Changes/s of the relay alone, from the full load's position through ``changes`` row events."""
    from lakesync.relay import Relay

    stats = Relay(pipeline, log_every_seconds=3600).run(max_events=changes)
    if stats.events < changes:
        raise LakesyncError(f"the relay published {stats.events} of {changes} changes")
    return changes / stats.elapsed_seconds


def work_off(pipeline: Pipeline, spark: Any, changes: int, *, timeout_s: float = 1800,
             keep_going: Callable[[], bool] = lambda: False) -> tuple[float, int]:
    """Run the stream (``availableNow``) until ``changes`` are applied and ``keep_going`` says stop;
    returns the seconds and the micro-batches it took."""
    from lakesync.stream.app import run_stream

    began, applied, batches = time.perf_counter(), 0, 0
    while applied < changes or keep_going():
        if time.perf_counter() - began > timeout_s:
            raise LakesyncError(f"the stream applied {applied} of {changes} changes in {timeout_s:.0f} s")
        summary = run_stream(pipeline, once=True, spark=spark)
        applied += summary.changes
        batches += summary.batches
    return time.perf_counter() - began, batches


def stream_only(pipeline: Pipeline, spark: Any, changes: int) -> tuple[float, int]:
    """Changes/s of the stream alone over pre-filled topics, and its micro-batch count."""
    seconds, batches = work_off(pipeline, spark, changes)
    return changes / seconds, batches


@dataclass
class BackpressureResult:
    bound: int
    max_backlog_while_stream_stopped: int
    held_under_bound: bool
    relay_pauses: int
    relay_throttled_s: float
    delta_rows_match_source: bool


def backpressure(pipeline: Pipeline, spark: Any, changes: int, *, stopped_seconds: float, relay_rate: float,
                 rows_match: Callable[[Pipeline], bool]) -> BackpressureResult:
    """The relay with a lag bound: first with the stream stopped (after one applied batch, so its lag is
    known), sampling the backlog; then with the stream running until everything is applied."""
    from lakesync.core.connections import kafka_client_config
    from lakesync.kafka.offsets import end_offsets, offset_consumer
    from lakesync.relay import Relay
    from lakesync.stream.app import checkpoint_dir, run_stream
    from lakesync.stream.lag import committed_offsets, records_behind

    # a first stretch relayed and applied, so the stream has a committed batch (its lag is measurable)
    Relay(pipeline, log_every_seconds=3600).run(max_events=min(1_000, changes))
    applied = run_stream(pipeline, once=True, spark=spark).changes
    relay = Relay(pipeline, log_every_seconds=3600)
    outcome: dict[str, Any] = {}

    def run_relay() -> None:
        try:
            outcome["stats"] = relay.run(stop_when_idle_seconds=5.0)
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc

    thread = threading.Thread(target=run_relay, name="bench-relay-backpressure", daemon=True)
    thread.start()
    consumer = offset_consumer(kafka_client_config(pipeline))
    largest = 0
    try:
        until = time.monotonic() + stopped_seconds
        while time.monotonic() < until and thread.is_alive():
            committed = committed_offsets(checkpoint_dir(pipeline)) or {}
            largest = max(largest, records_behind(committed, end_offsets(consumer, list(committed))))
            time.sleep(0.5)
    finally:
        consumer.close()
    try:
        work_off(pipeline, spark, changes - applied, keep_going=thread.is_alive)
    finally:
        relay.stop()
        thread.join(30)
    if "error" in outcome:
        raise outcome["error"]
    bound = pipeline.stream.backpressure_max_lag or 0
    return BackpressureResult(
        bound=bound,
        max_backlog_while_stream_stopped=largest,
        # the relay stops at the first transaction end after a check finds the lag over the bound: what it
        # publishes in one check interval plus one 500-row transaction may pass it
        held_under_bound=largest <= bound + 500 + relay_rate * pipeline.stream.backpressure_check_seconds,
        relay_pauses=relay.backpressure.pauses,
        relay_throttled_s=round(relay.backpressure.throttled_seconds, 1),
        delta_rows_match_source=rows_match(pipeline),
    )


def executor_tasks_rate(pipeline: Pipeline, spark: Any, changes: int) -> float:
    """Changes/s of the executors' part alone: Spark's Kafka source read as a batch over the pipeline's
    pre-filled table topics (first to last record, ``minPartitions`` one per core, as the stream's query asks)
    and the stream's decode and reduce in each task (Spark SQL's, or :func:`lakesync.stream.reduce.reduce_arrow`
    through ``mapInArrow``), nothing collected: no driver work, no Delta. Its ratio between ``local[2]`` and
    ``local[1]`` says how the work that runs on the executors scales."""
    from functools import partial

    from lakesync.core.connections import kafka_client_config
    from lakesync.kafka.spark_options import stream_options
    from lakesync.stream.app import BatchApplier, streamed_tables
    from lakesync.stream.reduce import CHUNK_SCHEMA, INPUT_COLUMNS, reduce_arrow, run_records_on_executors

    tables = streamed_tables(pipeline)
    options = {**stream_options(kafka_client_config(pipeline), [t.topic for t in tables]),
               "startingOffsets": "earliest", "endingOffsets": "latest",
               "minPartitions": str(spark.sparkContext.defaultParallelism)}
    plan = BatchApplier(pipeline, tables, "lakesync-bench-executor-tasks", run_records_on_executors).plan({})
    records = spark.read.format("kafka").options(**options).load().select(*INPUT_COLUMNS)
    if pipeline.stream.decode == "spark_sql":
        jobs = _sql_decode_jobs(records, plan)
    else:
        jobs = [records.mapInArrow(partial(reduce_arrow, plan), CHUNK_SCHEMA)]
    for job in jobs:  # once to start the Python workers and fill the broker's caches, as a running stream has
        job.write.format("noop").mode("overwrite").save()
    began = time.perf_counter()
    for job in jobs:  # the noop sink computes every column (a count would let Spark prune the decode away)
        job.write.format("noop").mode("overwrite").save()
    return changes / (time.perf_counter() - began)


def _sql_decode_jobs(records: Any, plan: Any) -> list[Any]:
    """``stream.decode: spark_sql``'s executor work (:mod:`lakesync.stream.sql_decode`): each table's records
    decoded in Spark SQL, one job per table, as the stream runs it."""
    from lakesync.stream.sql_decode import sql_decodable, table_changes, table_records

    return [table_changes(table_records(records, topic), plan.decode.schemas[table],
                          read_from=plan.decode.read_from.get(table), stop_before=None)
            for topic, table in sql_decodable(plan).items()]
