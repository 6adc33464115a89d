"""Which tables a replay from the binlog recovers, from where, and which need their own load instead (pure).

A table's replay starts at its ``consumed_through`` mark (:mod:`lakesync.stream.consumed`: every change before
it is in Delta) or at its load position, whichever is later: both are transaction boundaries, and the position
rule makes a keyed table exact from any start at or before the first change it lacks. Without a mark, the
load position serves only while the table has applied nothing newer (a replay from there is still exact for
a keyed table; the question is whether the binlog still has it). An ``append_log`` table has no position rule:
the stream drops what its handoff holds, so its handoff becomes its newest applied position, which says what
Delta holds only when the topic has one partition (one order); over several partitions it is re-loaded. A
start the server's binlog no longer has means a re-load of that table alone, as does a table the stream stopped
(its re-load is its recovery anyway, and its old handoff would hold the new stream's coverage check back) and
one whose load had not finished (a recovery that stopped in its re-loads, run again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TableFacts:
    """What the pipeline's state says of one loaded table (position keys)."""

    handoff: str
    consumed_through: str | None
    applied: str | None
    append_log: bool
    #: why the table is re-loaded whatever the binlog holds (stopped by the stream, its load not finished)
    reload_because: str | None = None


@dataclass(frozen=True)
class TableRecovery:
    """How one table recovers: replayed from ``replay_from`` and handed off at ``handoff``, or re-loaded."""

    table: str
    replay_from: str | None
    handoff: str | None
    why: str

    @property
    def reload(self) -> bool:
        return self.replay_from is None


@dataclass(frozen=True)
class RecoveryPlan:
    tables: list[TableRecovery]

    @property
    def relay_from(self) -> str | None:
        """Where the relay replays from: the earliest start of the replayed tables (None: nothing replayed)."""
        return min((t.replay_from for t in self.tables if t.replay_from is not None), default=None)

    @property
    def reloaded(self) -> list[str]:
        return [t.table for t in self.tables if t.reload]


def _same(key: str) -> str:
    return key


def plan_table(name: str, facts: TableFacts, *, partitions: int, available: Callable[[str], bool],
               shown: Callable[[str], str] = _same) -> TableRecovery:
    """``shown``: a position key as the reasons show it (the CLI gives ``binlog.000003:1542``, as users type it)."""
    if facts.reload_because is not None:
        return TableRecovery(name, None, None, facts.reload_because)
    if facts.append_log and partitions > 1:
        return TableRecovery(name, None, None, f"append_log over {partitions} partitions: what Delta holds is not "
                                               "one prefix of the change log, so a replay could append twice")
    if facts.consumed_through is not None:
        start, since = max(facts.consumed_through, facts.handoff), "everything before it is in Delta"
    elif facts.applied is None or facts.applied <= facts.handoff:
        start, since = facts.handoff, "its load; nothing newer applied"
    else:
        return TableRecovery(name, None, None, "changes applied after its load, and no consumed-through mark to "
                                               "replay from (a stream older than the marks, or another producer)")
    if not available(start):
        return TableRecovery(name, None, None, f"the binlog no longer has {shown(start)}, where its replay would start")
    handoff = max(start, facts.applied or "") if facts.append_log else start
    return TableRecovery(name, start, handoff, f"replayed from {shown(start)} ({since})")


def plan_recovery(tables: Mapping[str, TableFacts], *, partitions: int, available: Callable[[str], bool],
                  shown: Callable[[str], str] = _same) -> RecoveryPlan:
    return RecoveryPlan([plan_table(name, facts, partitions=partitions, available=available, shown=shown)
                         for name, facts in sorted(tables.items())])
