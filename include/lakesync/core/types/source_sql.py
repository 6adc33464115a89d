"""Reading the source losslessly over the text protocol: the snapshot session's setup and SELECT list."""

from __future__ import annotations

from collections.abc import Iterable

from lakesync.core.types.columns import ColumnSpec

#: The statement a snapshot session must run so that TIMESTAMP values arrive in UTC, as in the binlog.
SNAPSHOT_TIME_ZONE_SQL = "SET time_zone = '+00:00'"


def quote_identifier(name: str) -> str:
    """A MySQL identifier in backticks, embedded backticks doubled."""
    return "`" + name.replace("`", "``") + "`"


def snapshot_select_expression(column: ColumnSpec) -> str:
    """The SELECT expression that reads the column without loss over the text protocol.

    The server prints FLOAT with 6 significant digits (1.2345678 -> '1.23457'), so FLOAT is read as DOUBLE,
    which prints the stored single-precision value exactly, as the binlog has it."""
    quoted = quote_identifier(column.name)
    if column.data_type.lower() == "float":
        return f"CAST({quoted} AS DOUBLE) AS {quoted}"
    return quoted


def snapshot_select_list(columns: Iterable[ColumnSpec]) -> str:
    return ", ".join(snapshot_select_expression(column) for column in columns)
