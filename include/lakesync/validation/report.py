"""What a validation run found: per table a :class:`TableComparison`, per run a :class:`ValidationReport`.

Differing keys are kept as a sample of JSON-ready dicts (key values only, never whole rows): the report goes
to the terminal, to the Airflow log and into the validation-runs table (:mod:`lakesync.validation.store`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa

from lakesync.core.errors import ValidationMismatch

#: Differing keys kept per kind (missing, extra, different) and table.
SAMPLE_KEYS = 10


@dataclass
class TableComparison:
    """The result for one table. ``status`` is ``equal``, ``mismatch``, ``not_comparable`` or ``error``."""

    table: str
    source_rows: int
    delta_rows: int
    missing_in_delta: list[dict] = field(default_factory=list)
    extra_in_delta: list[dict] = field(default_factory=list)
    different: list[dict] = field(default_factory=list)
    mismatched_keys: int = 0
    comparable: bool = True
    note: str = ""
    semantics: str = "exactly_once"
    key_columns: list[str] = field(default_factory=list)
    chunks: int = 0
    chunks_mismatched: int = 0
    rounds: int = 0
    #: keys whose Delta row is newer than the last snapshot: changed while we looked, not a mismatch
    in_flight_keys: int = 0
    #: the last re-check ran after ``settle_timeout_s`` without the stream reaching the snapshot position
    stream_behind: bool = False
    position: str | None = None
    error: str | None = None
    started_at: str | None = None
    finished_at: str | None = None

    @property
    def matches(self) -> bool:
        """No key differs. Row counts are the first pass's: on a busy source they may differ by keys that
        were in flight, which the key comparison settles (a duplicated or missing key is a differing key)."""
        if self.error:
            return False
        return not self.comparable or self.mismatched_keys == 0

    @property
    def status(self) -> str:
        if self.error:
            return "error"
        if not self.comparable:
            return "not_comparable"
        return "equal" if self.matches else "mismatch"

    def sample(self) -> dict[str, list[dict]]:
        return {"missing_in_delta": self.missing_in_delta, "extra_in_delta": self.extra_in_delta,
                "different": self.different}

    def describe(self) -> str:
        if self.error:
            return f"{self.table}: error: {self.error}"
        if not self.comparable:
            return f"{self.table}: {self.note}"
        if self.matches:
            return f"{self.table}: identical ({self.source_rows} rows)"
        parts = [f"{label}: {keys[:3]}" for label, keys in self.sample().items() if keys]
        counts = f"source {self.source_rows} rows, Delta {self.delta_rows} rows"
        detail = "; ".join(parts) or self.note
        behind = ("; the stream's applied position had not reached the source snapshot when last compared "
                  "(normal for a table with no later changes)") if self.stream_behind else ""
        return f"{self.table}: {self.mismatched_keys} keys differ ({counts}; {detail}{behind})"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status, "matches": self.matches}


@dataclass
class ValidationReport:
    run_id: str
    pipeline: str
    started_at: str
    finished_at: str | None = None
    tables: list[TableComparison] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return all(table.matches for table in self.tables)

    @property
    def failed(self) -> list[TableComparison]:
        return [table for table in self.tables if not table.matches]

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "pipeline": self.pipeline, "started_at": self.started_at,
                "finished_at": self.finished_at, "matches": self.matches,
                "tables": [table.to_json() for table in self.tables]}

    def raise_for_mismatch(self) -> None:
        """Raise :class:`ValidationMismatch` (exit code 3) naming every table that differs or failed."""
        if self.matches:
            return
        lines = "\n".join("  " + table.describe() for table in self.failed)
        raise ValidationMismatch(
            f"source and Delta differ in pipeline {self.pipeline} (run {self.run_id}):\n{lines}",
            hint="check the stream (`lakesync status`); if a table stays different, re-run its full load",
        )


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and int(value.as_tuple().exponent) >= 0 else str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    return value


def key_dicts(keys: pa.Table, limit: int) -> list[dict]:
    return [{name: _jsonable(value) for name, value in row.items()} for row in keys.slice(0, limit).to_pylist()]
