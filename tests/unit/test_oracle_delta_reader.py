"""The oracle's Delta reader refuses what it cannot read rightly, and decodes the formats the protocol defines:
a deletion vector's file name from its Z85 UUID, its framing and checksum, the type changes it accepts,
which log files count (a multi-part checkpoint missing a part and log compaction files do not), where a
column is in a data file under column mapping (physical name, or field id whatever the file calls it) and
partition values as their columns' types.

Its agreement with delta-spark on real tables is tests/integration/test_oracle.py's to prove."""

from __future__ import annotations

import datetime as dt
import json
import math
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from pyroaring import BitMap64

from tests.oracle import read_delta
from tests.oracle_deletion_vectors import PORTABLE_MAGIC, _uuid_relative_path, deleted_rows
from tests.oracle_delta_columns import PARQUET_FIELD_ID, partition_columns_of, stored_names, table_columns
from tests.oracle_delta_log import _newest_complete_checkpoint
from tests.oracle_delta_types import arrow_schema, partition_value, read_as

LOCAL = pafs.LocalFileSystem()


def test_a_uuid_relative_deletion_vector_is_found_where_the_protocols_example_says() -> None:
    # PROTOCOL.md, "JSON Example 1 — On Disk with Relative Path (with Random Prefix)"
    assert (_uuid_relative_path("s3://mytable", "ab^-aqEH.-t@S}K{vb[*k^")
            == "s3://mytable/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin")


def _dv_file(path: Path, rows: list[int], *, checksum_delta: int = 0) -> dict[str, object]:
    """A DV file holding one DV at offset 1, framed as the protocol says; its 'p' descriptor."""
    bitmap = PORTABLE_MAGIC.to_bytes(4, "little") + BitMap64(rows).serialize()
    crc = (zlib.crc32(bitmap) + checksum_delta) % 2**32
    path.write_bytes(b"\x01" + len(bitmap).to_bytes(4, "big") + bitmap + crc.to_bytes(4, "big"))
    return {"storageType": "p", "pathOrInlineDv": path.as_uri(), "offset": 1, "sizeInBytes": len(bitmap),
            "cardinality": len(rows)}


def test_a_deletion_vector_file_gives_its_row_indexes(tmp_path: Path) -> None:
    rows = [0, 5, 70_000, 2**32 + 1]  # two 16-bit containers and a second 32-bit bucket
    assert deleted_rows(_dv_file(tmp_path / "dv.bin", rows), LOCAL, str(tmp_path)).tolist() == rows


def test_a_deletion_vector_whose_checksum_does_not_match_is_an_error(tmp_path: Path) -> None:
    descriptor = _dv_file(tmp_path / "dv.bin", [1, 2], checksum_delta=1)
    with pytest.raises(AssertionError, match="checksum"):
        deleted_rows(descriptor, LOCAL, str(tmp_path))


def test_a_deletion_vector_holding_other_rows_than_its_cardinality_is_an_error(tmp_path: Path) -> None:
    descriptor = {**_dv_file(tmp_path / "dv.bin", [1, 2]), "cardinality": 3}
    with pytest.raises(AssertionError, match="descriptor says 3"):
        deleted_rows(descriptor, LOCAL, str(tmp_path))


@pytest.mark.parametrize(("stored", "values", "target"), [
    (pa.int32(), [2_147_483_647, None], pa.int64()),
    (pa.decimal128(10, 2), [None, -12.5], pa.decimal128(12, 4)),
    (pa.float32(), [1.1], pa.float64()),
    (pa.date32(), [dt.date(1000, 1, 1)], pa.timestamp("us")),
    (pa.timestamp("us"), [dt.datetime(2999, 12, 31, 23, 59, 59, 999999)], pa.timestamp("us", tz="UTC")),
])
def test_a_file_written_before_a_widening_is_read_as_the_wider_type(stored, values, target) -> None:
    column = pa.chunked_array([pa.array(values).cast(stored)])
    read = read_as(column, pa.field("c", target), "f.parquet")
    assert read.type == target
    assert read.cast(stored).equals(column)  # nothing lost


@pytest.mark.parametrize(("stored", "target"), [
    (pa.int64(), pa.int32()), (pa.float64(), pa.float32()), (pa.decimal128(10, 2), pa.decimal128(10, 4)),
    (pa.string(), pa.int64()), (pa.timestamp("us", tz="UTC"), pa.timestamp("us")), (pa.int64(), pa.float64()),
])
def test_a_file_holding_a_type_its_schema_does_not_allow_is_an_error_not_cast(stored, target) -> None:
    with pytest.raises(AssertionError, match="is not"):
        read_as(pa.chunked_array([pa.array([], stored)]), pa.field("c", target), "f.parquet")


@pytest.mark.parametrize(("old", "new"), [("long", "integer"), ("decimal(10,2)", "decimal(10,4)"),
                                          ("long", "decimal(19,0)"), ("string", "long")])
def test_a_type_change_the_protocol_does_not_list_is_refused(old: str, new: str) -> None:
    change = {"fromType": old, "toType": new}
    schema = {"fields": [{"name": "c", "type": new, "nullable": True, "metadata": {"delta.typeChanges": [change]}}]}
    with pytest.raises(AssertionError, match="type change"):
        arrow_schema(schema)


def test_a_multi_part_checkpoint_missing_a_part_is_not_used() -> None:
    names = ["00000000000000000010.checkpoint.parquet",
             "00000000000000000020.checkpoint.0000000001.0000000002.parquet"]
    assert _newest_complete_checkpoint(names) == (10, ["00000000000000000010.checkpoint.parquet"])
    part_two = "00000000000000000020.checkpoint.0000000002.0000000002.parquet"
    assert _newest_complete_checkpoint([*names, part_two]) == (20, [names[1], part_two])


def test_log_compaction_files_are_not_read_as_commits(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path), pa.table({"id": pa.array([1, 2], pa.int64())}))
    # a compaction of versions 0..1 would look like a commit of version 0 to a reader that took 20 digits
    (tmp_path / "_delta_log" / "00000000000000000000.00000000000000000001.compacted.json").write_text("not json\n")
    assert read_delta(str(tmp_path)) == (["id"], [{"id": 1}, {"id": 2}])


# -- column mapping and partition values ----------------------------------------------------------------------
def _field(name: str, delta_type: str = "long", *, physical: str | None = None, column_id: int | None = None
           ) -> dict[str, Any]:
    """A field of a schema string; with ``physical``, the column mapping metadata delta-spark gives it."""
    metadata = {} if physical is None else {"delta.columnMapping.physicalName": physical,
                                             "delta.columnMapping.id": column_id}
    return {"name": name, "type": delta_type, "nullable": True, "metadata": metadata}


def _file_schema(*columns: tuple[str, int | None]) -> pa.Schema:
    """A data file's schema: (name, Parquet field id or None) per column."""
    return pa.schema([pa.field(name, pa.int64(), metadata=None if field_id is None
                               else {PARQUET_FIELD_ID: str(field_id).encode()}) for name, field_id in columns])


def test_in_name_mode_columns_are_found_by_physical_name_and_dropped_or_later_ones_left_out() -> None:
    # upgraded from no mapping ("a", "b" kept as physical names), then b renamed "a" after a was renamed "x",
    # "gone" dropped (still in the file) and "new" added after the file was written
    schema = {"fields": [_field("x", physical="a", column_id=1), _field("a", physical="b", column_id=2),
                         _field("new", physical="col-1", column_id=4)]}
    columns = table_columns(schema, {"delta.columnMapping.mode": "name"}, [])
    file_schema = _file_schema(("a", None), ("b", None), ("gone", None))
    assert stored_names(columns, file_schema, "f") == {"x": "a", "a": "b"}


def test_in_id_mode_columns_are_found_by_field_id_whatever_the_file_calls_them() -> None:
    schema = {"fields": [_field("x", physical="p1", column_id=1), _field("y", physical="p2", column_id=2),
                         _field("z", physical="p3", column_id=3)]}
    columns = table_columns(schema, {"delta.columnMapping.mode": "id"}, [])
    file_schema = _file_schema(("p2", 1), ("p1", 2), ("x", 7))
    assert stored_names(columns, file_schema, "f") == {"x": "p2", "y": "p1"}
    with pytest.raises(AssertionError, match="without a Parquet field id"):
        stored_names(columns, _file_schema(("p1", None), ("p2", 2)), "f")


def test_without_mapping_columns_are_found_by_their_names_and_partition_columns_not_in_the_file() -> None:
    schema = {"fields": [_field("x"), _field("part"), _field("y")]}
    columns = table_columns(schema, {}, ["part"])
    assert stored_names(columns, _file_schema(("x", None), ("part", None)), "f") == {"x": "x"}


@pytest.mark.parametrize(("configuration", "fields", "partitions", "message"), [
    ({"delta.columnMapping.mode": "position"}, [_field("x")], [], "mode 'position'"),
    ({"delta.columnMapping.mode": "name"}, [_field("x")], [], "no 'delta.columnMapping.physicalName'"),
    ({}, [_field("x")], ["y"], "not in the schema"),
])
def test_a_mapping_or_partitioning_the_oracle_cannot_follow_is_refused(configuration, fields, partitions,
                                                                         message) -> None:
    with pytest.raises(AssertionError, match=message):
        table_columns({"fields": fields}, configuration, partitions)


@pytest.mark.parametrize(("text", "delta_type", "expected"), [
    ("a b=/%", "string", "a b=/%"), ("é\n", "binary", b"\xc3\xa9\n"),
    ("true", "boolean", True), ("false", "boolean", False), ("-128", "byte", -128),
    ("9223372036854775807", "long", 2**63 - 1), ("-0.1", "double", -0.1), ("-Infinity", "double", -math.inf),
    ("1.5", "float", 1.5), ("-12345678901234567.891", "decimal(20,3)", Decimal("-12345678901234567.891")),
    ("1.5", "decimal(10,2)", Decimal("1.50")), ("0001-01-01", "date", dt.date(1, 1, 1)),
    ("1900-01-01T00:00:00.500000Z", "timestamp", dt.datetime(1900, 1, 1, 0, 0, 0, 500000, tzinfo=dt.UTC)),
    ("2020-01-01 01:02:03", "timestamp", dt.datetime(2020, 1, 1, 1, 2, 3, tzinfo=dt.UTC)),
    ("9999-12-31 23:59:59.999999", "timestamp_ntz", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    (None, "integer", None), (None, "string", None), ("", "integer", None), ("", "date", None),
])
def test_a_partition_value_is_read_as_its_columns_type(text: str | None, delta_type: str, expected: Any) -> None:
    value = partition_value(text, delta_type, "c")
    assert value.type == arrow_schema({"fields": [_field("c", delta_type)]}).field("c").type
    assert value.as_py() == expected and type(value.as_py()) is type(expected)


@pytest.mark.parametrize("values", [{"p": "1"}, {"col-p": "1", "q": None}, {}],
                         ids=["logical-name", "extra-key", "missing-key"])
def test_partition_values_not_keyed_by_exactly_the_partition_columns_physical_names_are_an_error(values) -> None:
    columns = table_columns({"fields": [_field("p", physical="col-p", column_id=1), _field("x", physical="col-x",
                                                                                             column_id=2)]},
                            {"delta.columnMapping.mode": "name"}, ["p"])
    assert partition_columns_of(columns, {"col-p": "7"}, 2, "f")["p"].to_pylist() == [7, 7]
    with pytest.raises(AssertionError, match=r"partition values of f are keyed"):
        partition_columns_of(columns, values, 2, "f")


@pytest.mark.parametrize("delta_type", ["string", "binary"])
def test_an_empty_string_or_binary_partition_value_which_readers_read_differently_is_refused(delta_type) -> None:
    with pytest.raises(AssertionError, match="null by the protocol and empty by delta-spark's reader"):
        partition_value("", delta_type, "c")


def test_a_float_partition_value_may_be_nan() -> None:
    assert math.isnan(partition_value("NaN", "float", "c").as_py())


@pytest.mark.parametrize(("text", "delta_type"), [
    ("yes", "boolean"), ("True", "boolean"), ("1.5", "integer"), ("300", "byte"), (" 1", "long"),
    ("1.234", "decimal(10,2)"), ("NaN", "decimal(10,2)"), ("2020-13-01", "date"), ("2020-1-1", "date"),
    ("2020-01-01T00:00:00Z", "timestamp_ntz"), ("2020-01-01", "timestamp"), ("inf", "double"),
])
def test_partition_text_that_is_not_its_types_serialization_is_an_error(text: str, delta_type: str) -> None:
    with pytest.raises(AssertionError, match="serialization"):
        partition_value(text, delta_type, "c")


def _delta_table(root: Path, fields: list[dict[str, Any]], files: dict[str, tuple[pa.Table, dict[str, Any]]], *,
                 configuration: dict[str, str], partition_columns: tuple[str, ...] = ()) -> str:
    """A table of one commit, written by hand: data files (name -> rows, partition values) and the log."""
    (root / "_delta_log").mkdir(parents=True)
    metadata = {"id": "t", "format": {"provider": "parquet", "options": {}}, "configuration": configuration,
                "schemaString": json.dumps({"type": "struct", "fields": fields}),
                "partitionColumns": list(partition_columns)}
    actions = [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"],
                             "writerFeatures": ["columnMapping"]}}, {"metaData": metadata}]
    for name, (rows, values) in files.items():
        pq.write_table(rows, root / name)
        actions.append({"add": {"path": name, "partitionValues": values, "size": (root / name).stat().st_size,
                                "modificationTime": 0, "dataChange": True}})
    (root / "_delta_log" / f"{0:020d}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")
    return str(root)


def test_a_mapped_partitioned_table_reads_partition_values_from_the_log_not_the_file(tmp_path: Path) -> None:
    """The file's own copy of the partition column says otherwise: the log's value counts. The file also holds
    a column no field maps to (dropped) and lacks one (added later)."""
    fields = [_field("the id", physical="col-a", column_id=1),
              _field("p art", "date", physical="col-b", column_id=2),
              _field("later", "string", physical="col-c", column_id=3)]
    rows = pa.table({"col-a": pa.array([1, 2], pa.int64()), "col-b": pa.array([dt.date(1999, 1, 1)] * 2),
                     "col-dropped": pa.array([9, 9], pa.int64())})
    path = _delta_table(tmp_path / "t", fields, {"f.parquet": (rows, {"col-b": "2024-02-29"})},
                        configuration={"delta.columnMapping.mode": "name"}, partition_columns=("p art",))
    assert read_delta(path) == (["the id", "p art", "later"],
                                [{"the id": i, "p art": dt.date(2024, 2, 29), "later": None} for i in (1, 2)])
