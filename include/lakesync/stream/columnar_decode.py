"""Decoding Kafka records into typed change columns, column by column: the executors' half of the stream.

:mod:`lakesync.stream.decode` decodes one record at a time in Python. This module gives the same Arrow
table (:meth:`TableChanges.to_arrow`: the table's source columns plus position, op and source time) for
a whole Arrow batch of records at once: the values of lakesync's own events (header ``lakesync.format``
= ``lakesync.event.v1`` and a well-formed ``lakesync.pos``) are parsed by Arrow's JSON reader in C++,
straight into the Delta table's types where Arrow parses the JSON form itself (numbers, exact DECIMAL
strings); ISO dates and timestamps are cast as :func:`lakesync.core.types.arrow_table_from_json_rows`
casts them, and only binary columns (base64) are converted value by value, by the same function.

Everything else (Debezium's events, records without a position header, values the JSON reader refuses)
goes through the record decoder, so the two paths can never disagree on a value: the fast path either
produces exactly what the record decoder would, or is not taken. Debezium's events that carry a column the
table lacks raise :class:`ColumnsAddedError` instead of losing it (the driver decides). tests/unit/test_columnar_decode.py holds the equivalence over every type of docs/types.md.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from lakesync.core.positions import MIN_KEY
from lakesync.core.table_layout import DELETE_OP, META_COLUMNS
from lakesync.core.types import arrow_value_from_json
from lakesync.events.envelope import EVENT_FORMAT, H_FORMAT, H_POS
from lakesync.stream.decode import (
    CHANGE_OPS,
    ColumnsAddedError,
    SnapshotReadsError,
    decode_batch,
    header_column,
)

#: ``SourcePosition.key()`` exactly: a header of this shape is the position the record decoder would
#: rebuild, character for character (it parses the three numbers and prints them at these widths).
KEY_PATTERN = "^" + r"\.".join(rf"\d{{{len(part)}}}" for part in MIN_KEY.split(".")) + r"\z"
_ARRIVAL = "_lakesync_arrival"


@dataclass(frozen=True)
class DecodePlan:
    """What the executors need to decode a batch; pickled into every task.

    ``schemas`` holds each table's source columns (the Delta schema without lakesync's columns);
    ``stop_before`` a position key per table whose changes at or after it are left out (a DDL the
    table can't follow sits there); ``handoffs`` each table's load position: Debezium's events at or before
    it change nothing (the position rule skips them), so only later ones are judged for what the driver
    must decide (snapshot reads, added columns, lossy settings); ``read_from`` a position key per table
    whose changes before it are left out: Spark's Kafka source starts a topic new to its checkpoint at the
    topic's first record, not at the table's handoff (:mod:`lakesync.stream.kafka_reader`).
    """

    topic_tables: dict[str, str]
    schemas: dict[str, pa.Schema]
    schema_topic: str | None = None
    stop_before: dict[str, str] = field(default_factory=dict)
    handoffs: dict[str, str] = field(default_factory=dict)
    read_from: dict[str, str] = field(default_factory=dict)


def _parse_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type Arrow's JSON reader parses a column's JSON form into (then converted by :func:`_to_target`)."""
    if pa.types.is_integer(arrow_type) or pa.types.is_decimal(arrow_type) or pa.types.is_string(arrow_type):
        return arrow_type
    if pa.types.is_floating(arrow_type):
        return pa.float64()  # a FLOAT is the double in the JSON, narrowed as pa.array narrows a Python float
    return pa.string()  # ISO dates and timestamps, base64


def _to_target(values: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    if values.type == arrow_type:
        return values
    if pa.types.is_floating(arrow_type) or pa.types.is_date32(arrow_type) or pa.types.is_timestamp(arrow_type):
        return values.cast(arrow_type)
    return pa.array([arrow_value_from_json(arrow_type, v) for v in values.to_pylist()], type=arrow_type)


def _fast_mask(records: pa.Table) -> pa.Array:
    """The records the columnar path can take: lakesync's events with a canonical position header."""
    headers = records.column("headers").combine_chunks()
    fmt = header_column(headers, H_FORMAT).cast(pa.string())
    pos = header_column(headers, H_POS).cast(pa.string())
    value = records.column("value")
    ok = pc.and_(pc.equal(fmt, pa.scalar(EVENT_FORMAT)), pc.match_substring_regex(pos, KEY_PATTERN))
    ok = pc.and_(ok, pc.invert(pc.match_substring(value, "\n")))
    return ok.fill_null(False)


def _fast_decode(records: pa.Table, schema: pa.Schema) -> pa.Table | None:
    """The change table of ``records`` (all lakesync events), or None when the JSON reader refuses them."""
    columns = pa.struct([pa.field(f.name, _parse_type(f.type)) for f in schema])
    envelope = pa.schema([("before", columns), ("after", columns), ("op", pa.string()),
                          ("source", pa.struct([("ts_ms", pa.int64())]))])
    text = b"\n".join(cast(list[bytes], records.column("value").to_pylist()))  # tombstones are filtered out
    try:
        parsed = pa_json.read_json(io.BytesIO(text), parse_options=pa_json.ParseOptions(
            explicit_schema=envelope, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if parsed.num_rows != records.num_rows:
        return None
    op = parsed.column("op").combine_chunks()
    if not pc.all(pc.is_in(op, pa.array(sorted(CHANGE_OPS)))).as_py():
        return None  # the record decoder says what is wrong with them
    is_delete = pc.equal(op, pa.scalar(DELETE_OP))
    before, after = parsed.column("before").combine_chunks(), parsed.column("after").combine_chunks()
    arrays = []
    for f in schema:
        image = pc.if_else(is_delete, pc.struct_field(before, f.name), pc.struct_field(after, f.name))
        arrays.append(_to_target(image, f.type))
    pos = header_column(records.column("headers").combine_chunks(), H_POS).cast(pa.string())
    ts = pc.struct_field(parsed.column("source").combine_chunks(), "ts_ms").fill_null(0)
    return pa.Table.from_arrays([*arrays, pos, op, ts], schema=change_schema(schema))


def _record_decode(records: pa.Table, topic: str, table: str, schema: pa.Schema, after: str) -> pa.Table:
    changes = decode_batch(records, {topic: table}).tables.get(table)
    if changes is None:
        return change_schema(schema).empty_table()
    changes.refuse_lossy_settings(table, schema, after=after)
    if changes.first_snapshot_read(after=after) is not None:  # the driver re-loads or stops the table
        raise SnapshotReadsError(f"Debezium's events of {table} hold snapshot reads after its load")
    added = changes.added_columns(schema, after=after)
    if added:  # never dropped here: the driver evolves the table or re-loads it (BatchApplier)
        raise ColumnsAddedError(f"Debezium's events of {table} carry columns {[c.name for c in added]} "
                                "the Delta table lacks")
    return changes.to_arrow(schema)


def change_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema of a table's decoded changes: its source columns (nullable), then position, op and
    source time."""
    fields = [*(f.with_nullable(True) for f in schema), pa.field(META_COLUMNS[0], pa.string()),
              pa.field(META_COLUMNS[1], pa.string()), pa.field(META_COLUMNS[2], pa.int64())]
    return pa.schema(fields)


def decode_table(records: pa.Table, topic: str, table: str, schema: pa.Schema, *, after: str = "") -> pa.Table:
    """The changes in ``records`` (one table's topic, no Kafka tombstones) in arrival order, as
    :meth:`TableChanges.to_arrow` gives them; ``after``: the table's load position (:class:`DecodePlan`)."""
    if records.num_rows == 0:
        return change_schema(schema).empty_table()
    indexed = records.append_column(_ARRIVAL, pa.array(np.arange(records.num_rows)))
    fast = _fast_mask(records)
    parts = []
    fast_rows = indexed.filter(fast)
    slow_rows = indexed.filter(pc.invert(fast))
    if fast_rows.num_rows:
        decoded = _fast_decode(fast_rows, schema)
        if decoded is None:
            slow_rows = indexed
        else:
            parts.append(decoded.append_column(_ARRIVAL, fast_rows.column(_ARRIVAL)))
    if slow_rows.num_rows:
        decoded = _record_decode(slow_rows, topic, table, schema, after)
        if decoded.num_rows:
            # the record decoder keeps the records' order and drops none of them (it raises instead)
            parts.append(decoded.append_column(_ARRIVAL, slow_rows.column(_ARRIVAL)))
    if not parts:
        return change_schema(schema).empty_table()
    merged = pa.concat_tables(parts).combine_chunks()
    if len(parts) > 1:
        merged = merged.take(pc.sort_indices(merged.column(_ARRIVAL)))
    return merged.drop_columns([_ARRIVAL])


@dataclass
class DecodedRecords:
    """One Arrow batch of Kafka records, decoded: change tables per table, and the raw schema records."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    schema_records: pa.Table | None = None


def decode_records(records: pa.Table, plan: DecodePlan) -> DecodedRecords:
    """Split ``records`` by topic and decode each table's changes (minus those the plan stops)."""
    out = DecodedRecords()
    records = records.filter(pc.is_valid(records.column("value")))  # Kafka tombstones are no changes
    topic = records.column("topic")
    if plan.schema_topic is not None:
        schema_rows = records.filter(pc.equal(topic, pa.scalar(plan.schema_topic)))
        if schema_rows.num_rows:
            out.schema_records = schema_rows
    for name in cast(list[str], pc.unique(topic).to_pylist()):
        table = plan.topic_tables.get(name)
        if table is None or table not in plan.schemas:
            continue
        changes = decode_table(records.filter(pc.equal(topic, pa.scalar(name))), name, table, plan.schemas[table],
                               after=plan.handoffs.get(table, ""))
        stop = plan.stop_before.get(table)
        if stop is not None:
            changes = changes.filter(pc.less(changes.column(META_COLUMNS[0]), pa.scalar(stop)))
        start = plan.read_from.get(table)
        if start is not None:
            changes = changes.filter(pc.greater_equal(changes.column(META_COLUMNS[0]), pa.scalar(start)))
        if changes.num_rows:
            out.tables[table] = changes
    return out


def newest(changes: pa.Table) -> tuple[str, int | None]:
    """The greatest position in ``changes`` and the source time of that change."""
    pos = changes.column(META_COLUMNS[0])
    top = pc.max(pos).as_py()
    index = pc.index(pos, top).as_py()
    return top, changes.column(META_COLUMNS[2])[index].as_py()

