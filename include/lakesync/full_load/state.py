"""The full load's progress file, ``<pipeline state dir>/full_load.json``: what is loaded, from where.

It does two jobs. The relay reads ``position`` from it to know where the stream must start (never later
than the load's position, see ARCHITECTURE.md). And it makes the load resumable: a table marked ``done`` is
not read again, and a chunked table that was interrupted keeps the chunks it already wrote.

Format (JSON)::

    {"position": {"file": "binlog.000003", "offset": 1542, "row": 0, "gtid": "0-1-17", "key": "00000003.000000001542.000000"},
     "tables": {"transactions": {"status": "done", "rows": 1000000, "delta_version": 0,
                                 "chunks_done": [...], "position_key": "..."}},
     "mode": "consistent", "started_at": "2026-...Z", "finished_at": "2026-...Z"}

``position`` is the smallest position any table was loaded at (the snapshot's, in consistent mode); each
table's own ``position_key`` is what its rows carry (in chunked mode, its smallest chunk position).
Every write goes to a temporary file that is then renamed over the old one, so a crash never leaves a
half-written file behind.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from lakesync.core.errors import ConfigError
from lakesync.core.positions import SourcePosition
from lakesync.core.state_files import write_json_atomically

STATE_FILE_NAME = "full_load.json"
TableStatus = Literal["in_progress", "done"]


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


position_to_json = SourcePosition.to_json
position_from_json = SourcePosition.from_json


@dataclass
class ChunkDone:
    """A chunk written as a Parquet file inside the table folder, not yet (or already) committed."""

    chunk_id: str
    path: str  # relative to the table root, as the Delta add action names it
    size: int
    rows: int
    position_key: str
    position: dict[str, Any]
    stats: str


@dataclass
class TableLoad:
    status: TableStatus = "in_progress"
    rows: int = 0
    delta_version: int | None = None
    position_key: str | None = None
    position: dict[str, Any] | None = None
    mode: str | None = None
    seconds: float | None = None
    #: The key the table was loaded with (empty for a table without one): the stream merges by it.
    key_columns: list[str] = field(default_factory=list)
    #: chunked mode: the key ranges planned at the first attempt (kept, so a resumed load cuts the same way)
    ranges: list[dict[str, Any]] = field(default_factory=list)
    chunks_done: list[ChunkDone] = field(default_factory=list)

    def chunk_ids(self) -> set[str]:
        return {chunk.chunk_id for chunk in self.chunks_done}


@dataclass
class LoadState:
    """The whole file; :meth:`save` writes it atomically."""

    path: Path
    position: SourcePosition | None = None
    tables: dict[str, TableLoad] = field(default_factory=dict)
    mode: str | None = None
    started_at: str | None = None
    finished_at: str | None = None

    @classmethod
    def for_pipeline_dir(cls, pipeline_state_dir: Path) -> LoadState:
        return cls.load(Path(pipeline_state_dir) / STATE_FILE_NAME)

    @classmethod
    def load(cls, path: Path) -> LoadState:
        """The state at ``path``, or an empty one when there is none yet."""
        if not path.exists():
            return cls(path=path)
        try:
            document = json.loads(path.read_text())
            tables = {
                name: TableLoad(**{**entry, "chunks_done": [ChunkDone(**c) for c in entry.get("chunks_done", [])]})
                for name, entry in document.get("tables", {}).items()
            }
            position = position_from_json(document["position"]) if document.get("position") else None
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(
                f"the full-load state file {path} is damaged ({exc})",
                hint="delete it to start the full load from scratch (all tables are read again)",
            ) from exc
        return cls(path=path, position=position, tables=tables, mode=document.get("mode"),
                   started_at=document.get("started_at"), finished_at=document.get("finished_at"))

    def table(self, name: str) -> TableLoad:
        return self.tables.setdefault(name, TableLoad())

    def is_done(self, name: str) -> bool:
        entry = self.tables.get(name)
        return entry is not None and entry.status == "done"

    def record_position(self, position: SourcePosition) -> None:
        """Keep the smallest position seen: the stream must start at or before every table's position."""
        if self.position is None or position < self.position:
            self.position = position

    def forget(self, names: list[str]) -> None:
        """Drop these tables' progress (they will be loaded again); the position becomes the smallest of
        the tables that stay done."""
        for name in names:
            self.tables.pop(name, None)
        positions = [position_from_json(entry.position) for entry in self.tables.values()
                     if entry.status == "done" and entry.position]
        self.position = min(positions) if positions else None

    def to_json(self) -> dict[str, Any]:
        return {
            "position": position_to_json(self.position) if self.position else None,
            "tables": {name: asdict(entry) for name, entry in self.tables.items()},
            "mode": self.mode,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }

    def save(self) -> None:
        write_json_atomically(self.path, self.to_json())
