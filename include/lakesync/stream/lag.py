"""How many Kafka records the stream has still to apply, read from its checkpoint: what the relay throttles on.

Spark writes ``offsets/<batch>`` before a micro-batch and ``commits/<batch>`` after the batch's Delta
commits; the offsets of the newest committed batch are the next record the stream will read per
partition. Everything from there to the log end is the stream's lag in records. Reading files and two
watermarks per partition is cheap enough to do every few seconds, and needs nothing from Spark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from lakesync.kafka.offsets import TP


def committed_offsets(checkpoint: Path) -> dict[TP, int] | None:
    """The next offset per partition after the newest committed batch, or None before the first commit.

    The offset file is ``v1``, a metadata line, then one JSON line per source (lakesync's streams have
    one); a source that has no offset yet is written as ``-``.
    """
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return None
    batches = sorted((int(entry.name) for entry in commits.iterdir() if entry.name.isdigit()), reverse=True)
    for batch in batches:
        path = checkpoint / "offsets" / str(batch)
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue  # a cleaned-up batch; an older commit still tells where the stream is
        offsets: dict[TP, int] = {}
        for line in lines[2:]:
            if line.strip() and line.strip() != "-":
                for topic, parts in json.loads(line).items():
                    offsets.update({(topic, int(partition)): int(offset) for partition, offset in parts.items()})
        return offsets
    return None


def records_behind(committed: Mapping[TP, int], ends: Mapping[TP, int]) -> int:
    """Records between the stream's committed offsets and the log ends of the same partitions."""
    return sum(max(0, ends.get(tp, offset) - offset) for tp, offset in committed.items())
