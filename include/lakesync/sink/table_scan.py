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

import pyarrow as pa
from deltalake import DeltaTable

log = logging.getLogger(__name__)

#: Reader features of Delta's type widening (the preview name included), which delta-rs 1.6 can't scan.
TYPE_WIDENING_FEATURES = frozenset({"typeWidening", "typeWidening-preview"})


def delta_rs_scans(table: DeltaTable) -> bool:
    """Whether delta-rs can scan ``table``'s rows (it can't once a column was widened in place)."""
    return not TYPE_WIDENING_FEATURES & set(table.protocol().reader_features or [])


def scan_rows(table: DeltaTable, storage_options: dict[str, str] | None, *, columns: list[str] | None = None,
              predicate: str | None = None) -> pa.RecordBatchReader:
    """The rows of ``table`` (opened with ``storage_options``), ``columns`` only and those ``predicate`` selects,
    at the version ``table`` holds. Streams with delta-rs; a table delta-rs can't scan is read with Spark, whole."""
    if delta_rs_scans(table):
        return pa.RecordBatchReader.from_stream(table.scan(columns=columns, predicate=predicate))
    from pyspark.sql import functions as F

    from lakesync.sink.merge import quote
    from lakesync.sink.spark_writes import delta_spark_session
    from lakesync.spark.storage import spark_path

    log.debug("%s: read with Spark (delta-rs can't scan a table with widened column types)", table.table_uri)
    frame = (delta_spark_session(storage_options).read.format("delta")
             .option("versionAsOf", table.version()).load(spark_path(table.table_uri)))
    if predicate:
        frame = frame.filter(predicate)
    if columns is not None:
        frame = frame.select(*[F.col(quote(name)) for name in columns])
    return frame.toArrow().to_reader()
