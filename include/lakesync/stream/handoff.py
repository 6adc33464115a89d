"""The handoff from the full load to the stream: where to start reading, and proof nothing is missing.

The full load recorded, per table, the position P its rows are tagged with. The stream may start at or
before P (the sink ignores changes that are not newer than a row's position), never after it: so for each
partition of a table's topic it starts at the first offset whose event is at or after P (a binary search by
the ``lakesync.pos`` header, :func:`lakesync.kafka.offsets.first_offset_at_or_after`).

Starting at that offset is only safe if the change log really reaches back to P. The relay records the
range of positions it has covered; if it began after P, the changes between P and its start were never
published and the stream refuses to start (:class:`GapError`), writing nothing.

Topics that Debezium's MySQL connector wrote have no relay progress and no ``lakesync.pos`` header: each
record's position comes from its ``source`` block (:func:`lakesync.events.debezium.position_from_source_block`),
and the topics themselves must show that they reach back to P: a table's topic is covered when its
earliest retained event sits at or before the table's handoff position (Debezium's initial snapshot events
do). A topic that is empty or starts after the load (a table that was empty then) is covered from the earliest DDL record
naming the table on Debezium's schema-change topic (``<topic.prefix>``, ``include.schema.changes=true``): the
connector's snapshot writes each captured table's CREATE TABLE there, at the snapshot's position, and captures
every change after it. A table that neither proves is refused, and the stream writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from confluent_kafka import Consumer, Message

from lakesync.core.config import Pipeline
from lakesync.core.errors import GapError, LakesyncError
from lakesync.events.debezium import position_from_source_block
from lakesync.events.envelope import message_position_key, record_position_key
from lakesync.kafka.offsets import (
    TP,
    earliest_offsets,
    first_offsets_at_or_after,
    first_position_keys,
    list_partitions,
    read_to_end,
)
from lakesync.recovery.marker import recovered_log_starts

GAP_HINT = "re-run the full load for these tables (`lakesync snapshot --pipeline {pipeline} --tables {tables}`)"


def check_coverage(pipeline_name: str, handoff_keys: Mapping[str, str], covered_from_key: str | None) -> None:
    """Refuse to start when the relay's coverage begins after a table's handoff position."""
    if covered_from_key is None:
        raise GapError(
            "gap between the full load and the change log: the relay has not published from any position yet "
            "(or the broker lost its data)",
            hint=f"start the relay (`lakesync relay --pipeline {pipeline_name}`) and start the stream again once it "
            "runs: with no stored progress the relay begins at the full load's position, so nothing needs to be "
            "loaded again. Only if the relay had run before and the broker lost its data, follow docs/operations.md "
            "(The broker lost its data)",
        )
    late = sorted(table for table, key in handoff_keys.items() if key < covered_from_key)
    if late:
        raise GapError(
            f"gap between the full load and the change log for {', '.join(late)}: the relay's change log starts "
            f"at {covered_from_key}, after the positions those tables were loaded at",
            hint=GAP_HINT.format(pipeline=pipeline_name, tables=",".join(late)),
        )


def check_handoff_coverage(pipeline_name: str, consumer: Consumer, tables: Mapping[str, tuple[str, str]],
                           covered_from_key: str | None, *, debezium_history: tuple[str, str] | None = None) -> None:
    """Refuse to start when the change log does not reach back to each table's handoff position.

    ``tables`` maps each table to its topic and handoff key. With the relay's progress
    (``covered_from_key``) that decides (:func:`check_coverage`); without it (Debezium's topics) each
    table's topic must hold an event at or before the handoff key, or Debezium's schema-change topic a DDL
    record of the table there (``debezium_history``: that topic and the source database), which covers a table
    that was empty at the load."""
    if not tables:
        return
    if covered_from_key is not None:
        check_coverage(pipeline_name, {table: key for table, (_, key) in tables.items()}, covered_from_key)
        return
    earliest: dict[str, str | None] = {}
    for table, (topic, _) in tables.items():
        keys = first_position_keys(consumer, list_partitions(consumer, topics=[topic]), message_position_key)
        earliest[table] = min(keys.values()) if keys else None
    if debezium_history is not None and any(first is None or first > tables[table][1]
                                            for table, first in earliest.items()):
        # an empty topic, or one whose first event came after the load (a table empty until then); only a
        # topic that never lost records: one that retention emptied or trimmed may have lost changes after it
        ddl = debezium_ddl_positions(consumer, *debezium_history)
        earliest = {table: min((key for key in (first, ddl.get(table) if _never_trimmed(consumer, tables[table][0])
                                                else None) if key is not None), default=None)
                    for table, first in earliest.items()}
    if not any(earliest.values()):
        raise GapError(
            "gap between the full load and the change log: there is no relay progress and the tables' topics hold "
            "no change event yet",
            hint=f"with lakesync's relay: start it (`lakesync relay --pipeline {pipeline_name}`) and start the "
            "stream again once it runs; it begins at the full load's position, so nothing needs to be loaded "
            "again. With Debezium's topics: start Debezium, then "
            + GAP_HINT.format(pipeline=pipeline_name, tables=",".join(sorted(tables)))
            + " (its events must reach back to the load; docs/events.md)",
        )
    late = sorted(table for table, (_, key) in tables.items() if (first := earliest[table]) is None or first > key)
    if late:
        raise GapError(
            "gap between the full load and the change log for " + ", ".join(late) + ": there is no relay progress "
            "(topics written by another connector, such as Debezium?) and these tables' topics do not start at or "
            "before the positions the tables were loaded at ("
            + ", ".join(f"{t}: topic starts at {earliest[t] or 'nothing'}, load at {tables[t][1]}" for t in late)
            + "). Debezium topics are accepted when they hold the table's events from at or before the load "
            "(for example Debezium's initial snapshot); see docs/events.md",
            hint=GAP_HINT.format(pipeline=pipeline_name, tables=",".join(late)),
        )


def _never_trimmed(consumer: Consumer, topic: str) -> bool:
    """Whether every partition of ``topic`` still starts at offset 0: no record was ever deleted from it."""
    return all(offset == 0 for offset in earliest_offsets(consumer, list_partitions(consumer, topics=[topic])).values())


def debezium_ddl_positions(consumer: Consumer, topic: str, database: str) -> dict[str, str]:
    """Per table of ``database``, the position key of the earliest record naming it (``tableChanges[].id``,
    ``"db"."table"``) on Debezium's schema-change topic ``topic``: where the connector's capture of the table
    begins (its snapshot writes the CREATE TABLE at the snapshot's position). Empty when the topic does not
    exist (``include.schema.changes=false``) or holds nothing of the database."""
    found: dict[str, str] = {}

    def note(msg: Message) -> None:
        try:
            document = json.loads(msg.value() or b"null")
        except ValueError:
            return
        payload = document.get("payload", document) if isinstance(document, dict) else None
        if not isinstance(payload, dict) or not payload.get("source"):
            return
        try:
            key = position_from_source_block(payload["source"], "r").key()  # row 0: the position itself
        except LakesyncError:
            return
        for change in payload.get("tableChanges") or ():
            db, _, table = str(change.get("id") or "").replace('"', "").partition(".")
            if db == database and table and key < found.get(table, "~"):
                found[table] = key

    read_to_end(consumer, list_partitions(consumer, topics=[topic]), note)  # a missing topic has none
    return found


def _position_refusing_unreadable_from(start_key: str) -> Callable[[Message], str | None]:
    """The search's position reader for a stream that starts at ``start_key``: records before it are passed
    over whatever they hold; the first record the stream would read is refused when it can't be read (a
    Debezium record without its schema), before any batch is planned."""
    def position_of(msg: Message) -> str | None:
        key = message_position_key(msg)
        if key is not None and key >= start_key:
            record_position_key(msg.value(), msg.headers())
        return key

    return position_of


def starting_offsets(consumer: Consumer, topic_keys: Mapping[str, str], pipeline: Pipeline
                     ) -> dict[str, dict[str, int]]:
    """For each topic, per partition, the first offset at or after the topic's handoff position key.

    Returned in Spark's ``startingOffsets`` JSON shape: ``{"topic": {"0": 42}}``. A topic that does not
    exist yet starts at its beginning (the relay creates it on the table's first change).
    """
    offsets: dict[str, dict[str, int]] = {}
    for topic, key in topic_keys.items():
        partitions = list_partitions(consumer, topics=[topic])
        found = first_offsets_at_or_after(consumer, partitions, key,
                                           position_of=_position_refusing_unreadable_from(key))
        _check_retained(consumer, found, key, pipeline.name, pipeline.pipeline_state_dir)
        offsets[topic] = {str(partition): offset for (_, partition), offset in found.items()}
    return offsets


def _check_retained(consumer: Consumer, found: Mapping[TP, int], key: str, pipeline_name: str,
                    state_dir: Path) -> None:
    """Refuse to start where records were deleted from a partition's start (retention, deleted records) and
    the first one left is past the position: the deleted ones may have been changes the stream needs. Not
    where ``lakesync recover`` deleted them (:mod:`lakesync.recovery.marker`): its replay follows."""
    starts = earliest_offsets(consumer, list(found))
    recovered = recovered_log_starts(state_dir)
    trimmed = [tp for tp, offset in found.items()
               if starts[tp] > 0 and offset == starts[tp] and recovered.get(tp) != starts[tp]]
    if not trimmed:
        return
    firsts = first_position_keys(consumer, trimmed, message_position_key)
    late = [tp for tp in trimmed if firsts.get(tp, key) > key]
    if late:
        raise GapError(
            "gap between the full load and the change log: records were deleted from the start of "
            + ", ".join(f"{t}/{p} (it now starts at offset {starts[(t, p)]}, position {firsts[(t, p)]})" for t, p in late)
            + f", after the position {key} the stream must start from (retention, or deleted records)",
            hint=f"re-run the full load (`lakesync snapshot --pipeline {pipeline_name} --restart`); raise "
                 "kafka.retention_hours above the time between a load and the stream's start")
