"""Decoding and reducing a micro-batch in Spark SQL, in the executors' JVM (``stream.decode: spark_sql``).

:mod:`lakesync.stream.reduce` hands Spark's Kafka records to a Python worker (``mapInArrow``) that decodes them
column-wise; its tasks are CPU-bound in that decode (docs/stream.md, "Benchmark"). This module does the same
work with Spark SQL expressions, so the relay's events never leave the JVM. One job per streamed table with
records in the batch (the checkpoint's offsets say which, :attr:`ReducePlan.topics_read`):

- every record of the table's topic (Kafka tombstones aside) must be one of the relay's events: headers exactly
  the relay's (``lakesync.pos``, ``.op``, ``.key``, ``.format`` in that order, read by index), the format
  ``lakesync.event.v1``, a position of ``SourcePosition.key()``'s exact shape;
- its value is parsed with ``from_json`` (FAILFAST) into ``before``/``after`` images whose fields are all
  strings (a JSON number arrives as its text), and each column is converted to its Delta type by
  :func:`typed`; a value that does not convert fails the job instead of becoming NULL;
- changes before the table's ``read_from`` or at and after its ``stop_before`` position are left out, first;
- the typed changes reach the driver as Arrow (``toArrow``), where a key-merged table is cut down to its newest
  change per key (:func:`lakesync.sink.changes.last_change_per_key`, as the sink does): an aggregation on the
  executors measured slower here (docs/stream.md, "Decoding in Spark SQL").

A table whose job fails (a record that is not the relay's, such as Debezium's; a value that does not fit the
table's current types: a column changed type in this very batch; a malformed event) takes the Python path
whole for this batch (:func:`lakesync.stream.reduce.run_records_on_executors`), which decodes its records or
hands them to the driver raw, as it always did. So do the schema-change topic and the topics of stopped
tables. The records are persisted for the batch only when more than one job reads them.
"""

from __future__ import annotations

import logging

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakesync.core.table_layout import DELETE_OP, OP, POS, TS
from lakesync.events.envelope import EVENT_FORMAT, H_FORMAT, H_POS, RELAY_HEADERS
from lakesync.sink.changes import last_change_per_key
from lakesync.spark.errors import spark_error_line
from lakesync.stream.columnar_decode import KEY_PATTERN, change_schema
from lakesync.stream.decode import CHANGE_OPS
from lakesync.stream.reduce import (
    INPUT_COLUMNS,
    ReducedBatch,
    ReducedTable,
    ReducePlan,
    run_records_on_executors,
)

log = logging.getLogger(__name__)

#: ``from_json`` options: FAILFAST makes a malformed value fail the table's job (the Python path then says what
#: is wrong); Jackson's 20,000,000-character string limit would refuse a large BLOB the Kafka record size allows.
JSON_OPTIONS = {"mode": "FAILFAST", "maxStringLen": str(2**31 - 1)}
#: what a job that met a record other than the relay's events fails with
NOT_RELAY_EVENT = "not one of the relay's events"


def relay_header(name: str) -> Column:
    """The value of header ``name`` as text, read at its index in the relay's layout
    (:data:`lakesync.events.envelope.RELAY_HEADERS`): an array lookup, where searching the headers takes a
    higher-order function that Spark evaluates record by record without generated code."""
    return F.try_element_at(F.col("headers"), F.lit(RELAY_HEADERS.index(name) + 1)).getField("value").cast("string")


def _relay_layout() -> Column:
    """Whether a record's headers are exactly the relay's: these names at these indices, nothing more (so a
    repeated header, where the record decoder keeps the last value, never reaches this path)."""
    headers = F.col("headers")
    layout = F.size(headers) == F.lit(len(RELAY_HEADERS))
    for index, name in enumerate(RELAY_HEADERS, start=1):
        layout = layout & (F.try_element_at(headers, F.lit(index)).getField("key") == F.lit(name))
    return layout


def _strict_shape(arrow_type: pa.DataType) -> str | None:
    """The exact text a value of ``arrow_type`` must have where Spark's cast accepts more than Python's
    conversion: DECIMAL digits beyond the scale (Spark rounds, Python refuses), base64 with whitespace, a
    date with trailing text. The relay never writes those; a value that has them goes the Python way."""
    if pa.types.is_decimal(arrow_type):
        fraction = rf"(\.\d{{0,{arrow_type.scale}}})?" if arrow_type.scale else ""
        return rf"^-?\d+{fraction}\z"
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return r"^[A-Za-z0-9+/]*={0,2}\z"
    if pa.types.is_date32(arrow_type):
        return r"^\d{4}-\d{2}-\d{2}\z"
    return None


def typed(text: Column, arrow_type: pa.DataType, name: str) -> Column:
    """A column's JSON form (as text) converted to its Delta type, as :mod:`lakesync.core.types` converts it:
    numbers, exact DECIMAL strings and ISO dates and timestamps by a cast, FLOAT through DOUBLE (as Python
    narrows its float), binary from base64. A value that does not convert raises (never a silent NULL)."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return text
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        value = F.try_to_binary(text, F.lit("base64"))
    elif pa.types.is_float32(arrow_type):
        value = text.try_cast("double").try_cast("float")
    else:
        value = text.try_cast(from_arrow_type(arrow_type, prefer_timestamp_ntz=True))
    shape = _strict_shape(arrow_type)
    if shape is not None:  # where Spark's cast is laxer than Python's conversion (rounding, whitespace, trailing text)
        value = F.when(text.rlike(shape), value)
    refused = F.raise_error(F.concat(F.lit(f"column {name}: the value "), F.substring(text, 1, 80),
                                     F.lit(f" is not a {arrow_type}")))
    return F.when(text.isNotNull() & value.isNull(), refused).otherwise(value)


def sql_decodable(plan: ReducePlan) -> dict[str, str]:
    """The topics (and their tables) this path decodes: the streamed tables' topics with records in the batch
    (all of them when the plan does not know), minus those watched for a stopped table and those found to carry
    records other than the relay's events (:attr:`ReducePlan.python_topics`)."""
    return {topic: table for topic, table in plan.decode.topic_tables.items()
            if table in plan.decode.schemas and topic not in plan.watch_topics | plan.python_topics
            and (plan.topics_read is None or topic in plan.topics_read)}


def relay_position() -> Column:
    """A record's position key, when the record is one of the relay's events (headers exactly the relay's, the
    event format, a position of ``SourcePosition.key()``'s exact shape); else the job fails: the whole topic then
    takes the Python path, which decodes any record."""
    position = relay_header(H_POS)
    relays = (_relay_layout() & (relay_header(H_FORMAT) == F.lit(EVENT_FORMAT)) & position.rlike(KEY_PATTERN))
    return F.when(F.coalesce(relays, F.lit(False)), position).otherwise(
        F.raise_error(F.lit(f"{NOT_RELAY_EVENT}: Spark SQL decodes the relay's events only")))


def table_changes(records: DataFrame, schema: pa.Schema, *, read_from: str | None, stop_before: str | None
                  ) -> DataFrame:
    """One table's records (:func:`table_records`) as change rows: the columns of ``schema`` with their Delta
    types, then position, op and source time, for the changes in ``[read_from, stop_before)``. A record that is
    not one of the relay's events, or does not decode, fails the job (never a silent NULL). (The stream gives
    no ``stop_before`` in practice: a table stopping in the batch is watched, so it goes the Python way.)"""
    image = StructType([StructField(field.name, StringType()) for field in schema])
    envelope = StructType([StructField("before", image), StructField("after", image), StructField("op", StringType()),
                           StructField("source", StructType([StructField("ts_ms", LongType())]))])
    positioned = records.select(relay_position().alias(POS), "value")
    if read_from is not None:
        positioned = positioned.filter(F.col(POS) >= F.lit(read_from))
    if stop_before is not None:
        positioned = positioned.filter(F.col(POS) < F.lit(stop_before))
    parsed = positioned.select(POS, F.from_json(F.col("value").cast("string"), envelope, JSON_OPTIONS).alias("e"))
    op = F.col("e.op")
    unknown_op = F.raise_error(F.concat(F.lit("unknown op "), F.coalesce(op, F.lit("(none)"))))
    checked_op = F.when(op.isin(sorted(CHANGE_OPS)), op).otherwise(unknown_op)
    row = F.when(op == F.lit(DELETE_OP), F.col("e.before")).otherwise(F.col("e.after"))
    return parsed.select(
        *(typed(row.getField(field.name), field.type, field.name).alias(field.name) for field in schema),
        F.col(POS), checked_op.alias(OP), F.coalesce(F.col("e.source.ts_ms"), F.lit(0)).alias(TS))


def _collect(changes: DataFrame, schema: pa.Schema, keys: list[str] | None) -> ReducedTable:
    """The table's changes on the driver, a key-merged table's reduced to the newest change per key there."""
    target = change_schema(schema)
    rows = changes.toArrow().select(target.names).cast(target)
    return ReducedTable(last_change_per_key(rows, keys) if keys else rows, rows.num_rows)


def table_records(records: DataFrame, topic: str) -> DataFrame:
    """The records of ``topic`` that are changes (a Kafka tombstone, no value, is compaction's marker)."""
    return records.filter((F.col("topic") == F.lit(topic)) & F.col("value").isNotNull())


#: how Spark reports the decode's own refusals: ``raise_error`` (a value that does not convert, a record not the
#: relay's, an unknown op) and ``from_json``'s FAILFAST (a value that is not JSON)
DECODE_REFUSALS = ("USER_RAISED_EXCEPTION", "MALFORMED_RECORD_IN_PARSING")


def refused_by_the_decode(exc: Exception) -> bool:
    """Whether a failed job failed on its records (the Python path then takes them), not on anything else: a
    query stopping (interrupted, cancelled jobs), Kafka (data loss), memory, a bug, all of which must fail."""
    text = str(exc)
    return any(marker in text for marker in DECODE_REFUSALS)


def run_records_in_sql(batch_df: DataFrame, plan: ReducePlan) -> ReducedBatch:
    """A micro-batch of Spark's Kafka source (``includeHeaders``) decoded and reduced: the relay's events of the
    streamed tables in Spark SQL, one job per table with records in the batch, the rest by the Python path (see
    the module docstring). The records are persisted only when more than one job reads them."""
    topics = sql_decodable(plan)
    rest_needed = plan.topics_read is None or any(topic not in topics for topic in plan.topics_read)
    records = batch_df.select(*INPUT_COLUMNS)
    persisted = len(topics) + rest_needed > 1
    if persisted:
        records = records.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        tables: dict[str, ReducedTable] = {}
        failed: list[str] = []
        not_relay: set[str] = set()
        for topic, table in topics.items():
            # built outside the try: a plan Spark can't make (a type it does not have) fails the batch
            changes = table_changes(table_records(records, topic), plan.decode.schemas[table],
                                    read_from=plan.decode.read_from.get(table),
                                    stop_before=plan.decode.stop_before.get(table))
            try:
                reduced = _collect(changes, plan.decode.schemas[table], plan.keys.get(table))
            except Exception as exc:
                if not refused_by_the_decode(exc):
                    raise  # a stop (interrupted, cancelled), Kafka, memory: not the records' fault
                log.info("table %s: this batch's records do not decode in Spark SQL with the table's schema (%s); "
                         "the Python decode takes them", table, spark_error_line(exc, limit=300))
                failed.append(topic)
                if NOT_RELAY_EVENT in str(exc):
                    not_relay.add(topic)
                continue
            if reduced.rows.num_rows:
                tables[table] = reduced
        batch = ReducedBatch()
        if rest_needed or failed:
            rest = records.filter(~F.col("topic").isin(list(topics)) | F.col("topic").isin(failed))
            batch = run_records_on_executors(rest, plan)
    finally:
        if persisted:
            records.unpersist()
    for table, reduced in tables.items():
        batch.tables[table] = reduced
    batch.not_relay_topics = not_relay
    return batch
