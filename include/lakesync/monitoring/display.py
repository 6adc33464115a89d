"""How ``lakesync status`` and the status page show a source position: one format, the one users type.

Positions travel as :meth:`lakesync.core.positions.SourcePosition.key` (fixed width, sortable: what Delta,
Kafka headers and the status JSON hold); people read and pass ``FILE:OFFSET[:ROW]``
(:meth:`~lakesync.core.positions.SourcePosition.token`, what ``--from-position`` takes and what the relay
logs). A key carries the file's number but not its base name, so the base name comes from a position the
status holds in full (the full load's or the relay's).
"""

from __future__ import annotations

from typing import Any

from lakesync.core.errors import ConfigError
from lakesync.core.positions import SourcePosition, file_stem


def status_file_stem(status: dict[str, Any]) -> str | None:
    """The binlog base name (``binlog``) from a full position in the status, if there is one."""
    for token in ((status.get("full_load") or {}).get("position_token"),
                  (status.get("relay") or {}).get("position_token")):
        if token:
            return file_stem(SourcePosition.parse(token).file)
    return None


def position_text(key: str | None, stem: str | None) -> str:
    """``binlog.000003:1542`` for a position key; ``-`` for none. Without a known base name (no full load and
    no relay progress yet) the key is shown as it is rather than guessed."""
    if not key:
        return "-"
    if stem is None:
        return key
    try:
        return SourcePosition.from_key(key, file_stem=stem).token()
    except ConfigError:
        return key
