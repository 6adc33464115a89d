"""Reading a Delta table's rows: delta-rs's own scan, or Spark where delta-rs can't read the table's data.

delta-rs 1.6 opens a table whose protocol lists Delta's type widening (``typeWidening``) and reads its log
(version, schema, app transactions, history, the files and their statistics), but refuses to scan its rows:
"Unsupported table features required: [TypeWidening]" (measured with deltalake 1.6.6, also through
``QueryBuilder``). lakesync widens columns in place with delta-spark (docs/schema_changes.md), so every scan
lakesync makes goes through :func:`scan_rows`: delta-rs's scan where it can read the table (fast, no JVM),
else a Spark read of the same table version, which converts the values of files written before the widening
to the column's new type. In a process without Spark (``lakesync validate``) the first such read starts a
local session.

``predicate`` is SQL text in the form both engines read: backticked column names, comparisons with number,
``'text'`` and ``TIMESTAMP '...'`` literals, ``AND``. Callers build it from positions, integer keys and
timestamps only: Spark reads a backslash in a string literal as an escape, DataFusion does not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable

from lakesync.core.errors import SinkError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: Reader features of Delta's type widening (the preview name included), which delta-rs 1.6 can't scan.
TYPE_WIDENING_FEATURES = frozenset({"typeWidening", "typeWidening-preview"})


def delta_rs_scans(table: DeltaTable) -> bool:
    """Whether delta-rs can scan ``table``'s rows (it can't once a column was widened in place)."""
    return not TYPE_WIDENING_FEATURES & set(table.protocol().reader_features or [])


def scan_rows(table: DeltaTable, storage_options: dict[str, str] | None, *, columns: list[str] | None = None,
              predicate: str | None = None) -> pa.RecordBatchReader:
    """The rows of ``table`` (opened with ``storage_options``), ``columns`` only and those ``predicate`` selects,
    at the version ``table`` holds. Streams with delta-rs; a table delta-rs can't scan is read with Spark, whole
    (on the driver: a caller that needs only some keys' rows uses :func:`spark_rows_with_keys`)."""
    if delta_rs_scans(table):
        return pa.RecordBatchReader.from_stream(table.scan(columns=columns, predicate=predicate))
    from pyspark.sql import functions as F

    from lakesync.sink.merge import quote

    def read(frame: DataFrame) -> pa.Table:
        if predicate:
            frame = frame.filter(predicate)
        if columns is not None:
            frame = frame.select(*[F.col(quote(name)) for name in columns])
        return frame.toArrow()

    return _with_spark(table, storage_options, read, "its rows").to_reader()


def spark_rows_with_keys(table: DeltaTable, storage_options: dict[str, str] | None, *, columns: list[str],
                         keys: pa.Table) -> pa.Table:
    """The rows (``columns``) of a table delta-rs can't scan whose values in ``keys``' columns are one of
    ``keys``' rows: a semi-join in Spark, so only the matches reach the driver (the tombstones of a batch's keys)."""
    from pyspark.sql import functions as F

    from lakesync.sink.merge import quote

    def read(frame: DataFrame) -> pa.Table:
        wanted = frame.sparkSession.createDataFrame(keys)
        return (frame.select(*[F.col(quote(name)) for name in columns])
                .join(wanted, on=keys.column_names, how="left_semi").toArrow())

    return _with_spark(table, storage_options, read, "the rows of some keys")


def _with_spark(table: DeltaTable, storage_options: dict[str, str] | None, read: Callable[[DataFrame], pa.Table],
                what: str) -> pa.Table:
    """``read`` of the Spark frame of ``table`` at the version it holds; a failure is a :class:`SinkError` with
    Spark's line that says why (the JVM trace stays in the log)."""
    from lakesync.sink.spark_writes import delta_spark_session
    from lakesync.spark.errors import spark_error_line
    from lakesync.spark.storage import spark_path

    log.debug("%s: read with Spark (delta-rs can't scan a table with widened column types)", table.table_uri)
    try:
        frame = (delta_spark_session(storage_options).read.format("delta")
                 .option("versionAsOf", table.version()).load(spark_path(table.table_uri)))
        return read(frame)
    except Exception as exc:
        raise SinkError(f"could not read {what} of {table.table_uri} with Spark: {spark_error_line(exc)}",
                        hint="the table has a widened column, which only Spark reads here; check the message, "
                             "then run the step again") from exc
