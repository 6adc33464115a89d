"""Source positions: the total order that makes the Delta sink exactly-once.

Every change lakesync moves carries a :class:`SourcePosition`. The sink applies a change to a key only if
its position is greater than the one stored for that key, so replays, duplicates and the overlap between
the full load and the stream change nothing.

Order is ``(binlog file index, event end offset, row index)``:

* ``offset`` is the *end* offset of the binlog event (``log_pos`` in the event header), which is unique and
  increasing inside one file. For a snapshot it is the snapshot's position, i.e. where the next
  transaction will start, so every change committed after the snapshot has a strictly larger offset and
  every change committed before it a strictly smaller one.
* ``row`` is 0 for a snapshot row or a transaction boundary, and ``i + 1`` for the i-th row of a rows
  event, so rows of one event stay in order and all sort after the boundary at the same offset.

The GTID travels with the position for people and for Debezium compatibility, but it does not take part
in the order: on one server the binlog coordinates are already total, and they are what the relay resumes
from. (After a failover to another server the coordinates change; re-run the full load, see
``docs/operations.md``.)

Positions are stored in Delta and in Kafka headers as :meth:`SourcePosition.key`, a fixed-width string
whose lexicographic order is the position order, so delta-rs MERGE predicates and Kafka seeks can compare
them without parsing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache, total_ordering
from typing import Any

from lakesync.core.errors import ConfigError

#: Width of each field of :meth:`SourcePosition.key`. Binlog files are numbered up to 999999 by the server;
#: offsets fit in 4 GiB (``max_binlog_size`` is at most 1 GiB); a rows event holds far fewer rows than 10^6.
_FILE_DIGITS, _OFFSET_DIGITS, _ROW_DIGITS = 8, 12, 6
_KEY_RE = re.compile(rf"^(\d{{{_FILE_DIGITS}}})\.(\d{{{_OFFSET_DIGITS}}})\.(\d{{{_ROW_DIGITS}}})$")
_TOKEN_RE = re.compile(r"^(?P<file>[^:\s]+\.\d+):(?P<offset>\d+)(?::(?P<row>\d+))?$")
_FILE_INDEX_RE = re.compile(r"\.(\d+)$")


@lru_cache(maxsize=1024)
def binlog_file_index(file_name: str) -> int:
    """The number at the end of a binlog file name (``mysql-bin.000042`` -> 42); cached, as every position
    the relay makes checks its file name (a handful of names, millions of positions)."""
    match = _FILE_INDEX_RE.search(file_name)
    if not match:
        raise ConfigError(
            f"{file_name!r} is not a binlog file name",
            hint="binlog files are named like 'binlog.000042' (see SHOW BINARY LOGS)",
        )
    return int(match.group(1))


@total_ordering
@dataclass(frozen=True)
class SourcePosition:
    """Where a change (or a snapshot) sits in the source's binlog.

    ``file`` is the binlog file name as the server reports it; ``gtid`` is the GTID (MariaDB
    ``domain-server-seq`` or MySQL ``uuid:n``) of the transaction, when GTIDs are on.
    """

    file: str
    offset: int
    row: int = 0
    gtid: str | None = None

    def __post_init__(self) -> None:
        binlog_file_index(self.file)  # validates the name
        if self.offset < 0 or self.row < 0:
            raise ConfigError(f"binlog offset and row must be >= 0, got {self.offset}:{self.row}")

    @property
    def file_index(self) -> int:
        return binlog_file_index(self.file)

    def _order(self) -> tuple[int, int, int]:
        return (self.file_index, self.offset, self.row)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SourcePosition):
            return NotImplemented
        return self._order() == other._order()

    def __lt__(self, other: SourcePosition) -> bool:
        return self._order() < other._order()

    def __hash__(self) -> int:
        return hash(self._order())

    def key(self) -> str:
        """The fixed-width, lexicographically ordered form stored in Delta and in Kafka headers."""
        return f"{self.file_index:0{_FILE_DIGITS}d}.{self.offset:0{_OFFSET_DIGITS}d}.{self.row:0{_ROW_DIGITS}d}"

    def token(self) -> str:
        """The human form users pass on the command line: ``binlog.000042:1234`` (``:row`` when not 0)."""
        return f"{self.file}:{self.offset}" + (f":{self.row}" if self.row else "")

    def with_row(self, row: int) -> SourcePosition:
        return SourcePosition(self.file, self.offset, row, self.gtid)

    def __str__(self) -> str:
        return self.token() + (f" (gtid {self.gtid})" if self.gtid else "")

    def to_json(self) -> dict[str, Any]:
        """The JSON form every lakesync state file uses (``key`` is for people and is ignored on reading)."""
        return {"file": self.file, "offset": self.offset, "row": self.row, "gtid": self.gtid, "key": self.key()}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> SourcePosition:
        """Read :meth:`to_json` back (older files without ``row`` read as row 0)."""
        return cls(str(document["file"]), int(document["offset"]), int(document.get("row") or 0),
                   document.get("gtid") or None)

    @classmethod
    def parse(cls, text: str) -> SourcePosition:
        """Parse the command-line form ``FILE:OFFSET[:ROW]``."""
        match = _TOKEN_RE.match(text.strip())
        if not match:
            raise ConfigError(
                f"cannot read the binlog position {text!r}",
                hint="write it as FILE:OFFSET, for example binlog.000003:1542 (see SHOW MASTER STATUS)",
            )
        return cls(match["file"], int(match["offset"]), int(match["row"] or 0))

    @classmethod
    def from_key(cls, key: str, *, file_stem: str) -> SourcePosition:
        """Rebuild a position from :meth:`key`; ``file_stem`` is the binlog base name (``binlog``)."""
        match = _KEY_RE.match(key)
        if not match:
            raise ConfigError(f"{key!r} is not a lakesync position key")
        file_index, offset, row = (int(part) for part in match.groups())
        return cls(f"{file_stem}.{file_index:06d}", offset, row)


def file_stem(file_name: str) -> str:
    """The base name of a binlog file (``binlog.000042`` -> ``binlog``)."""
    return _FILE_INDEX_RE.sub("", file_name)


#: The smallest key: sorts before every real position. Used for "no position stored yet".
MIN_KEY = "0" * _FILE_DIGITS + "." + "0" * _OFFSET_DIGITS + "." + "0" * _ROW_DIGITS
