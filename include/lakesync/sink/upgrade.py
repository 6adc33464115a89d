"""Moving a pipeline's Delta tables over to delta-spark before its first delta-spark write
(``lakesync enable-deletion-vectors``).

With ``delta.writer: delta_spark`` the first write delta-spark makes to a table makes the table writable first
(:func:`lakesync.sink.spark_writes.make_writable`): the writer features delta-rs left out of the protocol are
added, and deletion vectors are switched on. Switching them on is a protocol upgrade to reader 3 / writer 7
that **cannot be undone**: a reader without deletion-vector support can't read the table afterwards. Done
inside a stream batch, that one-way change hides in a routine write. This module lets an operator see it per
table (:func:`inspect_table`, what the command shows by default) and make it at a time they choose
(:func:`upgrade_table`), before they switch the writer, so that they can check their readers first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from lakesync.core.errors import LakesyncError
from lakesync.sink.spark_writes import (
    DELETION_VECTORS,
    delta_conflicts,
    make_writable,
    missing_writer_features,
    refused_names,
)
from lakesync.sink.writer import commit_with_retry, delta_arrow_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class TableUpgrade:
    """One table's protocol as found, what making it writable by delta-spark takes, and what came of it."""

    table: str
    uri: str
    exists: bool
    reader_version: int = 0
    writer_version: int = 0
    deletion_vectors: bool = False
    missing_features: list[str] = field(default_factory=list)
    #: column names delta-spark can't write: the table can't be upgraded (it stays on delta-rs)
    refused: list[str] = field(default_factory=list)
    #: set by :func:`upgrade_table`: the error that stopped this table, if one did
    error: str | None = None
    upgraded: bool = False
    #: set by :func:`upgrade_table` when it failed after changing the table (the features were added, say)
    changed_before_error: bool = False

    @property
    def steps(self) -> list[str]:
        """What :func:`upgrade_table` would do, in order; empty when there is nothing to do or it can't."""
        if not self.exists or self.refused or self.error is not None:
            return []
        steps = [f"add the writer features {', '.join(self.missing_features)}"] if self.missing_features else []
        if not self.deletion_vectors:
            steps.append("switch deletion vectors on (protocol reader 3 / writer 7; can't be undone)")
        return steps


def inspect_table(name: str, uri: str, storage_options: dict[str, str] | None) -> TableUpgrade:
    """The table's protocol and what making it writable by delta-spark would do; reads only its log."""
    if not DeltaTable.is_deltatable(uri, storage_options=storage_options):
        return TableUpgrade(name, uri, exists=False)
    table = DeltaTable(uri, storage_options=storage_options)
    protocol = table.protocol()
    return TableUpgrade(
        name, uri, exists=True,
        reader_version=protocol.min_reader_version, writer_version=protocol.min_writer_version,
        deletion_vectors=table.metadata().configuration.get(DELETION_VECTORS) == "true",
        missing_features=missing_writer_features(table),
        refused=refused_names(delta_arrow_schema(table)),
    )


def upgrade_table(plan: TableUpgrade, session: SparkSession, storage_options: dict[str, str] | None
                  ) -> TableUpgrade:
    """Make the table writable by delta-spark, as its first delta-spark write would (the features by delta-rs,
    deletion vectors by a delta-spark commit), retrying a lost commit race; returns its state after. When it
    fails, the returned state says why (``error``) and whether the table had changed already (it is read
    again). A table with nothing to do is left alone."""
    if not plan.steps:
        return plan

    def attempt(number: int) -> None:
        make_writable(DeltaTable(plan.uri, storage_options=storage_options), plan.uri, session)

    try:
        commit_with_retry(attempt, what="making the table writable by delta-spark", table_uri=plan.uri,
                          conflicts=(CommitFailedError, *delta_conflicts()))
    except Exception as exc:  # reported per table: the other tables are still upgraded
        error = _described(exc)
        after = read_table_state(plan.table, plan.uri, storage_options)
        if after.error is not None:  # the table can't even be read now: its state is not known
            plan.error = f"{error} (and reading it again failed: {after.error})"
            return plan
        after.error = error
        after.changed_before_error = (after.reader_version, after.writer_version, after.missing_features) != (
            plan.reader_version, plan.writer_version, plan.missing_features)
        return after
    after = read_table_state(plan.table, plan.uri, storage_options)
    after.upgraded = after.error is None
    return after


def read_table_state(name: str, uri: str, storage_options: dict[str, str] | None) -> TableUpgrade:
    """:func:`inspect_table`, with a table that can't be read (credentials, a damaged log) reported in
    ``error`` instead of raised, so that one table does not stop the others."""
    try:
        return inspect_table(name, uri, storage_options)
    except Exception as exc:
        return TableUpgrade(name, uri, exists=True, error=f"can't read the table: {_described(exc)}")


def _described(exc: Exception) -> str:
    """A lakesync error's message, or any other error with its type (a delta-rs or Spark error)."""
    return exc.message if isinstance(exc, LakesyncError) else f"{type(exc).__name__}: {exc}"
