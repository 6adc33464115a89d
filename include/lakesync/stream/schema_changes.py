"""What a schema-change event from the relay means for a streamed Delta table.

The relay publishes DDL that touched a selected table on ``<prefix>.<db>._schema`` (docs/events.md). The
stream applies in place what Delta can follow, and stops the table, with a message that gives the command
that re-loads it, where it can't (docs/schema_changes.md has the whole table):

* ``ADD COLUMN`` -> the column is added to the Delta table (nullable); when MySQL fills the rows that exist
  with a value (an explicit literal ``DEFAULT``, or the implicit 0 / '' of a ``NOT NULL`` number or text
  column), the same value is written into the Delta rows whose last change came before the DDL;
  a default that is an expression (``CURRENT_TIMESTAMP``) stops the table. A column Delta has already (the
  DDL replayed after its batch died before the fill, or a column dropped and added again, whose old values
  Delta kept) gets its default, or NULL, written into those rows again; with another type the table stops;
* ``DROP COLUMN`` -> the Delta column stays (history keeps its values) and becomes nullable; new rows carry
  NULL in it;
* ``MODIFY COLUMN`` to the same Arrow type (a longer or shorter VARCHAR) -> nothing to do, except that a
  column that may now be NULL becomes nullable in Delta; to a wider type Delta's type widening takes
  (INT -> BIGINT, a larger DECIMAL, FLOAT -> DOUBLE, DATE -> DATETIME: :mod:`lakesync.core.types.widening`)
  -> the column is widened in place, with ``delta.writer: delta_spark`` (delta-rs can't write such a table);
  to another type -> the table stops;
* index, key (other than primary), engine, rebuild, character set and partitioning changes -> nothing;
* ``RENAME COLUMN``, a primary-key change, ``TRUNCATE``, a table replaced by a ``RENAME TABLE`` swap (gh-ost,
  pt-online-schema-change), a statement the relay could not read -> the table stops: a re-load of that
  table is the correct way back, and the other tables go on;
* ``DROP TABLE`` or ``RENAME TABLE`` away -> the table stops; Delta keeps its last state.

Every stop is first tried as a re-load of the table by the stream itself (:attr:`SchemaAction.reload`),
unless the pipeline sets ``stream.reload_on_schema_change: false``; a table that no longer exists fails to
load and stops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa

from lakesync.core.errors import SchemaChangeError
from lakesync.core.types import ColumnSpec, arrow_field
from lakesync.core.types.widening import widens
from lakesync.events.envelope import SchemaChangeEvent
from lakesync.stream.decode import AddedColumn

#: SQL type names sqlglot renders differently from information_schema's DATA_TYPE.
_TYPE_ALIASES = {"boolean": ("tinyint", "tinyint(1)"), "bool": ("tinyint", "tinyint(1)")}
#: The value MySQL gives existing rows for a NOT NULL column added without a DEFAULT, by Arrow type family.
_IMPLICIT_DEFAULTS = ((pa.types.is_integer, "0"), (pa.types.is_floating, "0"), (pa.types.is_decimal, "0"),
                      (pa.types.is_string, ""), (pa.types.is_large_string, ""))
#: The types an added column's default is written into older rows for (others stop the table: a default is
#: copied only where the conversion of MySQL's text is known to be exact).
_FILLABLE = (pa.types.is_signed_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_string,
             pa.types.is_large_string, pa.types.is_date32)


@dataclass
class SchemaAction:
    """What to do to one table: columns to add and fill, columns to make nullable, or why it must stop.

    ``fill`` maps a new column to the value MySQL gave the rows that existed at the DDL, typed as the column
    (the sink writes it into the Delta rows whose position is before the DDL's; each writer renders it in its
    own way, so a value is never SQL text one engine parses differently from the other).
    """

    add: list[pa.Field] = field(default_factory=list)
    fill: dict[str, pa.Scalar] = field(default_factory=dict)
    nullable: list[str] = field(default_factory=list)
    #: columns to widen in place (Delta's type widening), each with its new type
    widen: list[pa.Field] = field(default_factory=list)
    stop_reason: str | None = None
    #: the table still exists on the source in a new shape, so a re-load brings Delta back to it
    #: (the stream does that itself when ``stream.reload_on_schema_change`` is on)
    reload: bool = False


def resnapshot_note(pipeline: str, table: str) -> str:
    """What a stopped table's message says to do: the command that re-loads it (the stream then resumes it
    from the new load by itself)."""
    return f"re-run the full load for this table: `lakesync snapshot --pipeline {pipeline} --tables {table}`"


def columns_added_in_events(table: str, added: list[AddedColumn], *, pipeline: str) -> SchemaAction:
    """Pure: the action for columns that appeared in Debezium's events of ``table`` (``added``, from
    :meth:`lakesync.stream.decode.TableChanges.added_columns`): the table is re-loaded (or stopped with the
    command that re-loads it) at the first event carrying one.

    Never in place: Debezium's schema does not say what the rows that existed got. Measured with Debezium 3.5's
    MariaDB connector: ``INT NULL`` (NULL in every existing row) and ``INT DEFAULT (1+1)`` (2 in every row)
    arrive with the same field schema, ``{"type": "int32", "optional": true}``; a ``DATETIME(6) DEFAULT
    CURRENT_TIMESTAMP(6)`` arrives with the default 0; a ``VARCHAR DEFAULT 'it''s'`` with the default
    ``"it''s"``. Adding the column with NULL or Debezium's default would leave Delta different from the source
    for every row that existed, so the table is loaded again instead (docs/debezium.md)."""
    columns = ", ".join(f"{c.name!r} ({c.event_type})" for c in added)
    first = min(c.first_position for c in added)
    return SchemaAction(
        stop_reason=f"column(s) {columns} appeared in Debezium's events of {table} at {first}: a column added at "
                    "the source. Debezium's event schema does not say what the existing rows got (a column added "
                    "with no default and one whose default is an expression look the same), so Delta can't "
                    f"follow it in place; {resnapshot_note(pipeline, table)}",
        reload=True)


def new_snapshot_in_events(table: str, first_read: str, *, pipeline: str) -> SchemaAction:
    """Pure: the action for Debezium snapshot reads of ``table`` positioned after its load (``first_read``, the
    first one's position key): the table is re-loaded (or stopped with the command that re-loads it) there.

    Debezium snapshots again when it starts without offsets (``snapshot.mode=initial`` after its offsets were
    lost, or a connector killed before it first flushed them). The snapshot carries the rows that exist, but a
    row deleted after the last change Debezium delivered and before that snapshot has no event at all (seen in
    tests/integration/test_debezium_stream_e2e.py: the connector SIGKILLed before its first offset flush).
    Only a load of the table knows which rows are gone."""
    return SchemaAction(
        stop_reason=f"Debezium took a new snapshot of {table} (its reads start at {first_read}, after the table's "
                    "load): the connector started without offsets, so rows deleted while it was down or before it "
                    f"delivered them have no delete event; {resnapshot_note(pipeline, table)}",
        reload=True)


def default_value(arrow_type: pa.DataType, text: str) -> pa.Scalar | None:
    """``text`` (a MySQL literal default, unquoted) as a value of ``arrow_type``, or None when the type is not
    one defaults are copied for or the value does not convert exactly (the table is then re-loaded instead of
    guessed)."""
    if not any(is_type(arrow_type) for is_type in _FILLABLE):
        return None
    try:
        return pa.array([text]).cast(arrow_type)[0]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _fill_value(change: dict, new_field: pa.Field) -> tuple[pa.Scalar | None, str | None]:
    """(the value for the existing rows or None, reason to stop instead)."""
    default = change.get("default") or {}
    if "expression" in default:
        return None, f"column {new_field.name!r} was added with the default {default['expression']}"
    text = default.get("value")
    if text is None and change.get("not_null"):
        text = next((value for test, value in _IMPLICIT_DEFAULTS if test(new_field.type)), None)
        if text is None:
            return None, f"column {new_field.name!r} was added NOT NULL without a default"
    if text is None:
        return None, None
    value = default_value(new_field.type, text)
    if value is None:
        return None, f"column {new_field.name!r} was added with the default {text!r}"
    return value, None


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


def plan_schema_change(event: SchemaChangeEvent, current: pa.Schema, *, pipeline: str,
                       replaced: bool = False, keeps_history: bool = False, widen_in_place: bool = False
                       ) -> SchemaAction:
    """Pure: the action one schema event asks of a table whose Delta schema is ``current``.

    ``replaced`` says the same statement renamed another table to this one's name (an online schema change
    tool's swap): the table exists with a new shape, so a re-load brings it back. ``keeps_history`` says the
    table is a change log (``append_log``): a column it has already is never filled again. ``widen_in_place``
    says the table's writer can widen a column's type (delta-spark); without it a type change re-loads.
    """
    command = resnapshot_note(pipeline, event.table)
    what = f"{event.kind.replace('_', ' ')} on the source ({event.ddl.strip()[:200]!r} at {event.position})"
    if replaced:
        return SchemaAction(stop_reason=f"{what}: another table took its place (an online schema change "
                                        f"tool's swap) with a shape Delta cannot follow in place; {command}",
                            reload=True)
    if event.kind in ("drop_table", "rename_table"):
        # a re-load is tried: the table may be back already (re-created, renamed back, or swapped in by a
        # tool whose two renames the stream saw in different batches); if not, the load fails and it stops
        return SchemaAction(stop_reason=f"{what}: the table no longer exists there; Delta keeps its last state. "
                                        f"If it is created again, {command}", reload=True)
    if event.kind == "unknown":
        reasons = "; ".join(str(c.get("reason")) for c in event.changes if c.get("reason")) or "unreadable"
        return SchemaAction(stop_reason=f"a DDL statement lakesync cannot interpret ({reasons}: "
                                        f"{event.ddl.strip()[:200]!r} at {event.position}); {command}", reload=True)
    if event.kind != "alter_table":
        return SchemaAction(stop_reason=f"{what}; {command}", reload=True)
    action = SchemaAction()
    names = set(current.names)
    for change in event.changes:
        kind = change.get("change")
        column = str(change.get("column") or "")  # empty for table-level clauses (primary_key)
        stop = None
        if kind == "add":
            new_field = arrow_field(column_spec_from_ddl(column, change.get("type") or "")).with_nullable(True)
            value, stop = _fill_value(change, new_field)
            if column not in names:
                action.add.append(new_field)
            elif new_field.type != current.field(column).type:
                stop = (f"column {column!r} was added again as {change.get('type')} ({new_field.type}), which the "
                        "Delta table cannot follow in place")
            elif change.get("if_not_exists") or keeps_history:
                # IF NOT EXISTS changed nothing where the source has the column, and Delta can't tell that case
                # from a column dropped before (it keeps dropped columns); a change log keeps the values it logged
                value = None
            elif value is None and stop is None:
                # in Delta already: a replayed DDL whose batch died before its fill, or a column dropped and added
                # again (Delta kept its old values); MySQL gave every existing row the default, or NULL
                value = pa.scalar(None, new_field.type)
            if value is not None and stop is None:
                action.fill[column] = value
        elif kind == "drop" and column in names and not current.field(column).nullable:
            action.nullable.append(column)
        elif kind == "modify" and column in names:
            wanted = arrow_field(column_spec_from_ddl(column, change.get("type") or "")).type
            if wanted != current.field(column).type:
                # to UNSIGNED: a non-strict sql_mode clamps negative values to 0 with no row events, so Delta's
                # rows would keep values the source no longer has; that change re-loads
                unsigned = "unsigned" in str(change.get("type") or "").lower()
                if widen_in_place and not unsigned and widens(current.field(column).type, wanted):
                    action.widen.append(pa.field(column, wanted))
                else:
                    stop = (f"column {column!r} changed type to {change.get('type')} ({wanted}), which the Delta "
                            "table cannot follow in place")
            if stop is None and not current.field(column).nullable and not change.get("not_null"):
                action.nullable.append(column)
        elif kind == "primary_key":
            stop = f"the primary key was changed ({event.ddl.strip()[:200]}); rows merged by the old key would be wrong"
        elif kind == "rename":
            stop = f"column {column!r} was renamed to {change.get('new_column')!r}"
        if stop:
            return SchemaAction(stop_reason=f"{stop}; {command}", reload=True)
    return action
