"""The stream's batch writes on delta-spark (``delta.writer: delta_spark``), with deletion vectors.

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

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from lakesync.core.errors import SchemaChangeError, SinkError
from lakesync.core.table_layout import DELETE_OP, OP, POS
from lakesync.core.types.widening import widens
from lakesync.jvm.log_store import CLASS_NAME as LOG_STORE_CLASS
from lakesync.sink.delta import BatchCommit, DeltaSink
from lakesync.sink.merge import quote
from lakesync.sink.writer import ATTEMPT_KEY, commit_with_retry, delta_arrow_schema
from lakesync.spark.errors import spark_error_line
from lakesync.spark.storage import hadoop_s3a_conf, spark_path

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")

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
    # a table's path goes into SQL text (ALTER TABLE, REORG TABLE): Spark would substitute a ``${...}`` in it
    "spark.sql.variable.substitute": "false",
}
DELETION_VECTORS = "delta.enableDeletionVectors"
#: The table property that lets ``ALTER COLUMN ... TYPE`` widen a column (the reader-writer feature typeWidening).
TYPE_WIDENING = "delta.enableTypeWidening"
#: The table feature a TIMESTAMP_NTZ column (a DATETIME) needs; Delta enables it by itself only in a new table.
TIMESTAMP_NTZ = "timestampNtz"
#: The session settings a new table's properties default to (``<prefix><property without "delta.">``).
TABLE_DEFAULTS = "spark.databricks.delta.properties.defaults."
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


def delta_conflicts() -> tuple[type[BaseException], ...]:
    """delta-rs's commit conflict and every one of Delta's (they share no base class in delta-spark's Python)."""
    import delta.exceptions

    return (CommitFailedError, *(getattr(delta.exceptions, name) for name in delta.exceptions.__all__))


def _column(alias: str, name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(f"{alias}.{quote(name)}")


def literal(value: object) -> Column:
    """``value`` as a Spark literal of the value it is. A naive ``datetime`` (a DATETIME, TIMESTAMP_NTZ in Delta)
    is a wall-clock value: PySpark's ``lit`` would read it in the driver process's local time zone and shift it
    by that zone's offset, so it is given as UTC and cast to TIMESTAMP_NTZ in the UTC session (wall clock kept)."""
    from pyspark.sql import functions as F

    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return F.lit(value.replace(tzinfo=dt.UTC)).cast("timestamp_ntz")
    return F.lit(value)


def merge_condition(changes: pa.Table, key_columns: list[str]) -> Column:
    """The MERGE's ON condition: key equality, and with a single-column key the batch's key range on the
    target (``t.k BETWEEN lo AND hi``, lo and hi as literal values) so Delta prunes files by their statistics."""
    condition = None
    for name in key_columns:
        equal = _column("t", name) == _column("s", name)
        condition = equal if condition is None else condition & equal
    assert condition is not None
    if len(key_columns) == 1 and changes.num_rows:
        bounds = pc.min_max(changes.column(key_columns[0]))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and high is not None:
            condition = condition & _column("t", key_columns[0]).between(literal(low), literal(high))
    return condition


def missing_writer_features(table: DeltaTable) -> list[str]:
    """Writer features the table's metadata uses that its (writer-version-7) protocol does not list."""
    protocol = table.protocol()
    if protocol.min_writer_version < 7:
        return []
    listed = set(protocol.writer_features or [])
    schema = delta_arrow_schema(table)
    conf = table.metadata().configuration
    return [name for name, in_use in _FEATURE_IN_USE.items() if name not in listed and in_use(schema, conf)]


def refused_names(schema: pa.Schema) -> list[str]:
    """The column names delta-spark can't write here (see :data:`REFUSED_NAME_CHARACTERS`)."""
    return [name for name in schema.names if REFUSED_NAME_CHARACTERS & set(name)]


def check_writable_names(schema: pa.Schema, table_uri: str) -> None:
    """Refuse, before anything is written, a table whose column names delta-spark can't write."""
    if refused := refused_names(schema):
        raise SinkError(f"{table_uri}: delta-spark can't write a table whose column names hold a backtick, "
                        f"a space or one of ,;{{}}()= ({refused}); nothing was written",
                        hint="set delta.writer: delta_rs for this pipeline (it writes such names), or rename "
                             "the columns at the source")


def delta_spark_session(storage_options: dict[str, str] | None) -> SparkSession:
    """A new session of the running one (same JVM, settings of its own): :data:`SESSION_SETTINGS` and the
    pipeline's object-store settings. Its own, because Delta's idempotency settings are session-wide. With no
    Spark running in this process (a settlement or maintenance task), lakesync's session is started first."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from lakesync.spark.session import build_spark_session

    if SparkContext._active_spark_context is None:
        running = build_spark_session("lakesync-delta-spark-writer")
    else:
        running = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    session = running.newSession()
    hadoop = {key.removeprefix("spark.hadoop."): value for key, value in hadoop_s3a_conf(storage_options).items()}
    for key, value in {**SESSION_SETTINGS, **hadoop}.items():
        session.conf.set(key, value)
    return session


@contextmanager
def session_settings(session: SparkSession, settings: dict[str, str]) -> Iterator[SparkSession]:
    """``session`` with ``settings`` set for one write and unset after it (a setting left set would apply to
    the next write too: an app transaction left set skips the next batch silently)."""
    for key, value in settings.items():
        session.conf.set(key, value)
    try:
        yield session
    finally:
        for key in settings:
            session.conf.unset(key)


def timestamp_ntz_clause(table: DeltaTable, types: list[pa.DataType]) -> str | None:
    """The ``ALTER TABLE`` clause that lets an existing table take TIMESTAMP_NTZ columns, when one of ``types``
    is a naive timestamp (a DATETIME) and the table does not support them yet; else None. Delta switches the
    feature on by itself only when a write creates the table: an added column, a re-load or a widening to it
    fails with DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT otherwise."""
    naive = any(pa.types.is_timestamp(kind) and kind.tz is None for kind in types)
    if not naive or TIMESTAMP_NTZ in (table.protocol().writer_features or []):
        return None
    return f"SET TBLPROPERTIES ('delta.feature.{TIMESTAMP_NTZ}' = 'supported')"


def widening_clauses(table: DeltaTable, table_uri: str, fields: list[pa.Field]) -> list[str]:
    """The ``ALTER TABLE`` clauses that widen ``table``'s columns to the types of ``fields`` in place: the type
    widening property (once), then one ``ALTER COLUMN ... TYPE`` per column, each its own commit. A column that
    has its new type already (a replayed DDL) needs none; a change that is not a widening Delta takes
    (:func:`lakesync.core.types.widening.widens`) is a :class:`SchemaChangeError`."""
    from pyspark.sql.pandas.types import from_arrow_type

    current = {field.name: field.type for field in delta_arrow_schema(table)}
    columns = []
    for field in fields:
        if current.get(field.name) == field.type:
            continue
        if field.name not in current or not widens(current[field.name], field.type):
            raise SchemaChangeError(f"{table_uri}: column {field.name!r} can't be widened in place from "
                                    f"{current.get(field.name)} to {field.type}",
                                    hint="re-run the full load of this table")
        spark_type = from_arrow_type(field.type, prefer_timestamp_ntz=True).simpleString()
        columns.append(f"ALTER COLUMN {quote(field.name)} TYPE {spark_type}")
    if columns and table.metadata().configuration.get(TYPE_WIDENING) != "true":
        columns.insert(0, f"SET TBLPROPERTIES ('{TYPE_WIDENING}' = 'true')")
    if columns and (ntz := timestamp_ntz_clause(table, [field.type for field in fields])):
        columns.insert(0, ntz)
    return columns


def run_on_delta_spark(work: Callable[[], T], what: str, table_uri: str, *, hint: str | None = None) -> T:
    """``work()``; a lost commit race is raised as it is (the caller retries), anything else as a
    :class:`SinkError` with the line of Spark's message that says what failed (its JVM stack trace stays in the
    log; :func:`lakesync.spark.errors.spark_error_line`)."""
    try:
        return work()
    except delta_conflicts():
        raise
    except Exception as exc:
        said = spark_error_line(exc)
        if LOG_STORE_CLASS in said:  # the session started without the jar: no JDK to build it
            hint = "install a JDK (javac), then `lakesync jars fetch` builds lakesync's Delta LogStore for S3"
        raise SinkError(f"{what} of {table_uri} failed; nothing was committed: {said}", hint=hint) from exc


def make_writable(table: DeltaTable, table_uri: str, session: SparkSession) -> None:
    """Refuse names delta-spark can't write, list the writer features delta-rs left out, then switch
    deletion vectors on (module docstring); before delta-spark writes anything to the table."""
    check_writable_names(delta_arrow_schema(table), table_uri)
    missing = missing_writer_features(table)
    if missing:
        from deltalake import TableFeatures

        log.info("%s: the protocol delta-rs wrote does not list %s; adding them so delta-spark can write it",
                 table_uri, missing)
        features = [getattr(TableFeatures, name[0].upper() + name[1:]) for name in missing]
        table.alter.add_feature(features, allow_protocol_versions_increase=False)
    if table.metadata().configuration.get(DELETION_VECTORS) != "true":
        log.warning("%s: switching deletion vectors on (a protocol upgrade to reader 3 / writer 7 that can't be "
                    "undone; readers without deletion-vector support can no longer read the table)", table_uri)
        run_on_delta_spark(lambda: session.sql(
            f"ALTER TABLE delta.{quote(spark_path(table_uri))} "
            f"SET TBLPROPERTIES ('{DELETION_VECTORS}' = 'true')"), "switching deletion vectors on", table_uri)
    table.update_incremental()


class SparkDeltaSink(DeltaSink):
    """A :class:`DeltaSink` whose batch commits are made by delta-spark (see the module docstring)."""

    writer = "delta_spark"
    widens_in_place = True

    def __init__(self, table_uri: str, **kwargs: Any) -> None:
        super().__init__(table_uri, **kwargs)
        self._session: SparkSession | None = None

    def _commit_conflicts(self) -> tuple[type[BaseException], ...]:
        return delta_conflicts()

    def session(self) -> SparkSession:
        """This sink's own Spark session (see :func:`delta_spark_session`)."""
        if self._session is None:
            self._session = delta_spark_session(self._storage_options)
        return self._session

    def prepare_to_write(self, table: DeltaTable) -> None:
        """The table made writable by delta-spark (:func:`make_writable`), before anything of a batch is
        written."""
        make_writable(table, self.table_uri, self.session())

    def _committing(self, commit: BatchCommit) -> AbstractContextManager[SparkSession]:
        """The session with ``commit``'s app transaction and metadata set for one write, unset after it."""
        settings = {USER_METADATA: json.dumps(commit.metadata, sort_keys=True)}
        if commit.transaction is not None:
            settings[TXN_APP_ID], settings[TXN_VERSION] = commit.transaction[0], str(commit.transaction[1])
        return session_settings(self.session(), settings)

    def _run(self, work: Callable[[], T], what: str) -> T:
        return run_on_delta_spark(work, what, self.table_uri)

    def _present(self, deletes: pa.Table) -> pa.Table:
        """Every delete goes into the MERGE: delta-spark ignores a source row no clause applies to."""
        return deletes

    def _write_merge(self, table: DeltaTable, merged: pa.Table, commit: BatchCommit) -> dict[str, Any]:
        """The MERGE, also when no change is left but the batch's app transaction must be recorded; nothing
        when neither (the table already records the batch: the replay only had stale changes)."""
        if merged.num_rows == 0 and commit.transaction is None:
            return {}

        def merge() -> dict[str, int]:
            with self._committing(commit) as session:
                return merge_on_delta_spark(session, self.table_uri, merged, self.key_columns)

        counts = self._run(merge, "the MERGE")
        table.update_incremental()
        return counts

    def _write_append(self, table: DeltaTable, rows: pa.Table, commit: BatchCommit) -> None:
        if rows.num_rows == 0 and commit.transaction is None:
            return

        def append() -> None:
            with self._committing(commit) as session:
                append_on_delta_spark(session, self.table_uri, rows)

        self._run(append, "the append")
        table.update_incremental()

    # -- schema changes the stream follows in place (docs/schema_changes.md) ---------------------------------

    def _evolve(self, work: Callable[[SparkSession, int], object], what: str) -> None:
        """One schema step committed by delta-spark (``work(session, attempt)``), on a table made writable first
        (a DDL can come before the table's first batch): a lost commit race is retried; any other failure is a
        :class:`SchemaChangeError`, which re-loads (or stops) this table only, as with delta-rs. A re-load is
        the safe side: a schema step that failed half-way is not left for a replay to find done."""

        def step(attempt: int) -> None:
            try:
                self.prepare_to_write(self._open())
                run_on_delta_spark(lambda: work(self.session(), attempt), what, self.table_uri)
            except SinkError as exc:
                raise SchemaChangeError(exc.message, hint=exc.hint) from exc

        commit_with_retry(step, what=what, table_uri=self.table_uri, conflicts=delta_conflicts())

    def _alter(self, clause: str) -> Callable[[SparkSession, int], object]:
        table = f"delta.{quote(spark_path(self.table_uri))}"
        return lambda session, attempt: session.sql(f"ALTER TABLE {table} {clause}")

    def _commit_added_columns(self, table: DeltaTable, fields: list[pa.Field]) -> None:
        """``ALTER TABLE ... ADD COLUMNS``, each column with the Delta type delta-rs would give its Arrow type."""
        from pyspark.sql.pandas.types import from_arrow_type

        refused = refused_names(pa.schema(fields))
        if refused:  # added, the table could no longer be written by delta-spark: every later batch would fail
            raise SchemaChangeError(f"{self.table_uri}: the source added column(s) {refused}, whose names delta-spark "
                                    "can't write (a backtick, a space or one of ,;{}()=)",
                                    hint="set delta.writer: delta_rs for this pipeline (it writes such names), or "
                                         "rename the columns at the source")
        columns = ", ".join(f"{quote(field.name)} {from_arrow_type(field.type, prefer_timestamp_ntz=True).simpleString()}"
                            for field in fields)
        what = f"adding {[field.name for field in fields]}"
        if ntz := timestamp_ntz_clause(table, [field.type for field in fields]):
            self._evolve(self._alter(ntz), what)
        self._evolve(self._alter(f"ADD COLUMNS ({columns})"), what)

    def _commit_nullable(self, table: DeltaTable, names: list[str]) -> None:
        """``ALTER TABLE ... ALTER COLUMN ... DROP NOT NULL``, one column per statement (Spark's grammar)."""
        for name in names:
            self._evolve(self._alter(f"ALTER COLUMN {quote(name)} DROP NOT NULL"), f"making {name!r} nullable")

    def widen_columns(self, fields: list[pa.Field]) -> None:
        """Widen columns to the types of ``fields`` in place with Delta's type widening
        (:func:`widening_clauses`): metadata-only commits, the data files keep the types they were written with
        and readers convert their values. Type widening is a reader-writer table feature: readers without it
        can't read the table afterwards (delta-rs 1.6 reads its log but not its rows, so lakesync's scans of
        it go through Spark: :mod:`lakesync.sink.table_scan`). A widened key column is widened in the tombstone
        table too, first (a tombstone table wider than its target is harmless; a crash between the two leaves the
        target to widen on the DDL's replay). Idempotent: a replayed DDL finds its columns widened."""
        widened_keys = [field for field in fields if field.name in self.key_columns]
        if widened_keys:
            try:
                self.tombstones.widen_columns(widened_keys)
            except SinkError as exc:  # as the target's own steps: this table re-loads (or stops), no other
                raise SchemaChangeError(exc.message, hint=exc.hint) from exc
        what = f"widening {[field.name for field in fields]}"
        for clause in widening_clauses(self._open(), self.table_uri, fields):
            self._evolve(self._alter(clause), what)

    def fill_columns(self, values: dict[str, pa.Scalar], *, before_position: str) -> None:
        """delta-spark's UPDATE of the rows older than a DDL (see
        :func:`lakesync.sink.schema_evolution.fill_columns`), the values as typed literals (no SQL text: Spark's
        parser reads ``'it''s'`` as two strings joined, and a backslash as an escape)."""
        if not values:
            return
        from delta.tables import DeltaTable as SparkDeltaTable
        from pyspark.sql import functions as F

        def update(session: SparkSession, attempt: int) -> None:
            metadata = {USER_METADATA: json.dumps({"lakesync.operation": "fill_added_columns",
                                                   ATTEMPT_KEY: str(attempt)})}
            with session_settings(session, metadata):
                SparkDeltaTable.forPath(session, spark_path(self.table_uri)).update(
                    condition=F.col(quote(POS)) < F.lit(before_position),
                    set={quote(name): literal(value.as_py()) for name, value in values.items()})

        self._evolve(update, f"filling the added column(s) {sorted(values)}")


def merge_on_delta_spark(session: SparkSession, table_uri: str, changes: pa.Table, key_columns: list[str], *,
                         allow_equal: bool = False) -> dict[str, int]:
    """MERGE ``changes`` (at most one per key, ops c/u/r/d) into the table: a change replaces or deletes a row
    only when its position is newer (or equal, with ``allow_equal``: a source without positions), and a key
    the table lacks is inserted unless the change is a delete. Returns the inserted/updated/deleted counts
    under delta-rs's metric names. The caller sets the session's commit settings (:func:`session_settings`)."""
    from delta.tables import DeltaTable as SparkDeltaTable
    from pyspark.sql import functions as F

    on = merge_condition(changes, key_columns)
    newer = _column("s", POS) >= _column("t", POS) if allow_equal else _column("s", POS) > _column("t", POS)
    is_delete = _column("s", OP) == F.lit(DELETE_OP)
    values: dict[str, str | Column] = {quote(name): _column("s", name) for name in changes.column_names}
    source = session.createDataFrame(changes)
    row = (SparkDeltaTable.forPath(session, spark_path(table_uri)).alias("t")
           .merge(source.alias("s"), on)
           .whenMatchedUpdate(condition=~is_delete & newer, set=values)
           .whenMatchedDelete(condition=is_delete & newer)
           .whenNotMatchedInsert(condition=~is_delete, values=values)
           .execute().first())
    counts = row.asDict() if row is not None else {}
    return {f"num_target_rows_{kind}": counts.get(f"num_{kind}_rows", 0) for kind in ("inserted", "updated", "deleted")}


def append_on_delta_spark(session: SparkSession, table_uri: str, rows: pa.Table) -> None:
    """Append ``rows`` to the table, cast to its schema: an append, unlike a MERGE, does not cast, and Arrow's
    naive timestamps arrive as Spark's TIMESTAMP where the table holds TIMESTAMP_NTZ (see SESSION_SETTINGS)."""
    from pyspark.sql import functions as F

    path = spark_path(table_uri)
    target = session.read.format("delta").load(path).schema
    source = session.createDataFrame(rows)
    given = set(rows.column_names)  # a column the table kept after the source dropped it gets NULL
    (source.select(*[(F.col(quote(field.name)) if field.name in given else F.lit(None))
                     .cast(field.dataType).alias(field.name) for field in target.fields])
     .write.format("delta").mode("append").save(path))


def append_or_create_on_delta_spark(session: SparkSession, table_uri: str, rows: pa.Table, *, exists: bool,
                                    properties: dict[str, str] | None = None) -> None:
    """Append ``rows``, or create the table with them when it does not exist yet; a create that finds the table
    made meanwhile by another writer (a second stream run, a settlement, a concurrent ``validate``) appends."""
    if exists:
        append_on_delta_spark(session, table_uri, rows)
        return
    from delta.tables import DeltaTable as SparkDeltaTable

    try:
        create_on_delta_spark(session, table_uri, rows, properties or {})
    except Exception:
        if not SparkDeltaTable.isDeltaTable(session, spark_path(table_uri)):
            raise
        append_on_delta_spark(session, table_uri, rows)


def create_on_delta_spark(session: SparkSession, table_uri: str, rows: pa.Table,
                          properties: dict[str, str]) -> None:
    """Create the table with ``rows`` in one commit, with ``properties`` and deletion vectors on; the Delta
    types are the ones delta-rs would give the same Arrow schema (a naive timestamp is TIMESTAMP_NTZ)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    target = from_arrow_schema(rows.schema, prefer_timestamp_ntz=True)
    source = session.createDataFrame(rows)
    defaults = {f"{TABLE_DEFAULTS}{key.removeprefix('delta.')}": value
                for key, value in {**properties, DELETION_VECTORS: "true"}.items()}
    with session_settings(session, defaults):  # a table created at a path takes its properties from these
        (source.select(*[F.col(quote(field.name)).cast(field.dataType).alias(field.name) for field in target.fields])
         .write.format("delta").mode("errorifexists").save(spark_path(table_uri)))
