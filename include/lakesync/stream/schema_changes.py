"""What a schema-change event from the relay means for a streamed Delta table.

The relay publishes DDL that touched a selected table on ``<prefix>.<db>._schema`` (docs/events.md). The
stream applies what Delta can follow and stops the table, with a message that says what to do, where it
can't:

* ``ADD COLUMN`` -> the column is added to the Delta table (nullable; rows loaded before it read NULL,
  see docs/operations.md for columns added with a non-NULL default);
* ``DROP COLUMN`` -> the Delta column stays (history keeps its values); new rows carry NULL in it;
* ``MODIFY COLUMN`` to the same Arrow type (e.g. a longer VARCHAR) -> nothing to do;
  to another type -> the table stops (delta-rs cannot change a column's type in place);
* ``RENAME COLUMN``, a primary-key change, ``TRUNCATE``, ``DROP TABLE``, ``RENAME TABLE`` -> the table stops: a re-snapshot of
  that table is the correct way back, and the other tables go on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa

from lakesync.core.errors import SchemaChangeError
from lakesync.core.types import ColumnSpec, arrow_field
from lakesync.events.envelope import SchemaChangeEvent

#: SQL type names sqlglot renders differently from information_schema's DATA_TYPE.
_TYPE_ALIASES = {"boolean": ("tinyint", "tinyint(1)"), "bool": ("tinyint", "tinyint(1)")}
_RESNAPSHOT = "re-run the full load for this table: `lakesync snapshot --pipeline {pipeline} --tables {table}`"


@dataclass
class SchemaAction:
    """What to do to one table: columns to add, or the reason it must stop."""

    add: list[pa.Field] = field(default_factory=list)
    stop_reason: str | None = None


def column_spec_from_ddl(name: str, sql_type: str) -> ColumnSpec:
    """A :class:`ColumnSpec` from a column definition's type as the DDL parser renders it (``INT UNSIGNED``)."""
    column_type = sql_type.strip().lower()
    match = re.match(r"[a-z0-9_]+", column_type)
    if not match:
        raise SchemaChangeError(f"cannot read the column type {sql_type!r} of column {name!r}")
    data_type = match.group(0)
    if data_type in _TYPE_ALIASES:
        data_type, column_type = _TYPE_ALIASES[data_type]
    return ColumnSpec(name=name, data_type=data_type, column_type=column_type, nullable=True)


def plan_schema_change(event: SchemaChangeEvent, current: pa.Schema, *, pipeline: str) -> SchemaAction:
    """Pure: the action one schema event asks of a table whose Delta schema is ``current``."""
    action = SchemaAction()
    if event.kind != "alter_table":
        action.stop_reason = (f"{event.kind.replace('_', ' ')} on the source ({event.ddl!r} at {event.position}); "
                              + _RESNAPSHOT.format(pipeline=pipeline, table=event.table))
        return action
    names = set(current.names)
    for change in event.changes:
        kind, column = change.get("change"), change.get("column")
        if kind == "add" and column not in names:
            action.add.append(arrow_field(column_spec_from_ddl(column, change.get("type") or "")).with_nullable(True))
        elif kind == "modify" and column in names:
            wanted = arrow_field(column_spec_from_ddl(column, change.get("type") or "")).type
            if wanted != current.field(column).type:
                action.stop_reason = (f"column {column!r} changed type to {change.get('type')} ({wanted}), which "
                                      f"the Delta table cannot follow in place; " + _RESNAPSHOT.format(pipeline=pipeline, table=event.table))
                return action
        elif kind == "primary_key":
            action.stop_reason = ("the primary key was changed (" + event.ddl.strip()[:200] + "); rows merged by the "
                                  "old key would be wrong; " + _RESNAPSHOT.format(pipeline=pipeline, table=event.table))
            return action
        elif kind == "rename":
            action.stop_reason = (f"column {column!r} was renamed to {change.get('new_column')!r}; "
                                  + _RESNAPSHOT.format(pipeline=pipeline, table=event.table))
            return action
    return action
