"""The full load's commit on delta-spark (``delta.writer: delta_spark``): Spark writes the loaded table.

The full load reads the source with its own reader and writes the rows as Parquet files into the table's folder
(:mod:`lakesync.full_load.parquet_writer`: fast, resumable chunk by chunk, invisible until a commit adds them).
delta-rs commits those files as they are. With delta-spark, Spark reads them and writes the table in **one
overwrite commit** of its own files (Spark's statistics, deletion vectors on, ``engineInfo`` naming delta-spark):
a reader sees the old table or the whole load, never part of it. The load's files are deleted afterwards (a crash
before that leaves them to VACUUM: no commit refers to them).

The commit carries the snapshot app transaction (``lakesync.snapshot``, :mod:`lakesync.sink.snapshot`) as
Delta's ``txnAppId``/``txnVersion``, and in ``userMetadata`` the readable metadata and the load's identity
(:func:`load_identity`: its files and schema). Delta skips, without a word, a write whose version is not above
the one the table records, so the recorded version is read first:

* equal, and a recent commit carries this load's identity: it landed already (a load killed after its commit,
  before its state file was saved, then resumed): nothing is written again, that commit's version is returned;
* equal, by another load (a reload of a source that did not move: a repair, a restart after a settings change):
  written without the app transaction, which already holds this position;
* greater: the table holds a load taken at a later position than this one's (the source's binlog positions went
  back: another server, ``RESET MASTER``): refused with what to do, instead of skipped silently.

After the write the table must record the position and this load's commit, or the load fails.

What it costs (docs/sink.md, "The full load on delta-spark"): the rows are written twice (by the reader, then by
Spark: the load takes 3-4x as long as with the delta-rs commit, docs/full_load.md "Performance"), and the
source's NOT NULL columns arrive nullable in Delta (every DataFrame write to Delta makes its schema nullable;
NOT NULL would take a DDL commit of its own: docs/sink.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence

import pyarrow as pa
from deltalake import DeltaTable

from lakesync.core.errors import SinkError
from lakesync.core.object_store import arrow_filesystem
from lakesync.core.positions import SourcePosition
from lakesync.sink.merge import quote
from lakesync.sink.snapshot import SNAPSHOT_APP_ID, decode_snapshot, encode_snapshot, snapshot_metadata
from lakesync.sink.spark_writes import (
    DELETION_VECTORS,
    TABLE_DEFAULTS,
    USER_METADATA,
    check_writable_names,
    delta_conflicts,
    delta_spark_session,
    make_writable,
    run_on_delta_spark,
    session_settings,
    timestamp_ntz_clause,
)
from lakesync.sink.writer import ATTEMPT_KEY, commit_with_retry
from lakesync.spark.storage import spark_path

log = logging.getLogger(__name__)
#: The commit metadata key naming the load a commit wrote (:func:`load_identity`).
LOAD_ID_KEY = "lakesync.load.id"
#: How far back the table's history is searched for this load's commit (a resumed load comes back soon).
LANDED_SEARCH_COMMITS = 100


def _recorded_snapshot(table_uri: str, storage_options: dict[str, str] | None) -> tuple[DeltaTable | None, int | None]:
    """The table (None when there is none yet) and the snapshot version it records (None: no load recorded)."""
    if not DeltaTable.is_deltatable(table_uri, storage_options=storage_options):
        return None, None
    table = DeltaTable(table_uri, storage_options=storage_options)
    return table, table.transaction_version(SNAPSHOT_APP_ID)


def _drop_load_files(table_uri: str, paths: Sequence[str], storage_options: dict[str, str] | None) -> None:
    """Delete the load's own Parquet files once Spark's commit holds the rows (best effort: VACUUM removes what
    is left, as no commit refers to these files)."""
    filesystem, root = arrow_filesystem(table_uri, storage_options)
    for path in paths:
        try:
            filesystem.delete_file(f"{root}/{path}")
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("could not delete the load file %s of %s (VACUUM removes it later): %s", path, table_uri, exc)


def load_identity(paths: Sequence[str], schema: pa.Schema) -> str:
    """What tells this load's commit from another load's at the same position: its files (named at random when
    written, the same when a chunked load resumes) and its schema."""
    digest = hashlib.sha256(json.dumps(sorted(paths)).encode())
    digest.update(schema.to_string(show_schema_metadata=False).encode())
    return digest.hexdigest()[:32]


def landed_version(table: DeltaTable, identity: str) -> int | None:
    """The version of the newest of the table's last :data:`LANDED_SEARCH_COMMITS` commits made by the load
    ``identity``, or None."""
    for commit in table.history(LANDED_SEARCH_COMMITS):
        try:
            metadata = json.loads(commit.get("userMetadata") or "{}")
        except (TypeError, ValueError):
            continue
        if isinstance(metadata, dict) and metadata.get(LOAD_ID_KEY) == identity:
            return int(commit["version"])
    return None


def _literal_path(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped: Spark expands them in the paths it reads, and a table's
    folder is named after the table, which may hold any of them."""
    return re.sub(r"([\\{}\[\]*?])", r"\\\1", path)


def commit_load_on_delta_spark(table_uri: str, schema: pa.Schema, paths: Sequence[str], position: SourcePosition,
                               *, ts_ms: int, table: str, mode: str, properties: dict[str, str],
                               storage_options: dict[str, str] | None) -> int:
    """Replace the table at ``table_uri`` with the rows of the load's files ``paths`` (relative to the table's
    folder, of Arrow schema ``schema``) in one delta-spark commit recording ``position``; returns its version.
    See the module docstring for the checks made first."""
    wanted = encode_snapshot(position)
    identity = load_identity(paths, schema)
    existing, recorded = _recorded_snapshot(table_uri, storage_options)
    if recorded is not None and recorded > wanted:
        raise SinkError(
            f"{table_uri} holds a load of {table} taken at {decode_snapshot(recorded)}, later than this load's "
            f"position {position.key()}: the source's binlog positions went back (another server, or RESET MASTER); "
            "delta-spark can't record an older load position, so nothing was written",
            hint="move the table's folder aside (or delete it), then run the load of this table again")
    if existing is not None and recorded == wanted and (landed := landed_version(existing, identity)) is not None:
        log.info("%s: this load was committed already (version %d); not writing it again", table, landed)
        _drop_load_files(table_uri, paths, storage_options)
        return landed
    check_writable_names(schema, table_uri)
    session = delta_spark_session(storage_options)
    if existing is not None:
        make_writable(existing, table_uri, session)
        if ntz := timestamp_ntz_clause(existing, list(schema.types)):  # a re-load that brings a DATETIME column
            run_on_delta_spark(lambda: session.sql(f"ALTER TABLE delta.{quote(spark_path(table_uri))} {ntz}"),
                               f"the load commit of {table}", table_uri)
    from pyspark.sql.pandas.types import from_arrow_schema

    spark_schema = from_arrow_schema(schema, prefer_timestamp_ntz=True)
    metadata = {**snapshot_metadata(position, ts_ms=ts_ms, table=table, mode=mode), LOAD_ID_KEY: identity}
    # a table created by this write takes its properties from these
    defaults = {f"{TABLE_DEFAULTS}{key.removeprefix('delta.')}": value
                for key, value in {**properties, DELETION_VECTORS: "true"}.items()}
    options = {"overwriteSchema": "true"}
    if recorded != wanted:  # equal: another load at this very position (a reload of a quiet source) is recorded
        options.update(txnAppId=SNAPSHOT_APP_ID, txnVersion=str(wanted))
    files = [_literal_path(spark_path(f"{table_uri.rstrip('/')}/{path}")) for path in paths]

    def load_and_commit() -> None:
        rows = (session.read.schema(spark_schema).parquet(*files) if files
                else session.createDataFrame([], spark_schema))
        rows.write.format("delta").mode("overwrite").options(**options).save(spark_path(table_uri))

    def write(attempt: int) -> None:
        commit_info = json.dumps({**metadata, ATTEMPT_KEY: str(attempt)}, sort_keys=True)
        with session_settings(session, {USER_METADATA: commit_info, **defaults}):
            run_on_delta_spark(load_and_commit, f"the load commit of {table}", table_uri,
                               hint="nothing was committed; check the message, then run the load again")

    commit_with_retry(write, what=f"the load commit of {table}", table_uri=table_uri, conflicts=delta_conflicts())
    committed = DeltaTable(table_uri, storage_options=storage_options)
    version = landed_version(committed, identity)
    if version is None or committed.transaction_version(SNAPSHOT_APP_ID) != wanted:  # never claim a skipped load
        raise SinkError(f"delta-spark did not commit the load of {table} at {position.key()} to {table_uri}",
                        hint="run the load of this table again")
    _drop_load_files(table_uri, paths, storage_options)
    return version
