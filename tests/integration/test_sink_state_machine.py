"""The Delta sink as a state machine against a plain in-memory model of the source table (issue 10 b).

Hypothesis drives random sequences of: source inserts, updates and deletes per key; relay resends
(duplicates of recent events at later offsets); stream batches over the next offsets, delivered in a
shuffled order; crashes between the Delta commit and the checkpoint; identical replays of old batches;
copies of the checkpoint taken and restored later (which re-plans batch ids over other offset ranges).

Both semantics run side by side on local Delta tables. Whatever happened, the union of the offset ranges
ever applied is a prefix ``topic[:high]`` of the topic, so after every step:

* the ``exactly_once`` table's live rows (read with the oracle's own reader, not the sink) equal the model
  at that prefix: per key, the newest event by position, over the snapshot;
* the ``append_log`` table holds each position of that prefix exactly once.

Budget: the ``ci`` profile of tests/conftest.py (fixed seeds); LAKESYNC_HYPOTHESIS_PROFILE=thorough for more.
A failure prints the steps and a reproduction blob.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lakesync.core.positions import SourcePosition
from lakesync.sink import OP, POS, TS, DeltaSink
from tests.oracle import read_delta

SNAPSHOT = SourcePosition("binlog.000003", 5000)
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
INITIAL = {1: "a0", 2: "b0", 3: "c0"}
KEYS = st.integers(min_value=1, max_value=6)
APP_ID = "lakesync-stream-model"


@dataclass(frozen=True)
class Event:
    key: int
    name: str | None
    offset: int  # binlog offset: the position of the change
    op: str

    @property
    def position(self) -> str:
        return SourcePosition("binlog.000003", self.offset, 1).key()


@dataclass(frozen=True)
class Checkpoint:
    next_batch: int = 0
    next_offset: int = 0  # Kafka offset into the topic


def to_arrow(events: list[Event]) -> pa.Table:
    return pa.table({
        "id": pa.array([e.key for e in events], pa.int64()),
        "name": pa.array([e.name for e in events], pa.string()),
        POS: pa.array([e.position for e in events], pa.string()),
        OP: pa.array([e.op for e in events], pa.string()),
        TS: pa.array([e.offset for e in events], pa.int64()),
    })


def expected_rows(topic: list[Event]) -> dict[int, str]:
    """The model at a topic prefix: per key the newest event by position wins, over the snapshot."""
    rows = dict(INITIAL)
    newest: dict[int, Event] = {}
    for event in topic:
        if event.key not in newest or event.offset > newest[event.key].offset:
            newest[event.key] = event
    for key, event in newest.items():
        if event.op == "d":
            rows.pop(key, None)
        else:
            rows[key] = event.name  # type: ignore[assignment]
    return rows


class SinkMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="sink-model-"))
        self.merged = DeltaSink(str(self.root / "lake" / "orders"), key_columns=["id"])
        self.logged = DeltaSink(str(self.root / "lake" / "events"), key_columns=[], semantics="append_log")
        snapshot = pa.record_batch([pa.array(list(INITIAL), pa.int64()), pa.array(list(INITIAL.values()))],
                                   schema=SCHEMA)
        for sink in (self.merged, self.logged):
            sink.write_snapshot([snapshot], schema=SCHEMA, position=SNAPSHOT, snapshot_ts_ms=1)
        self.source = dict(INITIAL)
        self.topic: list[Event] = []
        self.next_position = SNAPSHOT.offset + 10
        self.checkpoint = Checkpoint()
        self.copies: list[Checkpoint] = []
        self.applied: list[tuple[int, list[Event]]] = []
        self.high = 0  # the end of the applied prefix of the topic

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the source and the relay -----------------------------------------------------------------------

    def _emit(self, key: int, name: str | None, op: str) -> None:
        self.topic.append(Event(key, name, self.next_position, op))
        self.next_position += 10

    @rule(key=KEYS, name=st.sampled_from(["x", "y", "z"]))
    def write_row(self, key: int, name: str) -> None:
        op = "u" if key in self.source else "c"
        value = f"{name}{self.next_position}"
        self.source[key] = value
        self._emit(key, value, op)

    @rule(key=KEYS)
    def delete_row(self, key: int) -> None:
        if key in self.source:
            del self.source[key]
            self._emit(key, None, "d")

    @precondition(lambda self: self.topic)
    @rule(back=st.integers(min_value=1, max_value=4))
    def relay_resends(self, back: int) -> None:
        """A relay crash resends its last events: the same positions again, at later offsets."""
        self.topic.extend(self.topic[-back:])

    # -- the stream -------------------------------------------------------------------------------------

    @rule(size=st.integers(min_value=1, max_value=5), seed=st.integers(0, 1000), crash=st.booleans())
    def run_batch(self, size: int, seed: int, crash: bool) -> None:
        start = self.checkpoint.next_offset
        end = min(len(self.topic), start + size)
        if end == start:
            return
        events = self.topic[start:end]
        random.Random(seed).shuffle(events)
        batch = self.checkpoint.next_batch
        for sink in (self.merged, self.logged):
            sink.apply_changes(to_arrow(events), app_id=APP_ID, batch_version=batch)
        self.applied.append((batch, events))
        self.high = max(self.high, end)
        if not crash:  # a crash between the Delta commit and the checkpoint leaves the checkpoint behind
            self.checkpoint = replace(self.checkpoint, next_batch=batch + 1, next_offset=end)

    @precondition(lambda self: self.applied)
    @rule(data=st.data())
    def replay_an_old_batch(self, data: st.DataObject) -> None:
        batch, events = data.draw(st.sampled_from(self.applied))
        for sink in (self.merged, self.logged):
            sink.apply_changes(to_arrow(events), app_id=APP_ID, batch_version=batch)

    @rule()
    def copy_checkpoint(self) -> None:
        self.copies.append(self.checkpoint)

    @precondition(lambda self: self.copies)
    @rule(data=st.data())
    def restore_an_older_checkpoint(self, data: st.DataObject) -> None:
        self.checkpoint = data.draw(st.sampled_from(self.copies))

    # -- what must always hold --------------------------------------------------------------------------

    @invariant()
    def merged_table_equals_the_model(self) -> None:
        _, rows = read_delta(self.merged.table_uri)
        assert {row["id"]: row["name"] for row in rows} == expected_rows(self.topic[: self.high])
        assert len(rows) == len({row["id"] for row in rows})

    @invariant()
    def append_log_holds_each_position_once(self) -> None:
        _, rows = read_delta(self.logged.table_uri, lakesync_columns=True)
        logged = Counter(row[POS] for row in rows if row[OP] != "r")
        assert set(logged) == {event.position for event in self.topic[: self.high]}
        assert all(count == 1 for count in logged.values()), logged


TestSinkStateMachine = SinkMachine.TestCase
# the state machine's own budget within the active profile: 40 programs of 30 steps in CI (about 1,000 steps)
TestSinkStateMachine.settings = settings(settings.default, max_examples=max(40, settings.default.max_examples))
