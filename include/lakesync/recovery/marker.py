"""The log starts a recovery left on the pipeline's topics (``recovery.json`` in the pipeline's state folder).

A recovery deletes every record of the topics before the relay replays (:mod:`lakesync.recovery.replay`), so a
new stream finds each partition starting past offset 0 with a first record that may be later than its table's
handoff. In general that means records the stream needed were deleted (retention) and the stream refuses
(:func:`lakesync.stream.handoff.starting_offsets`); at exactly the start a recovery left, the replay that
follows holds everything from the handoff on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from lakesync.core.state_files import write_json_atomically

RECOVERY_FILE = "recovery.json"


def save_log_starts(state_dir: Path, starts: Mapping[tuple[str, int], int], *, relay_from: str, at: str) -> None:
    write_json_atomically(state_dir / RECOVERY_FILE, {
        "recovered_at": at, "relay_from": relay_from,
        "log_starts": [{"topic": topic, "partition": partition, "start": start}
                       for (topic, partition), start in sorted(starts.items())],
    })


def recovered_log_starts(state_dir: Path) -> dict[tuple[str, int], int]:
    """Per partition, the start offset the last recovery left (empty without one, or when unreadable)."""
    try:
        document = json.loads((state_dir / RECOVERY_FILE).read_text())
        return {(entry["topic"], int(entry["partition"])): int(entry["start"]) for entry in document["log_starts"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}
