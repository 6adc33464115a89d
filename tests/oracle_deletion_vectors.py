"""Deletion vectors, read by the oracle from the bytes the Delta protocol describes (PROTOCOL.md, "Deletion
Vectors" and "Deletion Vector Format"), with no Delta library: a bug in a writer's or a reader's DV code must
not be able to make the oracle agree with it.

A logical file of a Delta table is a data file plus, optionally, a deletion vector (DV): the set of 0-based
row indexes within that file that are deleted. The descriptor in the log (``add.deletionVector``) says where
the set is:

- ``storageType 'i'``: inline, ``pathOrInlineDv`` is the serialized set in Z85 (padded to 4 bytes; the
  first ``sizeInBytes`` bytes count);
- ``'u'``: a file under the table root, ``<prefix>/deletion_vector_<uuid>.bin``, where ``pathOrInlineDv`` is
  an optional random prefix followed by the UUID's 16 bytes in Z85 (always 20 characters);
- ``'p'``: a file at an absolute, URL-encoded path.

A DV file is a version byte (1), then per DV, at the descriptor's ``offset``: the size (4 bytes, big-endian),
the serialized set, and the CRC-32 of the set (4 bytes, big-endian). The serialized set is the magic number
1681511377 (4 bytes, little-endian) followed by a 64-bit Roaring bitmap in the "portable" format of the
Roaring spec (RoaringFormatSpec, "Extention for 64-bit implementations"). That bitmap is decoded by
pyroaring's ``BitMap64.deserialize`` (CRoaring's reader of exactly that format); everything around it is
decoded here.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow.fs as pafs
from pyroaring import BitMap64

from tests.oracle_delta_log import dv_unique_id, table_path

Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {char: value for value, char in enumerate(Z85_ALPHABET)}
ENCODED_UUID_LENGTH = 20
DV_FILE_VERSION = 1
#: RoaringBitmapArray's "portable" serialization, the one Delta writes (the "native" one, ...376, it never does).
PORTABLE_MAGIC = 1681511377


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ's Base85) as Delta uses it: 5 characters per big-endian 4-byte block."""
    if len(text) % 5:
        raise AssertionError(f"oracle: deletion vector text {text!r} is not Z85 (length not a multiple of 5)")
    out = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for char in text[start:start + 5]:
            if char not in _Z85_VALUE:
                raise AssertionError(f"oracle: deletion vector text {text!r} is not Z85 ({char!r})")
            value = value * 85 + _Z85_VALUE[char]
        out += value.to_bytes(4, "big")
    return bytes(out)


def deleted_rows(descriptor: Mapping[str, Any], fs: pafs.FileSystem, root: str) -> np.ndarray:
    """The sorted row indexes a DV of the table at ``root`` (a path on ``fs``) deletes.

    The count must equal the descriptor's ``cardinality``: a DV read wrongly is an error, not fewer deletes."""
    data = _serialized_bitmap(descriptor, fs, root)
    magic = int.from_bytes(data[:4], "little")
    if magic != PORTABLE_MAGIC:
        raise AssertionError(f"oracle: deletion vector {dv_unique_id(descriptor)} has magic number {magic}, "
                             f"not {PORTABLE_MAGIC} (RoaringBitmapArray, portable format)")
    bitmap = BitMap64.deserialize(data[4:])
    rows = np.fromiter(bitmap, dtype=np.int64, count=len(bitmap))
    if len(rows) != descriptor["cardinality"]:
        raise AssertionError(f"oracle: deletion vector {dv_unique_id(descriptor)} holds {len(rows)} rows, "
                             f"its descriptor says {descriptor['cardinality']}")
    return rows


def _serialized_bitmap(descriptor: Mapping[str, Any], fs: pafs.FileSystem, root: str) -> bytes:
    kind, size = descriptor["storageType"], descriptor["sizeInBytes"]
    if kind == "i":
        return z85_decode(descriptor["pathOrInlineDv"])[:size]
    if kind == "u":
        path = _uuid_relative_path(root, descriptor["pathOrInlineDv"])
    elif kind == "p":
        path = table_path(root, descriptor["pathOrInlineDv"])
    else:
        raise AssertionError(f"oracle: deletion vector storage type {kind!r} is not in the protocol")
    offset = descriptor.get("offset") or 0
    with fs.open_input_file(path) as file:
        version = file.read(1)
        if version != bytes([DV_FILE_VERSION]):
            raise AssertionError(f"oracle: {path} is not a version-1 deletion vector file ({version!r})")
        file.seek(offset)
        stored_size = int.from_bytes(file.read(4), "big")
        data = file.read(stored_size)
        checksum = int.from_bytes(file.read(4), "big")
    if stored_size != size or len(data) != size:
        raise AssertionError(f"oracle: {path}@{offset} holds a {stored_size}-byte deletion vector "
                             f"({len(data)} read), the descriptor says {size}")
    if zlib.crc32(data) != checksum:
        raise AssertionError(f"oracle: {path}@{offset}: deletion vector checksum mismatch")
    return data


def _uuid_relative_path(root: str, encoded: str) -> str:
    prefix, encoded_uuid = encoded[:-ENCODED_UUID_LENGTH], encoded[-ENCODED_UUID_LENGTH:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded_uuid))}.bin"
    return "/".join(part for part in (root, prefix, name) if part)

