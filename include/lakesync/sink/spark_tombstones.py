"""The tombstone side tables written by delta-spark (``delta.writer: delta_spark``).

:class:`SparkTombstoneStore` is :class:`~lakesync.sink.tombstones.TombstoneStore` with its two writes made by
delta-spark: the append of a batch's tombstones and the DELETE that clears or purges them. What is written
stays the base class's (which tombstones a replayed batch still lacks); reading them stays delta-rs's (it
reads deletion vectors). Two differences decided here:

* **The app transaction only for new work.** delta-rs records an equal ``(app_id, version)`` again; Delta
  skips, silently, a write whose ``txnVersion`` is not above the recorded one. A replay that appends the
  tombstones the first attempt lacked therefore writes with no app transaction (the base class has already
  left out those recorded), or its rows would vanish.
* **The table made writable by delta-spark first** (:func:`lakesync.sink.spark_writes.make_writable`): a
  tombstone table delta-rs created may lack writer features delta-spark needs (NOT NULL key columns).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow as pa

from lakesync.core.errors import SinkError
from lakesync.core.table_layout import DELETED_MS
from lakesync.core.types.widening import widens
from lakesync.sink.merge import quote
from lakesync.sink.spark_writes import (
    TXN_APP_ID,
    TXN_VERSION,
    USER_METADATA,
    append_or_create_on_delta_spark,
    delta_conflicts,
    delta_spark_session,
    make_writable,
    run_on_delta_spark,
    session_settings,
    widening_clauses,
)
from lakesync.sink.tombstones import TombstoneStore
from lakesync.sink.writer import commit_with_retry, delta_arrow_schema
from lakesync.spark.storage import spark_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkTombstoneStore(TombstoneStore):
    """A :class:`TombstoneStore` whose appends and deletes are delta-spark commits (module docstring)."""

    def __init__(self, uri: str, *, key_columns: list[str], storage_options: dict[str, str] | None = None):
        super().__init__(uri, key_columns=key_columns, storage_options=storage_options)
        self._session: SparkSession | None = None

    def _writable_session(self) -> tuple[SparkSession, bool]:
        """The store's own session (the app transaction settings are session-wide), with the table, when it
        exists, made writable by delta-spark; and whether the table exists (one read of its log for both)."""
        if self._session is None:
            self._session = delta_spark_session(self._storage_options)
        table = self._open()
        if table is not None:
            make_writable(table, self.uri, self._session)
        return self._session, table is not None

    def _append(self, rows: pa.Table, *, app_id: str, batch_version: int, new_work: bool) -> None:
        session, exists = self._writable_session()
        if exists and self._keys_need_a_new_table(rows.schema):
            self._replace_empty_table(session, rows.schema)
        settings = {USER_METADATA: json.dumps({"lakesync.operation": "tombstones"})}
        if new_work:
            settings |= {TXN_APP_ID: app_id, TXN_VERSION: str(batch_version)}

        def append() -> None:
            with session_settings(session, settings):
                append_or_create_on_delta_spark(session, self.uri, rows, exists=exists)

        run_on_delta_spark(append, f"recording {rows.num_rows} tombstone(s)", self.uri)

    def _keys_need_a_new_table(self, given: pa.Schema) -> bool:
        """Make the table take keys of the types ``given`` carries without a narrowing cast (an append casts to
        the table's types, and a narrowing cast would overflow or, DECIMAL to INT, truncate a key: a lost
        tombstone and a false one). A key type the rows carry wider (the target was widened, or re-loaded with a
        wider key) is widened here too; a narrower one is cast up by the append. Any other change (a key re-loaded
        as another type) needs a new table: True, allowed only while it holds no tombstone (a new load clears
        them); otherwise refused."""
        from pyspark.sql.pandas.types import from_arrow_type

        table = self._open()
        assert table is not None
        current = {field.name: field.type for field in delta_arrow_schema(table)}
        wider: list[pa.Field] = []
        other: list[pa.Field] = []
        for name in self.key_columns:
            have, new = current.get(name), given.field(name).type
            same = have is not None and (from_arrow_type(have, prefer_timestamp_ntz=True)
                                         == from_arrow_type(new, prefer_timestamp_ntz=True))
            if have is None or same or widens(new, have):
                continue
            (wider if widens(have, new) else other).append(pa.field(name, new))
        if other:
            counts = pa.table(table.get_add_actions(flatten=True)).column("num_records").to_pylist()
            if any(count is None or count > 0 for count in counts):  # no statistics: not known to be empty
                raise SinkError(f"{self.uri} holds tombstones whose key types differ from the table's now "
                                f"({[str(field) for field in other]}); nothing was written",
                                hint="delete the tombstone table's folder, then re-run the full load of this table")
            return True
        if wider:
            self.widen_columns(wider)
        return False

    def _replace_empty_table(self, session: SparkSession, schema: pa.Schema) -> None:
        """The empty tombstone table replaced by one of ``schema``'s types (one commit; app transactions kept)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        empty = session.createDataFrame([], from_arrow_schema(schema, prefer_timestamp_ntz=True))
        run_on_delta_spark(lambda: empty.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
                           .save(spark_path(self.uri)), "replacing the empty tombstone table", self.uri)

    def widen_columns(self, fields: list[pa.Field]) -> None:
        """Widen the key columns its target table widened (:func:`lakesync.sink.spark_writes.widening_clauses`),
        so tombstones of keys beyond the old type's range can be recorded; nothing before the first tombstone
        (the table is then created with the new types). A lost commit race is retried."""
        table = self._open()
        if table is None:
            return
        what = f"widening {[field.name for field in fields]}"
        for clause in widening_clauses(table, self.uri, fields):
            statement = f"ALTER TABLE delta.{quote(spark_path(self.uri))} {clause}"

            def widen(attempt: int, sql: str = statement) -> None:
                session, _ = self._writable_session()
                run_on_delta_spark(lambda: session.sql(sql), what, self.uri)

            commit_with_retry(widen, what=what, table_uri=self.uri, conflicts=delta_conflicts())

    def _delete(self, *, older_than_ms: int | None) -> int:
        """``DELETE FROM`` the tombstone table (the integer bound is the only value in its text), retried on a
        lost commit race (the stream appends while maintenance purges); returns Spark's affected-row count."""
        if self._open() is None:
            return 0
        where = "" if older_than_ms is None else f" WHERE {quote(DELETED_MS)} < {int(older_than_ms)}"
        statement = f"DELETE FROM delta.{quote(spark_path(self.uri))}{where}"
        what = "clearing the tombstones" if older_than_ms is None else "purging tombstones"

        def delete(attempt: int) -> int:
            session, _ = self._writable_session()  # inside the retry: its one-time protocol change may race too
            with session_settings(session, {USER_METADATA: json.dumps({"lakesync.operation": what})}):
                row = run_on_delta_spark(lambda: session.sql(statement).first(), what, self.uri)
            return int(row[0]) if row is not None and row[0] is not None else 0

        return commit_with_retry(delete, what=what, table_uri=self.uri, conflicts=delta_conflicts())
