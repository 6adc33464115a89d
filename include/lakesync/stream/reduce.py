"""A micro-batch's work, done where the data is: decode and reduce on the executors, ship the reduced rows.

Spark's Kafka source reads the records in the JVM, one task per topic-partition range. With
``stream.decode: python`` (and for the records Spark SQL's decode leaves to Python, such as Debezium's:
:mod:`lakesync.stream.sql_decode`) each task hands them to :func:`reduce_partition` as Arrow batches
(``mapInArrow``, :func:`run_records_on_executors`). The records are decoded column-wise
(:mod:`lakesync.stream.columnar_decode`) and each key-merged table is cut down to the newest change per
key (by source position, :func:`lakesync.sink.changes.last_change_per_key`) as the batches arrive, so a
task holds at most one row per key it has seen. A key's changes can be in several tasks (the stream cuts
a busy topic-partition into consecutive offset ranges, ``minPartitions``, so every core gets work; a
topic may have been re-partitioned): the sink's own reduction on the driver takes the newest of those.
``append_log`` tables are not reduced: their rows stream through as they are decoded.

What reaches the driver is one row per chunk of reduced rows (an Arrow IPC stream in a binary value) plus
the raw records of the schema-change topic, which the driver decodes itself (there are few), and for the
topics of stopped tables the newest position read (what a stopped table did not get). Records that
do not decode with the table's current schema (a column changed type in this very batch, or Debezium's
events carrying a column the table lacks) go to the driver raw as well: it decodes them with the record
decoder after applying the batch's schema changes, as the stream always did, so a DDL in the middle of a
batch is handled exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

from lakesync.core.errors import LakesyncError
from lakesync.core.memory import release_free_memory
from lakesync.events.envelope import H_POS, SchemaChangeEvent, record_position_key
from lakesync.sink.changes import last_change_per_key
from lakesync.stream.columnar_decode import DecodePlan, decode_records
from lakesync.stream.decode import DecodedBatch, decode_batch, header_column

_ROWS, _SCHEMA, _RAW, _NEWEST = "rows", "schema", "raw", "newest"
#: Reduced rows per IPC chunk sent to the driver (keeps each binary value far below Spark's 2 GB limit).
CHUNK_ROWS = 50_000
#: The Kafka columns the work needs (what the driver gets of records only it can decode).
INPUT_COLUMNS = ("topic", "value", "headers")

#: What each executor task sends the driver, per chunk: (kind, table or topic, changes it stands for, data).
Chunk = tuple[str, str, int, bytes]


@dataclass(frozen=True)
class ReducePlan:
    """The decode plan, and the key columns of each table reduced to its newest change per key."""

    decode: DecodePlan
    keys: dict[str, list[str]] = field(default_factory=dict)
    #: topics whose newest position the driver wants back (tables stopped, or stopping in this batch)
    watch_topics: frozenset[str] = frozenset()
    #: the topics with records in the batch (from the checkpoint's offsets; None: not known, any may have)
    topics_read: frozenset[str] | None = None
    #: topics Spark SQL's decode leaves to the Python path: they carried records other than the relay's events
    python_topics: frozenset[str] = frozenset()


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _output(kind: str, table: str, changes: int, data: pa.Table) -> Iterator[Chunk]:
    for start in range(0, max(data.num_rows, 1), CHUNK_ROWS):
        yield kind, table, changes if start == 0 else 0, _ipc(data.slice(start, CHUNK_ROWS))


class _Reducer:
    """One table's newest change per key, folded in as decoded chunks arrive."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        self.reduced: pa.Table | None = None
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.changes = 0

    def add(self, changes: pa.Table) -> None:
        self.pending.append(changes)
        self.pending_rows += changes.num_rows
        self.changes += changes.num_rows
        # fold once the pending rows outgrow what is already reduced: linear work, bounded memory
        if self.pending_rows >= max(CHUNK_ROWS, self.reduced.num_rows if self.reduced is not None else 0):
            self.fold()

    def fold(self) -> pa.Table | None:
        if self.pending:
            parts = ([self.reduced] if self.reduced is not None else []) + self.pending
            self.reduced = last_change_per_key(pa.concat_tables(parts).combine_chunks(), self.keys)
            self.pending, self.pending_rows = [], 0
        return self.reduced


def _note_newest(records: pa.Table, watch_topics: frozenset[str], newest: dict[str, str]) -> None:
    """Keep, per watched topic, the newest position of the records (a run of one topic): their ``lakesync.pos``
    headers, or for records without one (Debezium's) the position of their ``source`` block."""
    topic = records.column("topic")[0].as_py() if records.num_rows else None
    if topic not in watch_topics:
        return
    positions = header_column(records.column("headers").combine_chunks(), H_POS).cast(pa.string())
    top: str | None = pc.max(positions).as_py()
    bare = records.filter(pc.and_(pc.is_null(positions), pc.is_valid(records.column("value"))))
    keys = [key for value in cast(list[bytes], bare.column("value").to_pylist())
            if (key := _position_or_none(value)) is not None]
    top = max([*keys, *([top] if top is not None else [])], default=None)
    if top is not None and top > newest.get(topic, ""):
        newest[topic] = top


def _position_or_none(value: bytes) -> str | None:
    """A record's position key from its value, or None when it is no change event (the decoder says why)."""
    try:
        return record_position_key(value, None)
    except (LakesyncError, ValueError):
        return None


def reduce_partition(plan: ReducePlan, batches: Iterable[pa.RecordBatch]) -> Iterator[Chunk]:
    """One task's work: Kafka record batches (each of one topic-partition) in, reduced change chunks out."""
    reducers: dict[str, _Reducer] = {}
    newest: dict[str, str] = {}
    for batch in batches:
        records = pa.Table.from_batches([batch])
        _note_newest(records, plan.watch_topics, newest)
        try:
            decoded = decode_records(records, plan.decode)
        except Exception:
            yield from _output(_RAW, "", records.num_rows, records.select(list(INPUT_COLUMNS)))
            continue
        if decoded.schema_records is not None:
            yield from _output(_SCHEMA, "", decoded.schema_records.num_rows,
                               decoded.schema_records.select(list(INPUT_COLUMNS)))
        for table, changes in decoded.tables.items():
            keys = plan.keys.get(table)
            if keys:
                reducers.setdefault(table, _Reducer(keys)).add(changes)
            else:
                yield from _output(_ROWS, table, changes.num_rows, changes)
    for table, reducer in reducers.items():
        reduced = reducer.fold()
        if reduced is not None:
            yield from _output(_ROWS, table, reducer.changes, reduced)
    for topic, key in newest.items():
        yield _NEWEST, topic, 0, key.encode()


@dataclass
class ReducedTable:
    """What the driver commits for one table: the reduced rows, and how many changes they stand for."""

    rows: pa.Table
    changes: int


@dataclass
class ReducedBatch:
    """The batch as the driver sees it; ``raw`` holds the changes only the driver could decode (see above)."""

    tables: dict[str, ReducedTable] = field(default_factory=dict)
    schema_changes: list[SchemaChangeEvent] = field(default_factory=list)
    raw: DecodedBatch | None = None
    #: per watched topic (:attr:`ReducePlan.watch_topics`), the newest position key read in the batch
    newest: dict[str, str] = field(default_factory=dict)
    #: topics whose records Spark SQL's decode found not to be the relay's events (:mod:`lakesync.stream.sql_decode`)
    not_relay_topics: set[str] = field(default_factory=set)

    def add_raw(self, schemas: Mapping[str, pa.Schema], stop_before: Mapping[str, str],
                handoffs: Mapping[str, str], read_from: Mapping[str, str]) -> None:
        """Type the raw changes with the (possibly just evolved) ``schemas`` and add them to ``tables``; lossy
        Debezium settings are refused in the changes after each table's load position (``handoffs``). As on
        the executors, changes at or after ``stop_before`` and before ``read_from`` are left out."""
        if self.raw is None:
            return
        for table, changes in self.raw.tables.items():
            stop, start = stop_before.get(table), read_from.get(table, "")
            # before typing: changes after the DDL may not fit the old types
            changes.events = [e for e in changes.events
                              if start <= e.position.key() and (stop is None or e.position.key() < stop)]
            changes.refuse_lossy_settings(table, schemas[table], after=handoffs.get(table, ""))
            rows = changes.to_arrow(schemas[table])
            if rows.num_rows:
                known = self.tables.get(table)
                if known is not None:
                    rows = pa.concat_tables([known.rows, rows])
                self.tables[table] = ReducedTable(rows, (known.changes if known else 0) + len(changes.events))
        self.raw = None


def reduced_batch(chunks: Iterable[Chunk], plan: DecodePlan) -> ReducedBatch:
    """Put the tasks' ``(kind, table, changes, data)`` chunks back together on the driver."""
    parts: dict[str, list[pa.Table]] = {}
    counts: dict[str, int] = {}
    schema_parts: list[pa.Table] = []
    raw_parts: list[pa.Table] = []
    out = ReducedBatch()
    for kind, table, changes, data in chunks:
        if kind == _NEWEST:
            out.newest[table] = max(data.decode(), out.newest.get(table, ""))
            continue
        rows = pa.ipc.open_stream(data).read_all()
        if kind == _ROWS:
            parts.setdefault(table, []).append(rows)
            counts[table] = counts.get(table, 0) + changes
        else:
            (schema_parts if kind == _SCHEMA else raw_parts).append(rows)
    for table, tables in parts.items():
        rows = pa.concat_tables(tables).combine_chunks()
        if rows.num_rows:
            out.tables[table] = ReducedTable(rows, counts[table])
    if schema_parts:
        out.schema_changes = decode_batch(pa.concat_tables(schema_parts), {},
                                          schema_topic=plan.schema_topic).schema_changes
    if raw_parts:
        out.raw = decode_batch(pa.concat_tables(raw_parts), plan.topic_tables, schema_topic=plan.schema_topic)
        out.schema_changes.extend(out.raw.schema_changes)
    return out


#: What :func:`run_records_on_executors` tasks return: one row per :data:`Chunk`.
CHUNK_SCHEMA = "kind string, name string, changes long, data binary"
_CHUNK_FIELDS: list[pa.Field] = [pa.field("kind", pa.string()), pa.field("name", pa.string()),
                                  pa.field("changes", pa.int64()), pa.field("data", pa.binary())]
_CHUNK_ARROW = pa.schema(_CHUNK_FIELDS)


def reduce_arrow(plan: ReducePlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function: one task's Kafka records (one topic-partition range) in, chunks out."""
    for kind, name, changes, data in reduce_partition(plan, batches):
        yield pa.RecordBatch.from_pydict({"kind": [kind], "name": [name], "changes": [changes], "data": [data]},
                                         schema=_CHUNK_ARROW)
    release_free_memory()


def run_records_on_executors(batch_df, plan: ReducePlan) -> ReducedBatch:
    """Decode and reduce a micro-batch of Spark's Kafka source (its records, ``includeHeaders``) on the
    executors, one task per topic-partition range; collect the result."""
    chunks = batch_df.select(*INPUT_COLUMNS).mapInArrow(partial(reduce_arrow, plan), CHUNK_SCHEMA).collect()
    return reduced_batch(((row.kind, row.name, row.changes, row.data) for row in chunks), plan.decode)
