"""Tables that appear after the full load: found in the schema topic, joined to the running stream.

The relay publishes every selected table it sees, so a table created after the load already has its topic;
what the stream lacks is a handoff position, a Delta table and a subscription. The stream learns of the table
from its DDL on ``<prefix>.<db>._schema``:

* **created** (``CREATE TABLE``): the table was created after the relay's coverage began, so its whole life
  is in the change log. It joins at the position of its latest ``CREATE TABLE`` with no snapshot
  (:meth:`lakesync.full_load.load.FullLoad.start_at_creation`): an empty Delta table recorded as loaded there,
  and the topic read from the first change after it. Not from the topic's beginning: ``DROP TABLE`` and
  ``TRUNCATE`` log no row events, so a dropped and re-created table would bring the old rows back. When the
  events can't rebuild the table exactly (it changed shape since: a later DDL in the same batch, or its
  columns on the source differ from the ``CREATE``'s; ``CREATE TABLE ... LIKE`` / ``... SELECT``), it gets
  its own load instead, as a re-load after DDL does.
* **renamed in** (``RENAME TABLE other TO t``), or **older**: on the source, selected, and never loaded (an
  include pattern widened; looked for once per query, on the source): its rows are older than the change
  log, so it gets its own load.

The stream then restarts its query with the new topic (:func:`lakesync.stream.app.run_stream`), in the same
process. Until a table is joined, or when ``stream.join_new_tables`` is off, ``stream_progress.json`` names it
with the reason (``not_synced``) and ``lakesync status`` shows it; the note goes when the table is streamed,
dropped or renamed away, or no longer selected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from lakesync.core.config import Pipeline
from lakesync.core.errors import LakesyncError
from lakesync.core.types import arrow_field
from lakesync.events.envelope import SchemaChangeEvent
from lakesync.full_load.state import LoadState, TableLoad
from lakesync.source.ddl import CREATE_TABLE, DROP_TABLE, RENAME_TABLE
from lakesync.source.table_reader import TableShape
from lakesync.stream.schema_changes import column_spec_from_ddl, resnapshot_note

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Arrival:
    """A selected table the stream does not stream yet, and the newest DDL that brought it (none for a table
    that was on the source all along: an include pattern widened)."""

    table: str
    how: Literal["created", "renamed_in", "older"]
    event: SchemaChangeEvent | None = None

    def describe(self) -> str:
        if self.event is None:
            return "on the source but never loaded (older than the change log: an include pattern widened?)"
        return f"{'created' if self.how == 'created' else 'renamed in'} on the source at {self.event.position}"


def _fates(events: Sequence[SchemaChangeEvent], database: str) -> dict[str, Arrival | None]:
    """Pure: per table of ``database``, the newest DDL among ``events`` that brought it (its arrival) or took
    it away (None: ``DROP TABLE``, or ``RENAME TABLE`` it to another name)."""
    fates: dict[str, Arrival | None] = {}
    for event in sorted(events, key=lambda e: e.position):
        if event.kind == CREATE_TABLE and event.db == database:
            fates[event.table] = Arrival(event.table, "created", event)
        elif event.kind == RENAME_TABLE and event.new_table:
            if event.db == database:
                fates[event.table] = None
            fates[event.new_table] = Arrival(event.new_table, "renamed_in", event)
        elif event.kind == DROP_TABLE and event.db == database:
            fates[event.table] = None
    return fates


def arrivals(events: Sequence[SchemaChangeEvent], known: Collection[str], selects: Callable[[str], bool],
             database: str) -> dict[str, Arrival]:
    """Pure: per table that is selected, not ``known`` and still there after ``events``, its latest ``CREATE
    TABLE`` (or ``RENAME TABLE ... TO`` it)."""
    return {table: arrival for table, arrival in _fates(events, database).items()
            if arrival is not None and table not in known and selects(table)}


def departed(events: Sequence[SchemaChangeEvent], database: str) -> set[str]:
    """Pure: the tables ``events`` leave gone (dropped or renamed away, and not back): nothing to sync."""
    return {table for table, arrival in _fates(events, database).items() if arrival is None}


def created_shape_matches(event: SchemaChangeEvent, shape: TableShape) -> bool:
    """Pure: whether the table on the source still has the columns (names, order and Delta types) its
    ``CREATE TABLE`` gave it. A ``CREATE`` without column definitions (``LIKE``, ``AS SELECT``) never does."""
    created = [(str(change.get("column")), str(change.get("type") or "")) for change in event.changes
               if change.get("change") == "add"]
    if not created or len(created) != len(shape.columns):
        return False
    try:
        wanted = [arrow_field(column_spec_from_ddl(name, sql_type)) for name, sql_type in created]
    except LakesyncError:
        return False
    now = shape.arrow_schema()
    return all(field.name == now.field(i).name and field.type == now.field(i).type
               for i, field in enumerate(wanted))


@dataclass(frozen=True)
class Joined:
    """How a table joined (its load entry, and how it got it), or why it did not (``entry`` None)."""

    entry: TableLoad | None
    note: str


def older_tables(pipeline: Pipeline, known: Collection[str]) -> list[str]:
    """Selected tables on the source that nothing has loaded (no entry in ``full_load.json``) and that are not
    ``known``: older than the change log, so only a load brings them (asks the source, once per query)."""
    from lakesync.full_load.load import FullLoad

    loaded = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables
    return [name for name in FullLoad(pipeline).source_tables()
            if pipeline.tables.selects(name) and name not in loaded and name not in known]


def join(pipeline: Pipeline, arrival: Arrival, *, changed_since: bool) -> Joined:
    """Give ``arrival`` a handoff position: from its ``CREATE TABLE`` when the change log alone rebuilds it,
    else through its own load. ``changed_since``: a later DDL of the table is already in the batch."""
    from lakesync.full_load.load import FullLoad

    name, event = arrival.table, arrival.event
    load = FullLoad(pipeline, tables=[name], restart=True)
    try:
        if arrival.how == "created" and event is not None and not changed_since:
            result = load.start_at_creation(name, event.position, lambda shape: created_shape_matches(event, shape))
            if result is not None:
                log.warning("table %s joins the stream: created at %s after the load, streamed from its CREATE "
                            "TABLE on (no snapshot)", name, event.position)
                return Joined(_entry(pipeline, name), f"created at {event.position}; streamed from its CREATE TABLE on")
        if not load.source_has(name):
            return Joined(None, f"{arrival.describe()}, but no longer there")
        why = arrival.describe() + (", and changed shape since" if arrival.how == "created" else "")
        log.warning("table %s joins the stream through its own load (%s)", name, why)
        load.run()
    except Exception as exc:  # whatever failed, only this table waits
        detail = exc.message if isinstance(exc, LakesyncError) else f"{type(exc).__name__}: {exc}"
        return Joined(None, f"{arrival.describe()}; its automatic load failed: {detail[:500]}; "
                            f"{resnapshot_note(pipeline.name, name)}")
    entry = _entry(pipeline, name)
    return Joined(entry, f"{why}; loaded at {entry.position_key if entry else '?'}")


def _entry(pipeline: Pipeline, name: str) -> TableLoad | None:
    entry = LoadState.for_pipeline_dir(pipeline.pipeline_state_dir).tables.get(name)
    return entry if entry is not None and entry.status == "done" else None


def not_synced_note(pipeline: Pipeline, arrival: Arrival) -> str:
    """What status says of a new table while ``stream.join_new_tables`` is off."""
    return (f"{arrival.describe()}, after the full load; stream.join_new_tables is off, so it needs its own load, "
            f"then a restart of the stream: `lakesync snapshot --pipeline {pipeline.name} --tables {arrival.table}`")
