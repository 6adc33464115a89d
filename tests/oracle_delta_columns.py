"""Where each column of a Delta table is found for one logical file: column mapping (PROTOCOL.md, "Column
Mapping") and partition columns, worked out by the oracle itself.

Without column mapping (``delta.columnMapping.mode`` absent or ``none``) a column is stored under its own name.
With it, every field of the schema carries ``delta.columnMapping.physicalName`` and ``delta.columnMapping.id``
in its metadata, and the name readers see (the logical name) is free to change:

- mode ``name``: a data file's columns are found by physical name. delta-spark makes up ``col-<uuid>`` names
  for new columns; a table upgraded from ``none`` keeps each existing column's name as its physical name, so
  files written before the upgrade (which have no Parquet field ids) still resolve;
- mode ``id``: by Parquet field id (``delta.columnMapping.id``; pyarrow shows it as ``PARQUET:field_id``),
  whatever the file calls the column;
- RENAME COLUMN changes the logical name only. DROP COLUMN removes the field: its data stays in older files
  under a physical name no field has any more, and is ignored. ADD COLUMN (also of a name dropped before)
  gets a new physical name and id: files written before it don't have it, and read it as null.

A partition column is not read from the data file (delta-spark 4.4 writes it there too, but what Delta
readers see is the log's value: an empty binary, say, is null in the log and ``b''`` in the file). Its
value is the file's ``add.partitionValues`` entry, keyed by physical name under column mapping, in the
protocol's "Partition Value Serialization" (:func:`tests.oracle_delta_types.partition_value`; null when the
entry is null or empty). The entries must be exactly the partition columns, by physical name: an entry missing,
or one under another name (a writer keying by logical name, say), is an error, not a null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tests.oracle_delta_types import partition_value

MODES = ("none", "name", "id")
PHYSICAL_NAME = "delta.columnMapping.physicalName"
COLUMN_ID = "delta.columnMapping.id"
#: Where pyarrow puts a Parquet field id in an Arrow field's metadata.
PARQUET_FIELD_ID = b"PARQUET:field_id"


@dataclass(frozen=True)
class TableColumn:
    """One column of the table's schema: the name readers see and where it is stored."""

    name: str  # logical
    delta_type: Any
    physical_name: str  # its name in data files and in ``partitionValues``
    field_id: int | None  # its Parquet field id, set in mode ``id`` only: then files are read by it
    partition: bool


def mapping_mode(configuration: Mapping[str, str]) -> str:
    """The table's column mapping mode; a mode the protocol doesn't define is refused, not read as ``none``."""
    mode = configuration.get("delta.columnMapping.mode", "none")
    if mode not in MODES:
        raise AssertionError(f"oracle: column mapping mode {mode!r} is not one the oracle reads ({MODES})")
    return mode


def table_columns(schema: Mapping[str, Any], configuration: Mapping[str, str],
                  partition_columns: list[str]) -> list[TableColumn]:
    """The schema's columns (``metaData.schemaString``, parsed), in order, with where each is stored."""
    mode = mapping_mode(configuration)
    names = [f["name"] for f in schema["fields"]]
    unknown = [name for name in partition_columns if name not in names]
    if unknown:
        raise AssertionError(f"oracle: partition columns {unknown} are not in the schema {names}")
    return [_table_column(f, mode, partition=f["name"] in partition_columns) for f in schema["fields"]]


def _table_column(field: Mapping[str, Any], mode: str, *, partition: bool) -> TableColumn:
    name, metadata = field["name"], field.get("metadata") or {}
    if mode == "none":
        return TableColumn(name, field["type"], name, None, partition)
    if PHYSICAL_NAME not in metadata or COLUMN_ID not in metadata:
        raise AssertionError(f"oracle: column {name!r} of a table mapping columns by {mode} has no "
                             f"{PHYSICAL_NAME!r} or {COLUMN_ID!r} in its metadata: {metadata}")
    field_id = int(metadata[COLUMN_ID]) if mode == "id" else None
    return TableColumn(name, field["type"], str(metadata[PHYSICAL_NAME]), field_id, partition)


def stored_names(columns: list[TableColumn], file_schema: pa.Schema, file: str) -> dict[str, str]:
    """For the non-partition columns ``file`` holds: logical name -> its column's name in the file.

    Columns the file doesn't hold (added after it was written) are left out; so are the file's columns no
    table column maps to (dropped ones)."""
    data_columns = [c for c in columns if not c.partition]
    if any(c.field_id is not None for c in data_columns):
        by_id = _names_by_field_id(file_schema, file)
        return {c.name: by_id[c.field_id] for c in data_columns if c.field_id in by_id}
    present = set(file_schema.names)
    return {c.name: c.physical_name for c in data_columns if c.physical_name in present}


def _names_by_field_id(file_schema: pa.Schema, file: str) -> dict[int | None, str]:
    """Field id -> column name in the file; every column must have an id of its own (delta-spark gives each)."""
    ids = {f.name: (f.metadata or {}).get(PARQUET_FIELD_ID) for f in file_schema}
    missing = [name for name, field_id in ids.items() if field_id is None]
    if missing:
        raise AssertionError(f"oracle: {file} has columns without a Parquet field id ({missing}); the table maps "
                             "columns by id")
    by_id = {int(field_id): name for name, field_id in ids.items()}
    if len(by_id) != len(ids):
        raise AssertionError(f"oracle: {file} has several columns with one Parquet field id: {ids}")
    return by_id


def partition_columns_of(columns: list[TableColumn], values: Mapping[str, str | None], rows: int,
                         file: str) -> dict[str, pa.Array]:
    """The partition columns of a file of ``rows`` rows: each its ``partitionValues`` entry, repeated."""
    keys = {c.physical_name for c in columns if c.partition}
    if set(values) != keys:
        raise AssertionError(f"oracle: the log's partition values of {file} are keyed {sorted(values)}, the "
                             f"partition columns' physical names are {sorted(keys)}")
    result = {}
    for c in columns:
        if c.partition:
            try:
                scalar = partition_value(values[c.physical_name], c.delta_type, c.name)
            except AssertionError as exc:
                raise AssertionError(f"{exc} (in the log's entry for {file})") from None
            result[c.name] = pa.repeat(scalar, rows)
    return result
