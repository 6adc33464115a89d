"""Schema evolution of a Delta table beyond adding columns, for DDL the stream follows in place.

Both changes are what MySQL itself did to the rows, so Delta keeps holding what the source holds:
a dropped or relaxed NOT NULL column must accept NULL from new rows, and a column added with a default
holds that default in every row that existed at the DDL (docs/schema_changes.md).
"""

from __future__ import annotations

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import DeltaError

from lakesync.core.errors import SchemaChangeError
from lakesync.core.table_layout import POS
from lakesync.sink.merge import quote
from lakesync.sink.writer import commit_with_retry, with_attempt


def make_nullable(table: DeltaTable, names: list[str], *, keep: list[str], uri: str) -> None:
    """Let columns hold NULL (a dropped source column, or one whose NOT NULL was lifted): new rows carry
    NULL there, and a NOT NULL Delta column would refuse them, failing the batch. Metadata only; idempotent;
    the key columns in ``keep`` stay NOT NULL."""
    current = {field.name: field for field in table.schema().fields}
    for name in names:
        if name in current and not current[name].nullable and name not in keep:
            try:
                table.alter.drop_column_not_null(name)
            except DeltaError as exc:
                raise SchemaChangeError(f"could not make column {name!r} of {uri} nullable: {exc}") from exc


def fill_columns(table: DeltaTable, values: dict[str, str], *, before_position: str, uri: str) -> None:
    """Write ``values`` (column -> SQL expression) into every row whose last change is older than
    ``before_position``: the rows that existed when the source added these columns with a default, which the
    source filled with it. Rows changed after the DDL carry their own value. Idempotent (a replayed batch
    sets the same values again, so a commit conflict is retried on the newest version)."""
    if not values:
        return
    commit = CommitProperties(custom_metadata={"lakesync.operation": "fill_added_columns"})

    def step(attempt: int) -> None:
        if attempt > 1:
            table.update_incremental()
        table.update(updates={quote(name): value for name, value in values.items()},
                     predicate=f"{quote(POS)} < '{before_position}'", commit_properties=with_attempt(commit, attempt))

    try:
        commit_with_retry(step, what="filling added columns", table_uri=uri)
    except DeltaError as exc:
        raise SchemaChangeError(f"could not fill the added column(s) {sorted(values)} of {uri}: {exc}") from exc
