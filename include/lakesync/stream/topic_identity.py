"""Kafka topic ids kept with the stream's checkpoint, so a recreated topic is seen as the gap it is.

Spark's checkpoint holds offsets, and an offset only means something in the topic it was read from. When the
broker loses its data (the embedded broker keeps everything in memory) or a topic is deleted, the relay
creates the topics again and, its stored progress gone too, republishes from the full load's position: the
new log may well reach past the checkpoint's offsets, and resuming there would silently skip changes. The
offsets can't tell; the topic id (a UUID the broker gives each topic at creation) can. The stream records
the ids when it starts and refuses to resume when a recorded topic is gone or has a new id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from lakesync.core.errors import GapError
from lakesync.core.state_files import write_json_atomically

TOPIC_IDS_FILE = "lakesync_topic_ids.json"
#: what a broker without topic ids answers (Kafka < 2.8): such ids prove nothing and are not recorded
_NO_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def topic_ids(client: Mapping[str, str], topics: Sequence[str], *, timeout: float = 15.0) -> dict[str, str]:
    """The current id of each of ``topics`` that exists."""
    admin = AdminClient(dict(client))
    existing = set(admin.list_topics(timeout=timeout).topics)
    wanted = [topic for topic in topics if topic in existing]
    if not wanted:
        return {}
    futures = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout)
    ids = {name: str(future.result().topic_id) for name, future in futures.items()}
    return {name: topic_id for name, topic_id in ids.items() if topic_id and topic_id != _NO_ID}


def check_topic_identity(checkpoint: Path, current: Mapping[str, str], *, pipeline: str, fresh: bool) -> None:
    """Record ``current`` for a fresh checkpoint; for a resumed one, fail on a vanished or recreated topic.

    Topics that appeared since the last start are added, so the check covers them from then on.
    """
    path = checkpoint / TOPIC_IDS_FILE
    known: dict[str, str] = {} if fresh or not path.exists() else json.loads(path.read_text())
    changed = sorted(topic for topic, topic_id in known.items() if current.get(topic) != topic_id)
    if changed:
        raise GapError(
            f"the stream's checkpoint read topics that are gone or were recreated since: {', '.join(changed)} "
            "(the broker lost its data, or the topics were deleted); its offsets no longer point at the same "
            "changes",
            hint=f"stop the relay and run `lakesync recover --pipeline {pipeline}`: it replays what the binlog still "
            "has and re-loads only the tables it can't cover (or re-load everything: `lakesync snapshot --pipeline "
            f"{pipeline} --restart`, then remove {checkpoint})",
        )
    write_json_atomically(path, {**current, **known}, sort_keys=True)
