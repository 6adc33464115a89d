"""Which source type changes Delta's type widening follows in place (pure rules, no servers).

The expected answers are Delta's documented rules (docs.delta.io, "Delta type widening", Delta 4.0 and above),
written out here as cases rather than derived from the code's tables."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakesync.core.types import ColumnSpec, arrow_field
from lakesync.core.types.widening import widens


def mysql(column_type: str) -> pa.DataType:
    """The Arrow type lakesync's type map gives a MySQL column type (``INT UNSIGNED``, ``DECIMAL(10,2)``)."""
    data_type = column_type.split("(")[0].split()[0].lower()
    return arrow_field(ColumnSpec(name="c", data_type=data_type, column_type=column_type.lower(), nullable=True)).type


@pytest.mark.parametrize(("old", "new"), [
    ("TINYINT", "SMALLINT"), ("TINYINT", "INT"), ("TINYINT", "BIGINT"), ("SMALLINT", "INT"), ("SMALLINT", "BIGINT"),
    ("INT", "BIGINT"), ("MEDIUMINT", "BIGINT"), ("INT", "INT UNSIGNED"), ("SMALLINT UNSIGNED", "BIGINT"),
    ("INT", "DOUBLE"), ("SMALLINT", "DOUBLE"), ("FLOAT", "DOUBLE"),
    ("INT", "DECIMAL(10,0)"), ("INT", "DECIMAL(12,2)"), ("BIGINT", "BIGINT UNSIGNED"), ("BIGINT", "DECIMAL(22,2)"),
    ("DECIMAL(10,2)", "DECIMAL(12,2)"), ("DECIMAL(10,2)", "DECIMAL(14,4)"), ("DECIMAL(10,2)", "DECIMAL(11,3)"),
    ("DECIMAL(10,2)", "DECIMAL(38,2)"),
    ("BIGINT UNSIGNED", "DECIMAL(30,0)"), ("DATE", "DATETIME"), ("DATE", "DATETIME(6)"),
])
def test_a_change_delta_widens_in_place(old, new):
    assert widens(mysql(old), mysql(new))


@pytest.mark.parametrize(("old", "new"), [
    ("INT", "INT"), ("VARCHAR(10)", "VARCHAR(200)"),          # not a type change in Delta at all
    ("BIGINT", "INT"), ("DOUBLE", "FLOAT"), ("DECIMAL(12,2)", "DECIMAL(10,2)"),   # narrower
    ("DECIMAL(10,2)", "DECIMAL(11,4)"),                       # scale grows more than precision: digits lost
    ("DECIMAL(10,2)", "DECIMAL(10,4)"), ("DECIMAL(10,4)", "DECIMAL(12,2)"),
    ("BIGINT", "DOUBLE"),                                     # a long is not exact as a double
    ("INT", "DECIMAL(9,0)"), ("INT", "DECIMAL(12,3)"), ("BIGINT", "DECIMAL(20,2)"),   # too few integer digits
    ("DECIMAL(38,2)", "DECIMAL(40,2)"),                       # above 38 digits lakesync keeps text
    ("INT", "VARCHAR(20)"), ("DATETIME", "DATE"), ("TIMESTAMP", "DATETIME"), ("DATE", "TIMESTAMP"),
    ("TIME", "DATETIME"),
])
def test_a_change_delta_does_not_widen_is_not_one(old, new):
    assert not widens(mysql(old), mysql(new))
