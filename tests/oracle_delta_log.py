"""The Delta log, replayed by the oracle itself (PROTOCOL.md in delta-io/delta), with no Delta library.

A table's newest snapshot is its newest complete checkpoint plus every commit after it:

- commits are ``_delta_log/<version>.json`` (20 digits), one action per line;
- a checkpoint is classic (``<v>.checkpoint.parquet``), multi-part (``<v>.checkpoint.<o>.<p>.parquet``, usable
  only with all ``p`` parts: a writer can die between parts) or v2 (``<v>.checkpoint.<uuid>.json|parquet``,
  whose file actions may sit in sidecars, ``_delta_log/_sidecars/*.parquet``). delta-spark 4.4 writes
  classic ones unless the table has ``delta.checkpointPolicy = v2`` (then v2 with sidecars) or the
  session sets ``spark.databricks.delta.checkpoint.partSize`` (multi-part);
- log compaction files (``<x>.<y>.compacted.json``) are optional for readers and are skipped, and so is
  ``_last_checkpoint`` (a hint the directory listing makes unnecessary).

Replay follows the protocol's "Action Reconciliation": a logical file is the pair (path, deletion vector's
unique id). A DML statement that deletes more rows of a file commits ``remove(path, old DV)`` and
``add(path, new DV)`` in one commit, in either order, so keying on the path alone would lose the file.
A checkpoint's ``remove`` actions are tombstones kept for VACUUM and take no part in the replay.

A table whose protocol needs a reader feature the oracle does not implement is refused, not misread.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow.fs as pafs
import pyarrow.parquet as pq

#: Reader features the oracle implements (column mapping: tests/oracle_delta_columns.py).
READER_FEATURES = {"deletionVectors", "typeWidening", "typeWidening-preview", "timestampNtz", "v2Checkpoint",
                   "vacuumProtocolCheck", "columnMapping"}
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTI_PART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2 = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")
#: What a checkpoint contributes to the snapshot (the rest, txn and domainMetadata, the oracle doesn't need).
_CHECKPOINT_COLUMNS = ("add", "metaData", "protocol", "sidecar")


@dataclass(frozen=True)
class LiveFile:
    """One logical file of the snapshot: a data file and the deletion vector of its deleted rows, if any."""

    path: str  # on the table's filesystem
    deletion_vector: Mapping[str, Any] | None = None
    #: ``add.partitionValues``: text or None, keyed by physical name under column mapping
    partition_values: Mapping[str, str | None] = field(default_factory=dict)


@dataclass
class DeltaSnapshot:
    """The table's live files, schema and configuration at its newest version, from the log alone."""

    version: int
    schema: dict[str, Any]
    configuration: dict[str, str] = field(default_factory=dict)
    partition_columns: list[str] = field(default_factory=list)  # logical names
    files: list[LiveFile] = field(default_factory=list)


def table_path(root: str, path: str) -> str:
    """A path from the log (URL-encoded, relative to the table root or an absolute URI) as a path on the
    table's filesystem (local: a plain path; S3: ``bucket/key``)."""
    parts = urlsplit(path)
    if parts.scheme in ("s3", "s3a"):
        return parts.netloc + unquote(parts.path)
    if parts.scheme == "file":
        return unquote(parts.path)
    if parts.scheme:
        raise AssertionError(f"oracle: cannot read {path!r} (local paths and s3:// only)")
    return posixpath.join(root, unquote(path))


def dv_unique_id(descriptor: Mapping[str, Any] | None) -> str | None:
    """A deletion vector's part of its logical file's key: ``<storageType><pathOrInlineDv>[@<offset>]``."""
    if not descriptor:
        return None
    base = f"{descriptor['storageType']}{descriptor['pathOrInlineDv']}"
    return base if descriptor.get("offset") is None else f"{base}@{descriptor['offset']}"


def replay_log(fs: pafs.FileSystem, root: str) -> DeltaSnapshot:
    log_dir = posixpath.join(root, "_delta_log")
    names = [posixpath.basename(e.path) for e in fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True))
             if e.type == pafs.FileType.File]
    commits = sorted((int(m[1]), name) for name in names if (m := _COMMIT.match(name)))
    checkpoint = _newest_complete_checkpoint(names)
    if not commits and checkpoint is None:
        raise AssertionError(f"oracle: {root} is not a Delta table (no _delta_log entries)")
    start = checkpoint[0] if checkpoint else -1
    later = [(version, name) for version, name in commits if version > start]
    if [v for v, _ in later] != list(range(start + 1, start + 1 + len(later))):
        raise AssertionError(f"oracle: {root}: the log has gaps after version {start}: {[v for v, _ in later]}")
    state = _State()
    if checkpoint:
        for action in _checkpoint_actions(fs, log_dir, checkpoint[1]):
            state.apply(action, in_checkpoint=True)
    for _, name in later:
        with fs.open_input_stream(posixpath.join(log_dir, name)) as stream:
            for line in stream.read().decode().splitlines():
                if line.strip():
                    state.apply(json.loads(line), in_checkpoint=False)
    return state.snapshot(root, version=later[-1][0] if later else start)


class _State:
    """The reconciled protocol, metadata and logical files while the log is replayed."""

    def __init__(self) -> None:
        self.protocol: Mapping[str, Any] | None = None
        self.metadata: Mapping[str, Any] | None = None
        self.files: dict[tuple[str, str | None], Mapping[str, Any]] = {}

    def apply(self, action: Mapping[str, Any], *, in_checkpoint: bool) -> None:
        if action.get("add"):
            add = action["add"]
            self.files[(add["path"], dv_unique_id(add.get("deletionVector")))] = add
        elif action.get("remove") and not in_checkpoint:
            remove = action["remove"]
            self.files.pop((remove["path"], dv_unique_id(remove.get("deletionVector"))), None)
        elif action.get("metaData"):
            self.metadata = action["metaData"]
        elif action.get("protocol"):
            self.protocol = action["protocol"]

    def snapshot(self, root: str, *, version: int) -> DeltaSnapshot:
        if self.metadata is None or self.protocol is None:
            raise AssertionError(f"oracle: {root} has no {'metaData' if self.metadata is None else 'protocol'} "
                                 "action")
        _check_protocol(root, self.protocol)
        files = [LiveFile(table_path(root, add["path"]), add.get("deletionVector") or None,
                          _as_dict(add.get("partitionValues")))
                 for _, add in sorted(self.files.items(), key=lambda item: (item[0][0], item[0][1] or ""))]
        return DeltaSnapshot(version, json.loads(self.metadata["schemaString"]),
                             _as_dict(self.metadata.get("configuration")),
                             list(self.metadata.get("partitionColumns") or ()), files)


def _check_protocol(root: str, protocol: Mapping[str, Any]) -> None:
    reader_version = protocol.get("minReaderVersion", 1)
    unknown = set(protocol.get("readerFeatures") or ()) - READER_FEATURES
    if reader_version > 3 or unknown:
        raise AssertionError(f"oracle: {root} needs reader version {reader_version} with features "
                             f"{sorted(unknown)}, which the oracle does not implement")


def _as_dict(value: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> dict[str, Any]:
    """A map from the log: a JSON object in a commit, a list of pairs when pyarrow reads a checkpoint."""
    return dict(value or {})


def _newest_complete_checkpoint(names: list[str]) -> tuple[int, list[str]] | None:
    """The newest checkpoint version whose files are all there, and the files of one checkpoint at it."""
    candidates: dict[int, list[list[str]]] = {}
    parts: dict[tuple[int, int], dict[int, str]] = {}
    for name in names:
        if m := (_CLASSIC.match(name) or _V2.match(name)):
            candidates.setdefault(int(m[1]), []).append([name])
        elif m := _MULTI_PART.match(name):
            parts.setdefault((int(m[1]), int(m[3])), {})[int(m[2])] = name
    for (version, count), found in parts.items():
        if sorted(found) == list(range(1, count + 1)):
            candidates.setdefault(version, []).append([found[i] for i in range(1, count + 1)])
    if not candidates:
        return None
    version = max(candidates)
    return version, min(candidates[version])  # several kinds at one version hold the same state: any will do


def _checkpoint_actions(fs: pafs.FileSystem, log_dir: str, files: list[str]) -> Iterator[Mapping[str, Any]]:
    for name in files:
        path = posixpath.join(log_dir, name)
        actions = _read_json_lines(fs, path) if name.endswith(".json") else _read_parquet_actions(fs, path)
        for action in actions:
            if action.get("sidecar"):
                # v2: the file actions live in sidecars, named relative to _delta_log/_sidecars
                sidecar = action["sidecar"]["path"]
                sidecar_path = (table_path("", sidecar) if urlsplit(sidecar).scheme
                                else posixpath.join(log_dir, "_sidecars", unquote(sidecar)))
                yield from _read_parquet_actions(fs, sidecar_path)
            else:
                yield action


def _read_json_lines(fs: pafs.FileSystem, path: str) -> Iterator[Mapping[str, Any]]:
    with fs.open_input_stream(path) as stream:
        text = stream.read().decode()
    return (json.loads(line) for line in text.splitlines() if line.strip())


def _read_parquet_actions(fs: pafs.FileSystem, path: str) -> list[dict[str, Any]]:
    with fs.open_input_file(path) as file:
        parquet = pq.ParquetFile(file)
        columns = [name for name in _CHECKPOINT_COLUMNS if name in parquet.schema_arrow.names]
        return parquet.read(columns=columns).to_pylist()
