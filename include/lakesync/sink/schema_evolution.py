"""Schema evolution of a Delta table beyond adding columns, for DDL the stream follows in place.

Both changes are what MySQL itself did to the rows, so Delta keeps holding what the source holds:
a dropped or relaxed NOT NULL column must accept NULL from new rows, and a column added with a default
holds that default in every row that existed at the DDL (docs/schema_changes.md).
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import DeltaError

from lakesync.core.errors import SchemaChangeError, SinkError
from lakesync.core.table_layout import POS
from lakesync.sink.merge import quote
from lakesync.sink.writer import commit_with_retry, with_attempt


def not_null_columns(table: DeltaTable, names: list[str], *, keep: list[str]) -> list[str]:
    """Those of ``names`` that are NOT NULL in the table and must accept NULL now (a dropped source column, or
    one whose NOT NULL was lifted: new rows carry NULL there, and a NOT NULL Delta column would refuse them,
    failing the batch); the key columns in ``keep`` stay NOT NULL. Empty when a replayed DDL finds it done."""
    current = {field.name: field for field in table.schema().fields}
    return [name for name in names if name in current and not current[name].nullable and name not in keep]


def make_nullable(table: DeltaTable, names: list[str], *, uri: str) -> None:
    """Let ``names`` hold NULL, with delta-rs (metadata only)."""
    for name in names:
        try:
            table.alter.drop_column_not_null(name)
        except DeltaError as exc:
            raise SchemaChangeError(f"could not make column {name!r} of {uri} nullable: {exc}") from exc


#: delta-rs SQL's names of the Arrow types whose values go into an UPDATE as ``CAST('text' AS type)``.
_SQL_TYPES = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
              pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.date32(): "DATE"}


def sql_literal(value: pa.Scalar) -> str:
    """``value`` as a delta-rs (DataFusion) SQL expression of its type: text quoted with doubled quotes (no
    backslash escapes), a decimal in plain notation (DataFusion refuses ``0E-10``) with its precision and
    scale, other types cast from their text, NULL as NULL (the UPDATE gives it the column's type, whatever it is)."""
    if not value.is_valid:
        return "NULL"
    if pa.types.is_decimal(value.type):
        return f"CAST({_quoted(format(value.as_py(), 'f'))} AS DECIMAL({value.type.precision}, {value.type.scale}))"
    if pa.types.is_string(value.type) or pa.types.is_large_string(value.type):
        return _quoted(value.as_py())
    if value.type in _SQL_TYPES:
        return f"CAST({_quoted(str(value.as_py()))} AS {_SQL_TYPES[value.type]})"
    raise SchemaChangeError(f"no delta-rs SQL literal for a default of type {value.type}")


def _quoted(text: str) -> str:
    """``text`` as a SQL string literal: quotes doubled, no backslash escapes (DataFusion's rule)."""
    return "'" + text.replace("'", "''") + "'"


def fill_columns(table: DeltaTable, values: dict[str, pa.Scalar], *, before_position: str, uri: str) -> None:
    """Write ``values`` (column -> value of its type) into every row whose last change is older than
    ``before_position``: the rows that existed when the source added these columns with a default, which the
    source filled with it. Rows changed after the DDL carry their own value. Idempotent (a replayed batch
    sets the same values again, so a commit conflict is retried on the newest version)."""
    if not values:
        return
    commit = CommitProperties(custom_metadata={"lakesync.operation": "fill_added_columns"})

    def step(attempt: int) -> None:
        if attempt > 1:
            table.update_incremental()
        table.update(updates={quote(name): sql_literal(value) for name, value in values.items()},
                     predicate=f"{quote(POS)} < '{before_position}'", commit_properties=with_attempt(commit, attempt))

    try:
        commit_with_retry(step, what="filling added columns", table_uri=uri)
    except SinkError:  # lost the commit race every time: the batch fails and is retried whole
        raise
    except Exception as exc:  # DeltaError, or DataFusion's plain Exception for an expression it refuses
        raise SchemaChangeError(f"could not fill the added column(s) {sorted(values)} of {uri}: {exc}") from exc
