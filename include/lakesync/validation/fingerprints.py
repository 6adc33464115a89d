"""Row fingerprints: a 64-bit number per row that depends on that row's values and on nothing else.

Both sides of a comparison are first brought to the source's Arrow schema (:func:`conform`: Delta hands back
view types, for one), so a column has the same Arrow type on both sides and each type has one encoding:

| Arrow type (docs/types.md) | what is hashed |
|---|---|
| integers, ``date32``, ``timestamp`` (with or without zone) | the value's bits, as stored (microseconds since the epoch, days) |
| ``float32``/``float64`` | the IEEE bits, with ``-0.0`` taken as ``0.0`` (equal numbers, one fingerprint) |
| ``decimal128(p,s)`` | the 128-bit unscaled integer (the scale is the column's, equal on both sides) |
| ``string``, ``binary`` (and their large/view forms) | every byte of the value (UTF-8 for text): NUL characters, 4-byte characters and trailing spaces count, and ``''`` is a value |
| NULL, any type | a marker no value hashes to (so NULL, ``''``, ``0`` and the text ``'None'`` all differ) |

Each value is hashed on its own (SipHash-2-4 over the bytes of a string, a 64-bit mixer over fixed-width
bits), never through a table of the distinct values of a batch: pandas' grouping of strings cuts them at the
first NUL, which made a row's fingerprint depend on the rows hashed with it (``'a\\0b'`` took the hash of
``'a\\0c'`` when that came first). The column hashes are combined in column order, so swapping two columns'
values changes the fingerprint. Everything is vectorised over Arrow buffers and NumPy arrays.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pandas.util import hash_array

#: What a NULL hashes to, in every column (a value hashing to it is a 2^-64 chance).
_NULL = np.uint64(0x9E3779B97F4A7C15)
_COMBINE = np.uint64(0x100000001B3)


def conform(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """``table``'s columns named in ``schema``, cast to its types (Delta hands back view types, e.g.); a
    column ``table`` lacks is all NULL (callers check for missing source columns first)."""
    names = set(table.schema.names)
    return pa.Table.from_arrays(
        [pc.cast(table[f.name], f.type) if f.name in names else pa.nulls(table.num_rows, f.type)
         for f in schema], names=schema.names)


def row_hashes(table: pa.Table) -> np.ndarray:
    """A 64-bit fingerprint per row over all columns (see the module docstring for what it covers)."""
    rows = np.zeros(table.num_rows, dtype=np.uint64)
    for column in table.columns:
        rows = _mix(rows * _COMBINE + column_hashes(column))
    return rows


def column_hashes(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One 64-bit hash per value of ``column``, NULL included, independent of the other values."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        array = array.cast(pa.binary())
        kind = array.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind) \
            or pa.types.is_fixed_size_binary(kind):
        values = array.to_numpy(zero_copy_only=False)  # bytes objects; pandas hashes each one's every byte
        hashes = hash_array(values, categorize=False).astype(np.uint64, copy=False)
    elif pa.types.is_decimal128(kind):
        halves = np.frombuffer(memoryview(_data_buffer(array)), dtype=np.uint64)[2 * array.offset:2 * (array.offset + len(array))]
        halves = halves.reshape(-1, 2)
        hashes = _mix(halves[:, 0] ^ _mix(halves[:, 1]))
    elif pa.types.is_boolean(kind):
        hashes = _mix(array.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint64))
    elif pa.types.is_floating(kind) and kind.bit_width in (32, 64):
        # -0.0 and 0.0 are the same number (MySQL compares them equal): one fingerprint
        hashes = _mix(_fixed_width_bits(pc.if_else(pc.equal(array, pa.scalar(0.0, kind)), pa.scalar(0.0, kind), array)))
    elif kind.bit_width in (8, 16, 32, 64) and (pa.types.is_integer(kind) or pa.types.is_temporal(kind)):
        hashes = _mix(_fixed_width_bits(array))
    else:
        raise TypeError(f"no fingerprint for Arrow type {kind}: add it to lakesync.validation.fingerprints")
    if array.null_count:
        hashes = np.where(array.is_null().to_numpy(zero_copy_only=False), _NULL, hashes)
    return hashes


def _fixed_width_bits(array: pa.Array) -> np.ndarray:
    """The stored bits of each value, widened to 64 bits (sign-extended for signed integers)."""
    width = array.type.bit_width
    if array.buffers()[1] is None:  # an all-NULL array may have no data buffer
        return np.zeros(len(array), dtype=np.uint64)
    raw = np.frombuffer(memoryview(_data_buffer(array)), dtype=np.dtype(f"<u{width // 8}"))[array.offset:array.offset + len(array)]
    if pa.types.is_signed_integer(array.type) or pa.types.is_temporal(array.type):
        return raw.view(np.dtype(f"<i{width // 8}")).astype(np.int64).view(np.uint64)
    return raw.astype(np.uint64)


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: every input bit reaches every output bit."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64, copy=True)
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def _data_buffer(array: pa.Array) -> pa.Buffer:
    """The values buffer of a fixed-width array (callers handle the all-NULL array that has none)."""
    buffer = array.buffers()[1]
    assert buffer is not None, "a fixed-width array with values has a data buffer"
    return buffer
