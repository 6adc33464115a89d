"""Whole rows from the drivers -> lakesync's JSON form (change events) or Arrow (the full load).

Each converter is built once per table from the columns' :class:`~lakesync.core.types.type_map.ColumnPlan`
and called per row. The binlog converters apply the binlog-only repairs (YEAR 0000, negative TIME with a
fraction, the empty SET the decoder returns as None).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import pyarrow as pa

from lakesync.core.types.columns import ColumnSpec
from lakesync.core.types.type_map import arrow_schema, column_plan, identity


def json_converter(column: ColumnSpec, *, binlog: bool = False) -> Callable[[Any], Any]:
    """A function from a driver value of this column to its JSON form, built once (NULL stays None)."""
    plan = column_plan(column)
    convert = plan.to_json_binlog if binlog else plan.to_json

    def to_json(value: Any) -> Any:
        return None if value is None else convert(value)

    return to_json


def binlog_value_converter(column: ColumnSpec) -> Callable[[Any], Any] | None:
    """The binlog-value -> JSON conversion of a column, or None when the JSON form *is* the decoder's
    value (integers), so the relay can skip the call. Never called with None."""
    convert = column_plan(column).to_json_binlog
    return None if convert is identity else convert


def json_value(column: ColumnSpec, value: Any, *, binlog: bool = False) -> Any:
    """The JSON form of ``value`` in change events (docs/types.md has the form per type).

    ``value`` is what PyMySQL returns for the column, or, with ``binlog=True``, what
    python-mysql-replication returns from a rows event; the flag matters for TIME only, whose negative
    fractional values the binlog decoder gets wrong. For whole binlog rows use :func:`json_row_from_binlog`,
    which also tells an empty SET from NULL."""
    if value is None:
        return None
    plan = column_plan(column)
    return plan.to_json_binlog(value) if binlog else plan.to_json(value)


@lru_cache(maxsize=1024)
def _row_converters(
    columns: tuple[ColumnSpec, ...], binlog: bool
) -> tuple[tuple[str, Callable[[Any], Any], bool], ...]:
    """Per column of a row: its name, its JSON converter and whether it is a SET; built once per table."""
    return tuple(
        (
            column.name,
            column_plan(column).to_json_binlog if binlog else column_plan(column).to_json,
            column.data_type.lower() == "set",
        )
        for column in columns
    )


def binlog_row_json_converter(
    columns: Sequence[ColumnSpec],
) -> Callable[[Mapping[str, Any], Mapping[str, str] | None], dict[str, Any]]:
    """A function from a binlog row image (``row["values"]``, ``row["none_sources"]`` of
    python-mysql-replication) to its JSON form, keyed by column name in column order. Build it once per
    table and call it per row.

    The decoder returns None for an empty SET and says so in ``none_sources``; that becomes ``''``."""
    plan = _row_converters(tuple(columns), True)

    def convert_row(values: Mapping[str, Any], none_sources: Mapping[str, str] | None = None) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for name, convert, is_set in plan:
            value = values.get(name)
            if value is not None:
                row[name] = convert(value)
            elif is_set and none_sources and none_sources.get(name) == "empty set":
                row[name] = ""
            else:
                row[name] = None
        return row

    return convert_row


def db_row_json_converter(columns: Sequence[ColumnSpec]) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """A function from a PyMySQL row tuple (columns in ``columns`` order) to its JSON form, keyed by
    column name. Build it once per table and call it per row."""
    plan = [(name, convert) for name, convert, _ in _row_converters(tuple(columns), False)]

    def convert_row(row: Sequence[Any]) -> dict[str, Any]:
        return {
            name: None if value is None else convert(value)
            for (name, convert), value in zip(plan, row, strict=True)
        }

    return convert_row


def json_row_from_binlog(
    columns: Sequence[ColumnSpec],
    values: Mapping[str, Any],
    none_sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One binlog row image in JSON form; see :func:`binlog_row_json_converter` for many rows."""
    return binlog_row_json_converter(columns)(values, none_sources)


def json_row_from_db(columns: Sequence[ColumnSpec], row: Sequence[Any]) -> dict[str, Any]:
    """One PyMySQL row tuple in JSON form; see :func:`db_row_json_converter` for many rows."""
    return db_row_json_converter(columns)(row)


def arrow_table_from_db_rows(columns: Sequence[ColumnSpec], rows: Sequence[Sequence[Any]]) -> pa.Table:
    """PyMySQL row tuples (``SELECT`` in column order, see :func:`lakesync.source.queries.select_rows`) -> an Arrow table."""
    schema = arrow_schema(columns)
    if not rows:
        return schema.empty_table()
    by_column = list(zip(*rows, strict=True))
    arrays = [
        column_plan(column).db_array(values, f.type)
        for column, values, f in zip(columns, by_column, schema, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)
