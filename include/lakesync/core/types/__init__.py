"""MySQL/MariaDB column types -> Arrow -> Delta, and the JSON form of values in change events.

docs/types.md holds the map as one table; this package is its implementation, one job per module:

* :mod:`.columns`: :class:`ColumnSpec`, one source column;
* :mod:`.type_map`: per type, the Arrow type and the driver-value -> JSON conversions (both drivers:
  PyMySQL for the snapshot, python-mysql-replication for binlog rows);
* :mod:`.rows`: whole driver rows -> JSON form (events) or Arrow (the full load);
* :mod:`.json_arrow`: JSON form -> Arrow, from the Arrow type alone (the stream's sink);
* :mod:`.source_sql`: the snapshot session's setup (the lossless SELECT: :mod:`lakesync.source.queries`);
* :mod:`.widening`: which type changes Delta widens in place (``INT`` -> ``BIGINT``, a larger ``DECIMAL``, ...).

Three value forms meet here: what the drivers return, the JSON form carried in change events (ints as
numbers, DECIMAL as exact strings, temporal values as ISO strings, TIME as signed microseconds, binary
data as base64), and the Python value Arrow accepts for the stored type. Import from this package; the
modules are its implementation.
"""

from lakesync.core.types.columns import ColumnSpec
from lakesync.core.types.json_arrow import arrow_table_from_json_rows, arrow_value_from_json
from lakesync.core.types.rows import (
    arrow_table_from_db_rows,
    binlog_row_json_converter,
    binlog_value_converter,
    db_row_json_converter,
    json_converter,
    json_row_from_binlog,
    json_row_from_db,
    json_value,
)
from lakesync.core.types.source_sql import SNAPSHOT_TIME_ZONE_SQL
from lakesync.core.types.type_map import MAX_DECIMAL_PRECISION, arrow_field, arrow_schema

__all__ = [
    "MAX_DECIMAL_PRECISION",
    "SNAPSHOT_TIME_ZONE_SQL",
    "ColumnSpec",
    "arrow_field",
    "arrow_schema",
    "arrow_table_from_db_rows",
    "arrow_table_from_json_rows",
    "arrow_value_from_json",
    "binlog_row_json_converter",
    "binlog_value_converter",
    "db_row_json_converter",
    "json_converter",
    "json_row_from_binlog",
    "json_row_from_db",
    "json_value",
]
