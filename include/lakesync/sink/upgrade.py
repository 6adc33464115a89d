"""Moving a pipeline's Delta tables over to delta-spark before its first delta-spark write (``lakesync upgrade``).

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

import pyarrow as pa
from deltalake import DeltaTable

from lakesync.core.errors import LakesyncError
from lakesync.sink.spark_writes import DELETION_VECTORS, make_writable, missing_writer_features, refused_names

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

    @property
    def steps(self) -> list[str]:
        """What :func:`upgrade_table` would do, in order; empty when there is nothing to do or it can't."""
        if not self.exists or self.refused:
            return []
        steps = [f"add the writer features {', '.join(self.missing_features)}"] if self.missing_features else []
        if not self.deletion_vectors:
            steps.append("switch deletion vectors on (protocol reader 3 / writer 7; can't be undone)")
        return steps

    @property
    def blocked(self) -> bool:
        """Whether this table can't be written by delta-spark (or its upgrade failed)."""
        return bool(self.refused) or self.error is not None


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
        refused=refused_names(pa.schema(table.schema().to_arrow())),  # type: ignore[arg-type]
    )


def upgrade_table(plan: TableUpgrade, session: SparkSession, storage_options: dict[str, str] | None
                  ) -> TableUpgrade:
    """Make the table writable by delta-spark, as its first delta-spark write would; returns its state after
    (with ``error`` set, and the table as it was, when that failed). A table with nothing to do is left alone."""
    if not plan.steps:
        return plan
    try:
        make_writable(DeltaTable(plan.uri, storage_options=storage_options), plan.uri, session)
    except LakesyncError as exc:
        plan.error = exc.message
        return plan
    after = inspect_table(plan.table, plan.uri, storage_options)
    after.upgraded = True
    return after
