"""Which column type changes Delta's type widening applies in place (``ALTER COLUMN c TYPE t``, no rewrite).

Type widening (Delta 4.0 and later, the reader-writer table feature ``typeWidening``) lets a column take a
wider type with a metadata-only commit: files written before keep the narrower type, and readers convert
their values as they read them. Delta allows a change only when every value of the old type is exactly a
value of the new one (PROTOCOL.md, "Type Widening"; docs.delta.io, "Delta type widening"):

* integers to a wider integer (``byte`` -> ``short`` -> ``integer`` -> ``long``);
* ``byte``, ``short``, ``integer`` to ``double``; ``float`` to ``double``;
* integers to a decimal with room for every value: at least 10 integer digits for ``byte``, ``short`` and
  ``integer``, 20 for ``long``;
* ``decimal(p, s)`` to ``decimal(p + k1, s + k2)`` with ``k1 >= k2 >= 0`` (the integer digits never shrink);
* ``date`` to ``timestamp_ntz``.

A change to any other type (a narrower one, a number to text, DECIMAL above 38 digits, which lakesync keeps
as text) is not a widening: lakesync re-loads the table instead (docs/schema_changes.md).
"""

from __future__ import annotations

import pyarrow as pa

#: Integer digits an integer type's values need as a decimal, by bit width (Delta's minimum targets).
_INTEGER_DIGITS = {8: 10, 16: 10, 32: 10, 64: 20}
#: Which integer widths may widen to ``double`` (every value exact; a ``long`` isn't).
_INTEGERS_TO_DOUBLE = {8, 16, 32}


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether Delta's type widening takes a column of Arrow type ``old`` (as lakesync's type map gives it) to
    ``new`` in place. An unchanged type is not a widening."""
    if old == new:
        return False
    if pa.types.is_signed_integer(old):
        if pa.types.is_signed_integer(new):
            return new.bit_width > old.bit_width
        if pa.types.is_float64(new):
            return old.bit_width in _INTEGERS_TO_DOUBLE
        if pa.types.is_decimal128(new):
            return new.precision - new.scale >= _INTEGER_DIGITS[old.bit_width]
        return False
    if pa.types.is_float32(old):
        return pa.types.is_float64(new)
    if pa.types.is_decimal128(old) and pa.types.is_decimal128(new):
        return new.precision - old.precision >= new.scale - old.scale >= 0
    if pa.types.is_date32(old):
        return pa.types.is_timestamp(new) and new.tz is None
    return False
