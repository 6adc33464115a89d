"""The columns lakesync adds to every Delta table it writes (only pyarrow, so anything may import it).

Target tables hold the source columns plus :data:`POS`, :data:`OP` and :data:`TS`; tombstone tables add
:data:`DELETED_MS`. :func:`with_lakesync_columns` is the one place that adds them to a schema (full load
and sink alike). docs/sink.md describes the layout.
"""

from typing import Literal, cast

import pyarrow as pa

#: The source position of the change (:meth:`lakesync.core.positions.SourcePosition.key`).
POS = "_lakesync_pos"
#: ``r`` snapshot read, ``c`` create, ``u`` update, ``d`` delete (``d`` only in changes and append logs).
OP = "_lakesync_op"
#: The source commit time of the change, in milliseconds since the epoch.
TS = "_lakesync_ts_ms"
#: When the delete happened at the source (ms); tombstones older than the retention horizon are purged.
DELETED_MS = "_lakesync_deleted_ms"

META_COLUMNS = (POS, OP, TS)
DELETE_OP = "d"
#: The lakesync columns as a table stores them: always set, by every writer.
META_FIELDS = (pa.field(POS, pa.string(), nullable=False), pa.field(OP, pa.string(), nullable=False),
               pa.field(TS, pa.int64(), nullable=False))


def with_lakesync_columns(source_schema: pa.Schema) -> pa.Schema:
    """The source columns (schema metadata kept) followed by lakesync's columns: a target table's schema."""
    schema = source_schema
    for field in META_FIELDS:
        schema = schema.append(field)
    return schema

EXACTLY_ONCE = "exactly_once"
APPEND_LOG = "append_log"


def table_semantics(configured: str | None, has_key: bool) -> Literal["exactly_once", "append_log"]:
    """The one default-semantics rule: the configured choice, else ``exactly_once`` with a key, ``append_log`` without."""
    chosen = configured or (EXACTLY_ONCE if has_key else APPEND_LOG)
    assert chosen in (EXACTLY_ONCE, APPEND_LOG), f"unknown semantics {chosen!r}"  # config validates it
    return cast(Literal["exactly_once", "append_log"], chosen)
