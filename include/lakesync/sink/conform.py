"""Fitting a batch of changes to a Delta table's schema, and guarding lakesync's reserved column names."""

from __future__ import annotations

import pyarrow as pa

from lakesync.core.errors import SchemaChangeError, SinkError
from lakesync.core.table_layout import META_COLUMNS

_RESERVED_PREFIX = "_lakesync_"


def check_not_reserved(names: list[str]) -> None:
    reserved = [name for name in names if name.startswith(_RESERVED_PREFIX)]
    if reserved:
        raise SchemaChangeError(f"column name(s) {reserved} collide with lakesync's own columns")


def conform(changes: pa.Table, target: pa.Schema, *, fill: bool = False) -> pa.Table:
    """``changes`` cast to the target's column types, in target order; ``fill`` adds missing columns as nulls.

    A column the target lacks is a schema change the caller must apply first (:meth:`DeltaSink.add_columns`).
    """
    unknown = [name for name in changes.column_names if name not in target.names]
    if unknown:
        raise SchemaChangeError(
            f"the changes carry column(s) {unknown} the Delta table does not have",
            hint="apply the ADD COLUMN first (DeltaSink.add_columns), then the changes",
        )
    columns, fields = [], []
    for field in target:
        if field.name in changes.column_names:
            column = changes.column(field.name)
        elif fill or field.name in META_COLUMNS:
            column = pa.nulls(changes.num_rows, field.type)
        else:
            continue
        try:
            columns.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SinkError(f"column {field.name!r} does not fit the table's type {field.type}: {exc}") from exc
        fields.append(field.with_nullable(True))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))

