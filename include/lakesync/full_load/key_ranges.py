"""Key ranges as the load's state file keeps them (chunked mode), so that a resumed table reads exactly the
ranges of its first attempt."""

from __future__ import annotations

from typing import Any

from lakesync.source.table_reader import KeyRange


def range_to_json(key_range: KeyRange) -> dict[str, Any]:
    return {"chunk_id": key_range.chunk_id, "lower": _key_to_json(key_range.lower),
            "upper": _key_to_json(key_range.upper)}


def range_from_json(document: dict[str, Any]) -> KeyRange:
    return KeyRange(document["chunk_id"], _key_from_json(document["lower"]), _key_from_json(document["upper"]))


def _key_to_json(values: tuple[Any, ...] | None) -> list[Any] | None:
    """Key values as JSON: ints and strings as they are, anything else as its SQL literal text, which the
    server compares the same way (dates, decimals); bytes as hex."""
    if values is None:
        return None
    return [v if isinstance(v, int | str) else {"hex": v.hex()} if isinstance(v, bytes) else {"text": str(v)}
            for v in values]


def _key_from_json(values: list[Any] | None) -> tuple[Any, ...] | None:
    if values is None:
        return None
    return tuple(bytes.fromhex(v["hex"]) if isinstance(v, dict) and "hex" in v
                 else v["text"] if isinstance(v, dict) else v for v in values)
