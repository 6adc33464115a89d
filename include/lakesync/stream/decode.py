"""Turning a micro-batch of Kafka records into per-table change tables for the Delta sink.

Each record's value is a change event (lakesync's or Debezium's envelope, :mod:`lakesync.events.envelope`). The
row image the sink needs is ``after`` for creates, updates and snapshot reads, and ``before`` for deletes
(the sink only needs the key of a deleted row). Values arrive in the JSON form of :mod:`lakesync.core.types`
and are converted with the *Delta table's* Arrow schema, so the stream needs no source connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakesync.core.table_layout import META_COLUMNS
from lakesync.core.types import arrow_table_from_json_rows
from lakesync.events.debezium import describe_field, refuse_lossy_settings
from lakesync.events.envelope import (
    H_KEY,
    H_POS,
    ChangeEvent,
    SchemaChangeEvent,
    decode,
    decode_schema_change,
)

CHANGE_OPS = frozenset({"c", "u", "d", "r"})
#: the headers :func:`lakesync.events.envelope.decode` and ``decode_schema_change`` read; others are not decoded
HEADERS_READ = (H_POS, H_KEY)


def user_schema(delta_schema: pa.Schema) -> pa.Schema:
    """The source columns of a target table (its schema without lakesync's own columns)."""
    return pa.schema([f for f in delta_schema if not f.name.startswith("_lakesync_")])


@dataclass(frozen=True)
class AddedColumn:
    """A column Debezium's events carry that the Delta table lacks: its name, its type as the events' schema
    gives it, and the position key of the first event that carries it (the source added it before that)."""

    name: str
    event_type: str
    first_position: str


class SnapshotReadsError(Exception):
    """Debezium's events of a table hold snapshot reads (op ``r``). Raised on an executor, it sends the records
    to the driver raw, which decides whether they are a new snapshot after the table's load."""


class ColumnsAddedError(Exception):
    """Debezium's events of a table carry a column its Delta table lacks. Raised on an executor, it sends the
    records to the driver raw (lakesync.stream.reduce), which decides what the table does."""


@dataclass
class TableChanges:
    """The change events of one table in one micro-batch, in arrival order."""

    events: list[ChangeEvent] = field(default_factory=list)
    new_columns: set[str] = field(default_factory=set)

    def to_arrow(self, schema: pa.Schema) -> pa.Table:
        """Columns of ``schema`` (source columns) plus the position, op and source-time columns.

        A column the event has but ``schema`` lacks is noted in ``new_columns`` (the caller evolves the
        table); a column the schema has but the event lacks (a delete's partial image) is null. The images
        are converted column by column (:func:`lakesync.core.types.arrow_table_from_json_rows`), not value by value.
        """
        images = [(event.before if event.op == "d" else event.after) or {} for event in self.events]
        seen: set[str] = set()
        for image in images:
            seen.update(image)
        self.new_columns.update(seen.difference(schema.names))
        # nullable: a partial image (a delete carrying only the key) leaves the other columns null
        table = arrow_table_from_json_rows(pa.schema([f.with_nullable(True) for f in schema]), images)
        meta: list[pa.Array] = [
            pa.array([event.position.key() for event in self.events], pa.string()),
            pa.array([event.op for event in self.events], pa.string()),
            pa.array([event.ts_ms for event in self.events], pa.int64()),
        ]
        for name, column in zip(META_COLUMNS, meta, strict=True):
            table = table.append_column(name, column)
        return table

    def first_snapshot_read(self, *, after: str = "") -> str | None:
        """The position key of the first of Debezium's snapshot reads (op ``r``) positioned after ``after``, or
        None. Debezium writes them when it snapshots; after a lakesync load has handed the table off, one means
        the connector snapshotted again (it found no offsets), and deletes it had not delivered are lost."""
        keys = [key for event in self.events
                if event.op == "r" and event.row_fields is not None and (key := event.position.key()) > after]
        return min(keys, default=None)

    def refuse_lossy_settings(self, table: str, schema: pa.Schema, *, after: str = "") -> None:
        """Raise when Debezium's events positioned after ``after`` (the table's load: older ones change nothing,
        and a re-load after the settings were fixed moves it past them) carry a column the way a lossy connector
        setting writes it (:func:`lakesync.events.debezium.lossy_settings`); once per distinct column list."""
        target = {f.name: f.type for f in schema}
        checked: set[int] = set()
        for event in self.events:
            if (event.row_fields is not None and id(event.row_fields) not in checked
                    and event.position.key() > after):
                checked.add(id(event.row_fields))
                refuse_lossy_settings(table, event.row_fields, target)

    def added_columns(self, schema: pa.Schema, *, after: str = "") -> list[AddedColumn]:
        """The columns of Debezium's events (their schema's row fields) that ``schema`` lacks, each with the
        first position carrying it, in events positioned after ``after``. lakesync's own events are left out:
        their schema changes travel on the schema topic. Sorted by first position, then name."""
        known = set(schema.names)
        found: dict[str, AddedColumn] = {}
        unknown_by_fields: dict[int, list[Mapping[str, Any]]] = {}  # events share their column list's object
        for event in self.events:
            if event.row_fields is None:
                continue
            unknown = unknown_by_fields.get(id(event.row_fields))
            if unknown is None:
                unknown = unknown_by_fields[id(event.row_fields)] = [
                    column for column in event.row_fields if column.get("field") not in known]
            if not unknown:
                continue
            key = event.position.key()
            if key <= after:
                continue
            for column in unknown:
                name = str(column.get("field"))
                if name not in found or key < found[name].first_position:
                    found[name] = AddedColumn(name, describe_field(column), key)
        return sorted(found.values(), key=lambda c: (c.first_position, c.name))


@dataclass
class DecodedBatch:
    """One micro-batch: row changes grouped by table, and the schema changes, each in arrival order."""

    tables: dict[str, TableChanges] = field(default_factory=dict)
    schema_changes: list[SchemaChangeEvent] = field(default_factory=list)


def decode_batch(records: pa.Table, topic_tables: Mapping[str, str], schema_topic: str | None = None) -> DecodedBatch:
    """Decode a batch (Spark's Kafka columns as Arrow).

    ``topic_tables`` maps each table topic to its table; records of ``schema_topic`` are schema-change
    events; records of other topics and events that are not row changes are left out.
    """
    batch = DecodedBatch()
    for topic, value, headers in _records(records):
        if value is None:
            continue  # a Kafka tombstone: compaction's delete marker, not a change
        if topic == schema_topic:
            batch.schema_changes.append(decode_schema_change(value, headers))
            continue
        table = topic_tables.get(topic)
        if table is None:
            continue
        event = decode(value, headers)
        if event.op in CHANGE_OPS:
            batch.tables.setdefault(table, TableChanges()).events.append(event)
    return batch


def _records(records: pa.Table) -> Iterable[tuple[str, bytes | None, list[tuple[str, bytes]]]]:
    topics = cast(list[str], records.column("topic").to_pylist())
    values = cast(list[bytes | None], records.column("value").to_pylist())
    array = records.column("headers").combine_chunks()
    # picked out column-wise: building every record's whole header list in Python costs more than
    # decoding its JSON value
    headers: dict[str, list[bytes | None]] = {name: header_column(array, name).to_pylist() for name in HEADERS_READ}
    for index, (topic, value) in enumerate(zip(topics, values, strict=True)):
        yield topic, value, [(name, found) for name, column in headers.items() if (found := column[index]) is not None]


def header_column(headers: pa.Array, name: str) -> pa.Array:
    """Per record, the value of header ``name`` (the last one when it repeats, as a dict keeps it), or null:
    the Kafka ``headers`` column (list of key/value structs) read column-wise, never record by record."""
    parents = pc.list_parent_indices(headers).to_numpy()
    flat = cast(pa.StructArray, pc.list_flatten(headers))
    found = pc.equal(flat.field("key"), pa.scalar(name)).fill_null(False).to_numpy(zero_copy_only=False)
    where = np.full(len(headers), -1, dtype=np.int64)
    where[parents[found]] = np.arange(int(found.sum()))  # later duplicates overwrite earlier ones
    picked = pa.array(where, type=pa.int64(), mask=where < 0)
    return flat.field("value").filter(pa.array(found)).take(picked)
