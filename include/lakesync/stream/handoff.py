"""The handoff from the full load to the stream: where to start reading, and proof nothing is missing.

The full load recorded, per table, the position P its rows are tagged with. The stream may start at or
before P (the sink ignores changes that are not newer than a row's position), never after it: so for each
partition of a table's topic it starts at the first offset whose event is at or after P (a binary search by
the ``lakesync.pos`` header, :func:`lakesync.kafka.offsets.first_offset_at_or_after`).

Starting at that offset is only safe if the change log really reaches back to P. The relay records the
range of positions it has covered; if it began after P, the changes between P and its start were never
published and the stream refuses to start (:class:`GapError`), writing nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer

from lakesync.core.errors import GapError
from lakesync.kafka.offsets import first_offsets_at_or_after, list_partitions

GAP_HINT = "re-run the full load for these tables (`lakesync snapshot --pipeline {pipeline} --tables {tables}`)"


def check_coverage(pipeline_name: str, handoff_keys: Mapping[str, str], covered_from_key: str | None) -> None:
    """Refuse to start when the relay's coverage begins after a table's handoff position."""
    if covered_from_key is None:
        raise GapError(
            "gap between the full load and the change log: the relay has not published from any position yet "
            "(or the broker lost its data)",
            hint="start the relay (`lakesync relay --pipeline " + pipeline_name + "`), then "
            + GAP_HINT.format(pipeline=pipeline_name, tables=",".join(sorted(handoff_keys))),
        )
    late = sorted(table for table, key in handoff_keys.items() if key < covered_from_key)
    if late:
        raise GapError(
            f"gap between the full load and the change log for {', '.join(late)}: the relay's change log starts "
            f"at {covered_from_key}, after the positions those tables were loaded at",
            hint=GAP_HINT.format(pipeline=pipeline_name, tables=",".join(late)),
        )


def starting_offsets(consumer: Consumer, topic_keys: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """For each topic, per partition, the first offset at or after the topic's handoff position key.

    Returned in Spark's ``startingOffsets`` JSON shape: ``{"topic": {"0": 42}}``. A topic that does not
    exist yet starts at its beginning (the relay creates it on the table's first change).
    """
    offsets: dict[str, dict[str, int]] = {}
    for topic, key in topic_keys.items():
        found = first_offsets_at_or_after(consumer, list_partitions(consumer, topics=[topic]), key)
        offsets[topic] = {str(partition): offset for (_, partition), offset in found.items()}
    return offsets
