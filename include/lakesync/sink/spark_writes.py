"""The stream's batch writes on delta-spark (``stream.writer: delta_spark``), with deletion vectors.

:class:`SparkDeltaSink` is :class:`~lakesync.sink.delta.DeltaSink` with the commit of each batch made by
delta-spark in Spark's JVM: the position-guarded MERGE of a keyed table, the append of an ``append_log``
table, and the commit that records a batch with nothing left to write. Everything that decides *what* is
written stays the sink's and is unchanged: the same-work rule, the snapshot floor, tombstones, the newest
change per key, an append log's positions already held (docs/sink.md). What this module adds:

* **Idempotency by Delta's app transaction.** The batch's ``(app_id, version)`` goes into the session's
  ``spark.databricks.delta.write.txnAppId``/``txnVersion`` for that one write and is unset after it: Delta
  skips, silently, any commit whose version is not above the one the table records, and the settings are
  session-wide, so they are set only when the sink has decided the work is new (``BatchCommit.transaction``)
  and each table's sink has a session of its own (``spark.newSession()``; the MERGEs of one micro-batch run
  in threads, one per table). The coverage goes into ``spark.databricks.delta.commitInfo.userMetadata`` as
  one JSON object (read back by :func:`lakesync.sink.coverage.commit_metadata`).
* **Pruning.** Delta prunes a MERGE's target files only by ON-clause parts that name target columns alone,
  so with a single-column key the condition also carries the batch's key range. Conditions are built as
  Column expressions with the bounds as literal values, never as SQL text (no quoting, no ``${...}``
  substitution, no parser setting can change a bound: a wrong bound would make an update an insert).
* **Settings of the sink's session:** the source is the batch's Arrow table, held by the driver and
  deterministic, so the MERGE need not materialise it (``merge.materializeSource=none``); adaptive query
  execution is off (its re-planning costs more than it saves on one small MERGE, measured in the issue that
  brought delta-spark); the time zone is UTC; the pipeline's object-store settings are the session's Hadoop
  settings (``delta.storage_options``, :func:`lakesync.spark.storage.hadoop_s3a_conf`).
* **The table made writable by delta-spark, before anything of a batch is written:** a column name that
  delta-spark refuses (a backtick, which its MERGE with the change data feed can't handle, or a space or
  ``,;{}()=``, which it takes only under column mapping, which in turn delta-rs can't evolve) is refused with
  the fix; a table delta-rs created may list fewer writer features than its metadata uses
  (delta-io/delta-rs#2957: a NOT NULL column needs ``invariants``), which delta-spark refuses to open, so the
  missing features are added (with delta-rs, which wrote them; nothing a reader sees changes). Then deletion
  vectors are switched on (``delta.enableDeletionVectors``): a protocol upgrade to reader 3 / writer 7 that
  **cannot be undone**; readers without deletion-vector support can't read the table afterwards (delta-rs
  reads it through its own scans and ``QueryBuilder``; ``to_pyarrow_table()`` refuses).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from lakesync.core.errors import SinkError
from lakesync.core.table_layout import DELETE_OP, OP, POS
from lakesync.sink.delta import BatchCommit, DeltaSink
from lakesync.sink.merge import quote
from lakesync.spark.storage import hadoop_s3a_conf, spark_path

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

log = logging.getLogger(__name__)

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
#: The sink session's own settings (see the module docstring).
SESSION_SETTINGS = {
    # Arrow's naive timestamps reach Spark as TIMESTAMP and are cast to the tables' TIMESTAMP_NTZ in this zone:
    # in UTC the wall clock is kept exactly (no daylight-saving gap to fall into)
    "spark.sql.session.timeZone": "UTC",
    "spark.databricks.delta.merge.materializeSource": "none",
    "spark.sql.adaptive.enabled": "false",
}
DELETION_VECTORS = "delta.enableDeletionVectors"
#: Characters of a column name delta-spark can't write here: a backtick (its MERGE with the change data feed
#: fails on it) and those it takes only under column mapping (which delta-rs's ADD COLUMN and re-load refuse).
REFUSED_NAME_CHARACTERS = frozenset("`,;{}()\n\t= ")
#: Writer features a table's metadata can use without its protocol listing them when delta-rs wrote it, and
#: how to tell that the metadata uses them.
_FEATURE_IN_USE = {
    "invariants": lambda schema, conf: any(not field.nullable for field in schema),
    "changeDataFeed": lambda schema, conf: conf.get("delta.enableChangeDataFeed") == "true",
    "appendOnly": lambda schema, conf: conf.get("delta.appendOnly") == "true",
    "checkConstraints": lambda schema, conf: any(key.startswith("delta.constraints.") for key in conf),
}


def _conflicts() -> tuple[type[BaseException], ...]:
    """delta-rs's commit conflict and every one of Delta's (they share no base class in delta-spark's Python)."""
    import delta.exceptions

    return (CommitFailedError, *(getattr(delta.exceptions, name) for name in delta.exceptions.__all__))


def _column(alias: str, name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(f"{alias}.{quote(name)}")


def merge_condition(changes: pa.Table, key_columns: list[str]) -> Column:
    """The MERGE's ON condition: key equality, and with a single-column key the batch's key range on the
    target (``t.k BETWEEN lo AND hi``, lo and hi as literal values) so Delta prunes files by their statistics."""
    from pyspark.sql import functions as F

    condition = None
    for name in key_columns:
        equal = _column("t", name) == _column("s", name)
        condition = equal if condition is None else condition & equal
    assert condition is not None
    if len(key_columns) == 1 and changes.num_rows:
        bounds = pc.min_max(changes.column(key_columns[0]))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and high is not None:
            condition = condition & _column("t", key_columns[0]).between(F.lit(low), F.lit(high))
    return condition


def missing_writer_features(table: DeltaTable) -> list[str]:
    """Writer features the table's metadata uses that its (writer-version-7) protocol does not list."""
    protocol = table.protocol()
    if protocol.min_writer_version < 7:
        return []
    listed = set(protocol.writer_features or [])
    schema = pa.schema(table.schema().to_arrow())  # type: ignore[arg-type]
    conf = table.metadata().configuration
    return [name for name, in_use in _FEATURE_IN_USE.items() if name not in listed and in_use(schema, conf)]


def refused_names(schema: pa.Schema) -> list[str]:
    """The column names delta-spark can't write here (see :data:`REFUSED_NAME_CHARACTERS`)."""
    return [name for name in schema.names if REFUSED_NAME_CHARACTERS & set(name)]


class SparkDeltaSink(DeltaSink):
    """A :class:`DeltaSink` whose batch commits are made by delta-spark (see the module docstring)."""

    def __init__(self, table_uri: str, **kwargs: Any) -> None:
        super().__init__(table_uri, **kwargs)
        self._session: SparkSession | None = None

    def _commit_conflicts(self) -> tuple[type[BaseException], ...]:
        return _conflicts()

    def session(self) -> SparkSession:
        """This sink's own Spark session (a new session of the running one: same JVM, its own settings)."""
        if self._session is None:
            from pyspark.sql import SparkSession

            running = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
            self._session = running.newSession()
            hadoop = {key.removeprefix("spark.hadoop."): value
                      for key, value in hadoop_s3a_conf(self._storage_options).items()}
            for key, value in {**SESSION_SETTINGS, **hadoop}.items():
                self._session.conf.set(key, value)
        return self._session

    def prepare_to_write(self, table: DeltaTable) -> None:
        """Refuse names delta-spark can't write, list the writer features delta-rs left out, then switch
        deletion vectors on (module docstring); before anything of the batch is written."""
        schema = pa.schema(table.schema().to_arrow())  # type: ignore[arg-type]
        refused = refused_names(schema)
        if refused:
            raise SinkError(f"{self.table_uri}: delta-spark can't write a table whose column names hold a backtick, "
                            f"a space or one of ,;{{}}()= ({refused}); nothing of this batch was written",
                            hint="set stream.writer: delta_rs for this pipeline (it writes such names), or rename "
                                 "the columns at the source")
        missing = missing_writer_features(table)
        if missing:
            from deltalake import TableFeatures

            log.info("%s: the protocol delta-rs wrote does not list %s; adding them so delta-spark can write it",
                     self.table_uri, missing)
            features = [getattr(TableFeatures, name[0].upper() + name[1:]) for name in missing]
            table.alter.add_feature(features, allow_protocol_versions_increase=False)
        if table.metadata().configuration.get(DELETION_VECTORS) != "true":
            log.warning("%s: switching deletion vectors on (a protocol upgrade to reader 3 / writer 7 that can't be "
                        "undone; readers without deletion-vector support can no longer read the table)",
                        self.table_uri)
            self._run(lambda: self.session().sql(
                f"ALTER TABLE delta.{quote(spark_path(self.table_uri))} "
                f"SET TBLPROPERTIES ('{DELETION_VECTORS}' = 'true')"), "switching deletion vectors on")
        table.update_incremental()

    @contextmanager
    def _committing(self, commit: BatchCommit) -> Iterator[SparkSession]:
        """The session with ``commit``'s app transaction and metadata set for one write, unset after it."""
        session = self.session()
        settings = {USER_METADATA: json.dumps(commit.metadata, sort_keys=True)}
        if commit.transaction is not None:
            settings[TXN_APP_ID], settings[TXN_VERSION] = commit.transaction[0], str(commit.transaction[1])
        for key, value in settings.items():
            session.conf.set(key, value)
        try:
            yield session
        finally:
            for key in settings:
                session.conf.unset(key)

    def _run(self, work: Any, what: str) -> Any:
        try:
            return work()
        except _conflicts():
            raise  # a lost commit race: commit_with_retry re-plans the batch
        except Exception as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SinkError(f"{what} of {self.table_uri} failed; nothing was committed: {first_line}") from exc

    def _present(self, deletes: pa.Table) -> pa.Table:
        """Every delete goes into the MERGE: delta-spark ignores a source row no clause applies to."""
        return deletes

    def _write_merge(self, table: DeltaTable, merged: pa.Table, commit: BatchCommit) -> dict[str, Any]:
        """The MERGE, also when no change is left but the batch's app transaction must be recorded; nothing
        when neither (the table already records the batch: the replay only had stale changes)."""
        if merged.num_rows == 0 and commit.transaction is None:
            return {}
        from pyspark.sql import functions as F

        on = merge_condition(merged, self.key_columns)
        newer = _column("s", POS) > _column("t", POS)
        is_delete = _column("s", OP) == F.lit(DELETE_OP)
        values: dict[str, str | Column] = {quote(name): _column("s", name) for name in merged.column_names}

        def merge() -> Any:
            from delta.tables import DeltaTable as SparkDeltaTable

            with self._committing(commit) as session:
                source = session.createDataFrame(merged)
                return (SparkDeltaTable.forPath(session, spark_path(self.table_uri)).alias("t")
                        .merge(source.alias("s"), on)
                        .whenMatchedUpdate(condition=~is_delete & newer, set=values)
                        .whenMatchedDelete(condition=is_delete & newer)
                        .whenNotMatchedInsert(condition=~is_delete, values=values)
                        .execute().first())

        row = self._run(merge, "the MERGE")
        table.update_incremental()
        counts = row.asDict() if row is not None else {}
        return {f"num_target_rows_{kind}": counts.get(f"num_{kind}_rows", 0)
                for kind in ("inserted", "updated", "deleted")}

    def _write_append(self, table: DeltaTable, rows: pa.Table, commit: BatchCommit) -> None:
        if rows.num_rows == 0 and commit.transaction is None:
            return

        def append() -> None:
            from pyspark.sql import functions as F

            path = spark_path(self.table_uri)
            with self._committing(commit) as session:
                # an append, unlike a MERGE, does not cast: Arrow's naive timestamp arrives as Spark's TIMESTAMP,
                # which the table holds as TIMESTAMP_NTZ (see SESSION_SETTINGS)
                target = session.read.format("delta").load(path).schema
                source = session.createDataFrame(rows)
                (source.select(*[F.col(quote(field.name)).cast(field.dataType).alias(field.name)
                                 for field in target.fields])
                 .write.format("delta").mode("append").save(path))

        self._run(append, "the append")
        table.update_incremental()
