"""MySQL/MariaDB column types -> Arrow -> Delta, and the JSON form of values in change events.

CONTRACT (other modules code against these names; the type-mapping work fills them in):

* :class:`ColumnSpec` describes one source column the way ``information_schema.COLUMNS`` (snapshot) or a
  binlog table-map event with ``binlog_row_metadata=FULL`` (relay) describes it.
* :func:`arrow_field` gives the Arrow field lakesync stores the column as (the Delta type follows from it).
* :func:`json_value` turns a value as PyMySQL or python-mysql-replication returns it into the JSON form
  carried in change events (see docs/events.md).
* :func:`arrow_value_from_json` turns that JSON form back into a Python value Arrow accepts for the
  column's Arrow type; it needs only the Arrow type, so the sink can decode with the Delta schema alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class ColumnSpec:
    """One source column.

    ``data_type`` is ``information_schema.COLUMNS.DATA_TYPE`` in lower case (``int``, ``decimal``,
    ``varchar``, ``enum``...); ``column_type`` is the full ``COLUMN_TYPE`` (``int(10) unsigned``,
    ``decimal(65,30)``, ``enum('a','b')``, ``datetime(6)``).
    """

    name: str
    data_type: str
    column_type: str
    nullable: bool = True
    charset: str | None = None
    enum_values: tuple[str, ...] = field(default=())


def arrow_field(column: ColumnSpec) -> pa.Field:
    raise NotImplementedError


def arrow_schema(columns: list[ColumnSpec]) -> pa.Schema:
    return pa.schema([arrow_field(column) for column in columns])


def json_value(column: ColumnSpec, value: Any) -> Any:
    raise NotImplementedError


def arrow_value_from_json(arrow_type: pa.DataType, value: Any) -> Any:
    raise NotImplementedError
