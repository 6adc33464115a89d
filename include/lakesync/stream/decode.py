"""Turning a micro-batch of Kafka records into per-table change tables for the Delta sink.

Each record's value is a change event (lakesync's or Debezium's envelope, :mod:`lakesync.envelope`). The
row image the sink needs is ``after`` for creates, updates and snapshot reads, and ``before`` for deletes
(the sink only needs the key of a deleted row). Values arrive in the JSON form of :mod:`lakesync.types`
and are converted with the *Delta table's* Arrow schema, so the stream needs no source connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from lakesync.envelope import ChangeEvent, decode
from lakesync.types import arrow_value_from_json

POS_COLUMN, OP_COLUMN, TS_COLUMN = "_lakesync_pos", "_lakesync_op", "_lakesync_ts_ms"
META_COLUMNS = (POS_COLUMN, OP_COLUMN, TS_COLUMN)
CHANGE_OPS = frozenset({"c", "u", "d", "r"})


def user_schema(delta_schema: pa.Schema) -> pa.Schema:
    """The source columns of a target table (its schema without lakesync's own columns)."""
    return pa.schema([f for f in delta_schema if not f.name.startswith("_lakesync_")])


@dataclass
class TableChanges:
    """The change events of one table in one micro-batch, in arrival order."""

    events: list[ChangeEvent] = field(default_factory=list)
    new_columns: set[str] = field(default_factory=set)

    def to_arrow(self, schema: pa.Schema) -> pa.Table:
        """Columns of ``schema`` (source columns) plus the position, op and source-time columns.

        A column the event has but ``schema`` lacks is noted in ``new_columns`` (the caller evolves the
        table); a column the schema has but the event lacks (a delete's partial image) is null.
        """
        columns: dict[str, list[object]] = {f.name: [] for f in schema}
        positions, ops, timestamps = [], [], []
        for event in self.events:
            image = event.before if event.op == "d" else event.after
            image = image or {}
            self.new_columns.update(name for name in image if name not in columns)
            for target in schema:
                columns[target.name].append(arrow_value_from_json(target.type, image.get(target.name)))
            positions.append(event.position.key())
            ops.append(event.op)
            timestamps.append(event.ts_ms)
        arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
        arrays += [pa.array(positions, pa.string()), pa.array(ops, pa.string()), pa.array(timestamps, pa.int64())]
        names = [*schema.names, *META_COLUMNS]
        return pa.Table.from_arrays(arrays, names=names)


def group_by_table(records: pa.Table, topic_tables: Mapping[str, str]) -> dict[str, TableChanges]:
    """Decode a batch (Spark's Kafka columns as Arrow) and group the row changes by target table.

    ``topic_tables`` maps each topic to its table; records of other topics and events that are not row
    changes (heartbeats, schema events) are left out here.
    """
    grouped: dict[str, TableChanges] = {}
    for topic, value, headers in _records(records):
        table = topic_tables.get(topic)
        if table is None or value is None:
            continue
        event = decode(value, headers)
        if event is None or event.op not in CHANGE_OPS:
            continue
        grouped.setdefault(table, TableChanges()).events.append(event)
    return grouped


def _records(records: pa.Table) -> Iterable[tuple[str, bytes | None, list[tuple[str, bytes]]]]:
    topics = records.column("topic").to_pylist()
    values = records.column("value").to_pylist()
    headers = records.column("headers").to_pylist()
    for topic, value, header_list in zip(topics, values, headers, strict=True):
        yield topic, value, [(h["key"], h["value"]) for h in (header_list or [])]
