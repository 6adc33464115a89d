"""Decoding and reducing a micro-batch in Spark SQL, in the executors' JVM (``stream.decode: spark_sql``).

:mod:`lakesync.stream.reduce` hands Spark's Kafka records to a Python worker (``mapInArrow``) that decodes them
column-wise; its tasks are CPU-bound in that decode (docs/stream.md, "Benchmark"). This module does the same
work with Spark SQL expressions, so the records of lakesync's own events never leave the JVM:

- a record takes this path when it is on a streamed table's topic, carries lakesync's format header
  (``lakesync.event.v1``) and a position header of ``SourcePosition.key()``'s exact shape, and its table's
  topic is not watched for a stopped table: the cases the columnar decoder's fast path takes;
- its value is parsed with ``from_json`` (FAILFAST) into ``before``/``after`` images whose fields are all
  strings (a JSON number arrives as its text), and each column is converted to its Delta type by
  :func:`typed`; a value that does not convert fails the table's job instead of becoming NULL;
- changes before the table's ``read_from`` or at and after its ``stop_before`` position are left out, first;
- a key-merged table is reduced to its newest change per key (``max_by`` over the position, partial
  aggregation before the shuffle), an ``append_log`` table is not reduced; the rows reach the driver as Arrow.

Everything else goes through the Python path unchanged (:func:`lakesync.stream.reduce.run_records_on_executors`):
the schema-change topic, Debezium's records, records without lakesync's headers, the topics of stopped tables,
and every record of a table whose Spark SQL job failed (a value that does not fit the table's current types:
a column changed type in this very batch; a malformed event), whose records the Python path decodes or hands
to the driver raw, as it always did. Both halves meet in one :class:`ReducedBatch`; the sink's own reduction
takes the newest change of a key that both returned.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakesync.core.table_layout import DELETE_OP, OP, POS, TS
from lakesync.events.envelope import EVENT_FORMAT, H_FORMAT, H_POS
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
_COUNT = "_lakesync_changes"


def header(name: str) -> Column:
    """The value of Kafka header ``name`` as text (the last one when it repeats, as the record decoder keeps it),
    or NULL."""
    matching = F.filter(F.col("headers"), lambda h: h.getField("key") == F.lit(name))
    return F.try_element_at(matching, F.lit(-1)).getField("value").cast("string")


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
    refused = F.raise_error(F.concat(F.lit(f"column {name}: the value "), F.substring(text, 1, 80),
                                     F.lit(f" is not a {arrow_type}")))
    return F.when(text.isNotNull() & value.isNull(), refused).otherwise(value)


def sql_decodable(plan: ReducePlan) -> dict[str, str]:
    """The topics (and their tables) whose lakesync events this path decodes: the streamed tables' topics,
    minus those watched for a stopped table."""
    return {topic: table for topic, table in plan.decode.topic_tables.items()
            if table in plan.decode.schemas and topic not in plan.watch_topics}


def in_sql(topics: Mapping[str, str]) -> Column:
    """The records of ``topics`` this path takes: lakesync's events with a canonical position header (TRUE or
    FALSE, never NULL, so that its negation is exactly the rest)."""
    taken = (F.col("topic").isin(list(topics)) & F.col("value").isNotNull()
             & (header(H_FORMAT) == F.lit(EVENT_FORMAT)) & header(H_POS).rlike(KEY_PATTERN))
    return F.coalesce(taken, F.lit(False))


def table_changes(records: DataFrame, schema: pa.Schema, *, read_from: str | None, stop_before: str | None
                  ) -> DataFrame:
    """One table's records (all taken by :func:`in_sql`) as change rows: the columns of ``schema`` with their
    Delta types, then position, op and source time, for the changes in ``[read_from, stop_before)``."""
    image = StructType([StructField(field.name, StringType()) for field in schema])
    envelope = StructType([StructField("before", image), StructField("after", image), StructField("op", StringType()),
                           StructField("source", StructType([StructField("ts_ms", LongType())]))])
    positioned = records.select(header(H_POS).alias(POS), "value")
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


def newest_per_key(changes: DataFrame, keys: list[str]) -> DataFrame:
    """The change with the greatest position per key, and how many changes each stands for (``_COUNT``)."""
    newest = F.max_by(F.struct(*changes.columns), F.col(POS)).alias("_newest")
    return changes.groupBy(*keys).agg(newest, F.count(F.lit(1)).alias(_COUNT)).select("_newest.*", _COUNT)


def _collect(changes: DataFrame, schema: pa.Schema, keys: list[str] | None) -> ReducedTable:
    target = change_schema(schema)
    if not keys:
        rows = changes.toArrow()
        return ReducedTable(rows.select(target.names).cast(target), rows.num_rows)
    rows = newest_per_key(changes, keys).toArrow()
    count = int(pc.sum(rows.column(_COUNT)).as_py() or 0)
    return ReducedTable(rows.select(target.names).cast(target), count)


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return next((line for line in text.splitlines() if line.strip()), text)[:300]


def run_records_in_sql(batch_df: DataFrame, plan: ReducePlan) -> ReducedBatch:
    """A micro-batch of Spark's Kafka source (``includeHeaders``) decoded and reduced: lakesync's events of the
    streamed tables in Spark SQL, one job per table, the rest by the Python path (see the module docstring)."""
    topics = sql_decodable(plan)
    records = batch_df.select(*INPUT_COLUMNS).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        taken = records.filter(in_sql(topics))
        tables: dict[str, ReducedTable] = {}
        failed: list[str] = []
        for topic, table in topics.items():
            changes = table_changes(taken.filter(F.col("topic") == F.lit(topic)), plan.decode.schemas[table],
                                    read_from=plan.decode.read_from.get(table),
                                    stop_before=plan.decode.stop_before.get(table))
            try:
                reduced = _collect(changes, plan.decode.schemas[table], plan.keys.get(table))
            except Exception as exc:  # whatever Spark raised: the Python path decodes them, or says what is wrong
                log.info("table %s: this batch's records do not decode in Spark SQL with the table's schema (%s); "
                         "the Python decode takes them", table, _first_line(exc))
                failed.append(topic)
                continue
            if reduced.rows.num_rows:
                tables[table] = reduced
        rest = records.filter(~in_sql(topics) | F.col("topic").isin(failed))
        batch = run_records_on_executors(rest, plan)
    finally:
        records.unpersist()
    for table, reduced in tables.items():
        known = batch.tables.get(table)
        if known is not None:  # some of its records had no canonical headers: the sink reduces both parts
            reduced = ReducedTable(pa.concat_tables([known.rows, reduced.rows]), known.changes + reduced.changes)
        batch.tables[table] = reduced
    return batch
