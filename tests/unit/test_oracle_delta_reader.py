"""The oracle's Delta reader refuses what it cannot read rightly, and decodes the formats the protocol defines:
a deletion vector's file name from its Z85 UUID, its framing and checksum, the type changes it accepts, and
which log files count (a multi-part checkpoint missing a part and log compaction files do not).

Its agreement with delta-spark on real tables is tests/integration/test_oracle.py's to prove."""

from __future__ import annotations

import datetime as dt
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import write_deltalake
from pyroaring import BitMap64

from tests.oracle import read_delta
from tests.oracle_deletion_vectors import PORTABLE_MAGIC, _uuid_relative_path, deleted_rows
from tests.oracle_delta_log import _newest_complete_checkpoint
from tests.oracle_delta_types import arrow_schema, read_as

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
