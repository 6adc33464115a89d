"""The change-event format on Kafka: Debezium's MySQL envelope, versioned as ``lakesync.event.v1``.

One Kafka record per row change (see docs/events.md for the full contract):

* **value**: ``{"before", "after", "source": {version, connector, name, ts_ms, db, table, server_id, gtid,
  file, pos, row, snapshot}, "op": "c"|"u"|"d"|"r", "ts_ms"}``, the Debezium MySQL payload without the
  ``schema`` wrapper; row values are in lakesync's JSON form (:func:`lakesync.core.types.json_value`).
* **key**: JSON of the primary-key columns (``{"id": 7}``); for a table without a key, the whole row, and
  the header ``lakesync.key`` says ``row`` instead of ``pk``.
* **headers**: ``lakesync.pos`` (:meth:`SourcePosition.key`, so readers can order and seek without parsing
  the value), ``lakesync.op``, ``lakesync.key``, ``lakesync.format``.

``source.pos`` is the *end* offset of the binlog event and ``source.row`` the 0-based row inside it, so
the lakesync position is ``(file, pos, row + 1)``; snapshot rows (``op`` ``r``) sit at ``(file, pos, 0)``.

:func:`decode` also reads events written by Debezium's MySQL connector with the JSON converter's
``{"schema", "payload"}`` wrapper, converting Debezium's logical types to lakesync's JSON form as the schema
says what they are, and taking the position from the ``source`` block when the ``lakesync.pos`` header is
missing (:mod:`lakesync.events.debezium`). Debezium's events without the wrapper (``schemas.enable=false``)
are refused with the setting to change: their DECIMAL, BIT and temporal values can't be read exactly. Schema changes travel as a separate message type on the pipeline's
``<prefix>.<db>._schema`` topic (:class:`SchemaChangeEvent`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakesync.core.positions import MIN_KEY, SourcePosition, binlog_file_index, file_stem
from lakesync.events.debezium import (
    LAKESYNC_EVENT_FORMAT,
    EventFormatError,
    RowFields,
    convert_row,
    envelope_converters,
    position_from_source_block,
    refuse_schemaless,
    row_fields,
)

EVENT_FORMAT = LAKESYNC_EVENT_FORMAT
SCHEMA_FORMAT = "lakesync.schema.v1"
CONNECTOR = "mysql"
#: Suffix of the per-pipeline schema-change topic: ``<prefix>.<db>._schema``.
SCHEMA_TOPIC_TABLE = "_schema"

H_POS, H_OP, H_KEY, H_FORMAT = "lakesync.pos", "lakesync.op", "lakesync.key", "lakesync.format"
#: the headers of every record :func:`encode` writes, in this order (Spark SQL's decode reads them by index)
RELAY_HEADERS = (H_POS, H_OP, H_KEY, H_FORMAT)
_OPS = frozenset("cudr")
_SNAPSHOT_TRUE = frozenset({"true", "last", "first", "first_in_data_collection", "last_in_data_collection",
                            "incremental"})

Headers = list[tuple[str, bytes]]
_OP_BYTES = {op: op.encode() for op in _OPS}
_FORMAT_BYTES = EVENT_FORMAT.encode()
_ROW_WIDTH = len(MIN_KEY.rsplit(".", 1)[1])
_last_key_base: tuple[tuple[str, int], str] = (("", -1), "")
_names: dict[str, str] = {}
_file_json: dict[str, str] = {}
_source_prefixes: dict[tuple[str, str, str, int], str] = {}
_file_indexes: dict[str, int] = {}
_SNAPSHOT_JSON = {True: '"true"', False: '"false"'}
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads


@dataclass(slots=True)
class ChangeEvent:
    """One row change with the source position that orders it.

    ``key`` holds the key columns and their values; ``key_is_row`` is true for tables without a key,
    whose Kafka key is the whole row. ``ts_ms`` is when the source committed the change; ``emitted_ms``
    when the relay (or Debezium) produced the event.
    """

    op: str
    db: str
    table: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    position: SourcePosition
    ts_ms: int
    key: dict[str, Any] | None = None
    key_is_row: bool = False
    server_id: int = 0
    name: str = "lakesync"
    snapshot: bool = False
    emitted_ms: int | None = None
    #: the row images' column schemas, for events Debezium wrote with its schema (None for lakesync's): a
    #: column there that the Delta table lacks was added at the source (lakesync.stream.decode.added_columns)
    row_fields: RowFields | None = None


@dataclass(slots=True)
class SchemaChangeEvent:
    """A DDL statement that changed a selected table, at the position where it took effect.

    ``kind`` is one of :data:`lakesync.source.ddl.CHANGE_KINDS`; ``changes`` lists column-level edits
    (``{"change": "add", "column": "c", "type": "INT"}``); ``new_table`` is set for renames.
    """

    db: str
    table: str
    kind: str
    ddl: str
    position: SourcePosition
    ts_ms: int
    changes: list[dict[str, Any]] = field(default_factory=list)
    new_table: str | None = None
    server_id: int = 0
    name: str = "lakesync"


def _source_block(event: ChangeEvent | SchemaChangeEvent, *, row: int, snapshot: str) -> dict[str, Any]:
    pos = event.position
    return {
        "version": EVENT_FORMAT if isinstance(event, ChangeEvent) else SCHEMA_FORMAT,
        "connector": CONNECTOR,
        "name": event.name,
        "ts_ms": event.ts_ms,
        "snapshot": snapshot,
        "db": event.db,
        "table": event.table,
        "server_id": event.server_id,
        "gtid": pos.gtid,
        "file": pos.file,
        "pos": pos.offset,
        "row": row,
    }


def encode_key(event: ChangeEvent) -> bytes:
    key = event.key
    if key is not None and not event.key_is_row:
        if len(key) == 1:
            ((name, value),) = key.items()
            if type(value) is int:  # the common case, without a trip through the JSON encoder
                return f"{{{_json_name(name)}:{value}}}".encode()
        return _dumps(key).encode()
    row = event.after if event.after is not None else event.before
    return _dumps(row).encode()


def _json_name(name: str) -> str:
    quoted = _names.get(name)
    if quoted is None:
        quoted = _names[name] = _dumps(name)
    return quoted


def _position_key(position: SourcePosition) -> str:
    """:meth:`SourcePosition.key`, reusing the file/offset part across the rows of one binlog event."""
    global _last_key_base
    base_of, base = _last_key_base
    if base_of != (position.file, position.offset):
        base = position.with_row(0).key()[:-_ROW_WIDTH]
        _last_key_base = ((position.file, position.offset), base)
    return f"{base}{position.row:0{_ROW_WIDTH}d}"


def _source_prefix(event: ChangeEvent) -> str:
    """The constant head of a table's ``source`` block, JSON-encoded once per (name, db, table, server)."""
    cache_key = (event.name, event.db, event.table, event.server_id)
    prefix = _source_prefixes.get(cache_key)
    if prefix is None:
        head = _dumps({"version": EVENT_FORMAT, "connector": CONNECTOR, "name": event.name, "db": event.db,
                       "table": event.table, "server_id": event.server_id})
        prefix = _source_prefixes[cache_key] = head[:-1] + ","
    return prefix


def encode(event: ChangeEvent) -> tuple[bytes, bytes, Headers]:
    """``(key, value, headers)`` of the Kafka record for ``event``.

    The value is assembled from pre-encoded pieces (the hot path of the relay); it is the same JSON
    object :func:`decode` reads: ``{"before", "after", "source", "op", "ts_ms"}``.
    """
    pos = event.position
    row = pos.row
    op = event.op
    before, after = event.before, event.after
    file = _file_json.get(pos.file)
    if file is None:
        file = _file_json[pos.file] = _dumps(pos.file)
    gtid = _dumps(pos.gtid) if pos.gtid is not None else "null"
    emitted = event.emitted_ms if event.emitted_ms is not None else event.ts_ms
    value = (
        f'{{"before":{_dumps(before) if before is not None else "null"},'
        f'"after":{_dumps(after) if after is not None else "null"},'
        f'"source":{_source_prefix(event)}"ts_ms":{event.ts_ms},'
        f'"snapshot":{_SNAPSHOT_JSON[event.snapshot]},"gtid":{gtid},"file":{file},"pos":{pos.offset},'
        f'"row":{row - 1 if row else 0}}},"op":"{op}","ts_ms":{emitted}}}'
    )
    headers = list(zip(RELAY_HEADERS, (_position_key(pos).encode(), _OP_BYTES[op],
                                        b"row" if event.key_is_row or event.key is None else b"pk", _FORMAT_BYTES),
                       strict=True))
    return encode_key(event), value.encode(), headers


def _header_map(headers: Iterable[tuple[str, bytes | str | None]] | Mapping[str, Any] | None) -> dict[str, str]:
    if not headers:
        return {}
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {name: raw.decode() if type(raw) is bytes else str(raw) for name, raw in items if raw is not None}


def _unwrap(document: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The payload and, when the JSON converter's wrapper is there, the value schema."""
    if not isinstance(document, dict):
        raise EventFormatError(f"a change event must be a JSON object, got {type(document).__name__}")
    if "payload" in document and "schema" in document:
        payload = document["payload"]
        if not isinstance(payload, dict):
            raise EventFormatError("the event's payload is not a JSON object (a tombstone record?)")
        return payload, document["schema"] if isinstance(document["schema"], dict) else None
    return document, None


def _file_index(file: str) -> int:
    index = _file_indexes.get(file)
    if index is None:
        index = _file_indexes[file] = binlog_file_index(file)
    return index


def _position(source: Mapping[str, Any], op: str, headers: Mapping[str, str]) -> SourcePosition:
    """The ``lakesync.pos`` header when the relay wrote one, else the source block (Debezium's topics)."""
    key = headers.get(H_POS)
    file = source.get("file")
    if not key or not file:
        return position_from_source_block(source, op)
    gtid = source.get("gtid") or None
    parts = key.split(".")
    if len(parts) == 3 and parts[0].isdigit() and int(parts[0]) == _file_index(file):
        return SourcePosition(file, int(parts[1]), int(parts[2]), gtid)
    pos = SourcePosition.from_key(key, file_stem=file_stem(file))
    return SourcePosition(pos.file, pos.offset, pos.row, gtid)


def record_position_key(value: bytes | str | None, headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None,
                        *, schemaless_ok: bool = False) -> str | None:
    """The position key (:meth:`SourcePosition.key`) of a Kafka record, for seeking: the ``lakesync.pos``
    header when present, else derived from the value's source block (Debezium's topics). None for a record
    with no value (a tombstone), which has no position. A Debezium record without its schema is refused
    (:func:`refuse_schemaless`) unless ``schemaless_ok``: its position is readable, its values are not, so
    only a search that will not read it (it lies before where the stream starts) may pass over it."""
    key = _header_map(headers).get(H_POS)
    if key:
        return key
    if value is None:
        return None
    payload, schema = _unwrap(_loads(value))
    if schema is None and not schemaless_ok:
        refuse_schemaless(payload.get("source") or {})
    return position_from_source_block(payload.get("source") or {}, payload.get("op") or "c").key()


def message_position_key(msg: Any) -> str | None:
    """A Kafka message's position key (:func:`record_position_key`), for searching a topic: records without
    their schema that the search passes over (older, retained ones) are no reason to stop."""
    return record_position_key(msg.value(), msg.headers(), schemaless_ok=True)


def record_source_ts_ms(value: bytes | str | None) -> int | None:
    """When the source committed the change in a Kafka record (its ``source.ts_ms``, in lakesync's and in
    Debezium's records); None when the record does not say (a tombstone, a value that is not an event)."""
    if value is None:
        return None
    try:
        payload, _ = _unwrap(_loads(value))
    except (ValueError, EventFormatError):
        return None
    source = payload.get("source")
    ts_ms = source.get("ts_ms") if isinstance(source, dict) else None
    return int(ts_ms) if isinstance(ts_ms, int | float) and ts_ms > 0 else None


def decode(value: bytes | str | None, headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None = None, *,
           key: bytes | str | None = None) -> ChangeEvent:
    """The :class:`ChangeEvent` in a Kafka record written by lakesync or by Debezium's MySQL connector."""
    if value is None:
        raise EventFormatError("the record has no value (a Debezium tombstone after a delete); skip it")
    try:
        document = _loads(value)
    except ValueError as exc:
        raise EventFormatError(f"a change event is not valid JSON: {exc}") from None
    payload, schema = _unwrap(document)
    op = payload.get("op")
    if op not in _OPS:
        raise EventFormatError(f"unknown op {op!r} (expected c, u, d or r)")
    source = payload.get("source") or {}
    before, after = payload.get("before"), payload.get("after")
    fields = None
    if schema is not None:
        converters = envelope_converters(schema)
        before = convert_row(before, converters.get("before"))
        after = convert_row(after, converters.get("after"))
        fields = row_fields(schema)
    else:
        refuse_schemaless(source)
    header_map = _header_map(headers)
    key_kind = header_map.get(H_KEY)
    key_dict: dict[str, Any] | None = None
    if key is not None:
        key_doc, _ = _unwrap(_loads(key)) if key else ({}, None)
        key_dict = key_doc
    snapshot = source.get("snapshot")
    return ChangeEvent(
        op=op,
        db=source.get("db") or "",
        table=source.get("table") or "",
        before=before,
        after=after,
        position=_position(source, op, header_map),
        ts_ms=int(source.get("ts_ms") or 0),
        key=key_dict,
        key_is_row=key_kind == "row",
        server_id=int(source.get("server_id") or 0),
        name=source.get("name") or "",
        snapshot=snapshot is True or (isinstance(snapshot, str) and snapshot.lower() in _SNAPSHOT_TRUE),
        emitted_ms=payload.get("ts_ms"),
        row_fields=fields,
    )


# -- schema-change events ---------------------------------------------------------------------------------

def encode_schema_change(event: SchemaChangeEvent) -> tuple[bytes, bytes, Headers]:
    """The record on ``<prefix>.<db>._schema``; key = the table, so one table's changes stay in order."""
    value = {
        "source": _source_block(event, row=0, snapshot="false"),
        "databaseName": event.db,
        "ddl": event.ddl,
        "tableChanges": [{
            "type": event.kind,
            "id": f"{event.db}.{event.table}",
            "table": event.table,
            "newTable": event.new_table,
            "changes": event.changes,
        }],
        "ts_ms": event.ts_ms,
    }
    headers = [(H_POS, event.position.key().encode()), (H_FORMAT, SCHEMA_FORMAT.encode())]
    return _dumps({"databaseName": event.db, "table": event.table}).encode(), _dumps(value).encode(), headers


def decode_schema_change(value: bytes | str, headers: Iterable[tuple[str, Any]] | None = None) -> SchemaChangeEvent:
    document = _loads(value)
    source = document["source"]
    change = document["tableChanges"][0]
    return SchemaChangeEvent(
        db=document["databaseName"],
        table=change["table"],
        kind=change["type"],
        ddl=document["ddl"],
        position=_position(source, "r", _header_map(headers)),
        ts_ms=int(document.get("ts_ms") or 0),
        changes=list(change.get("changes") or []),
        new_table=change.get("newTable"),
        server_id=int(source.get("server_id") or 0),
        name=source.get("name") or "",
    )
