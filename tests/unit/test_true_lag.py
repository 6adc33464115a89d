"""The lag ``status`` and the health check judge, without servers: offsets against the last stable offset
(transaction markers are offsets too), the age of the oldest change not applied, and a silent relay."""

from __future__ import annotations

import json

from lakesync.core.positions import SourcePosition
from lakesync.events.envelope import ChangeEvent, encode, record_source_ts_ms
from lakesync.monitoring.attention import attention
from lakesync.monitoring.status import relay_silence
from lakesync.stream.lag import Backlog, next_offsets, topic_backlogs

A0, A1, B0 = ("db.a", 0), ("db.a", 1), ("db.b", 0)
NOW = 1_800_000_000_000


def test_a_stream_at_the_last_stable_offset_has_no_lag_however_old_the_last_change() -> None:
    backlogs = topic_backlogs({A0: 40, A1: 7}, {A0: 40, A1: 7}, {})
    assert backlogs == {"db.a": Backlog(0, None)}
    assert backlogs["db.a"].lag_seconds(NOW) == 0.0


def test_offsets_left_that_hold_only_a_commit_marker_are_nothing_pending() -> None:
    # the stream read up to the last record (offset 40); offset 41 is the transaction's commit marker
    assert topic_backlogs({A0: 41}, {A0: 42}, {A0: None}) == {"db.a": Backlog(0, None)}


def test_pending_offsets_add_up_per_topic_and_the_oldest_first_record_sets_the_lag() -> None:
    starts = {A0: 10, A1: 3, B0: 5}
    ends = {A0: 14, A1: 9, B0: 5}  # a: 4 + 6 offsets left (markers included); b: caught up
    oldest = {A0: NOW - 30_000, A1: NOW - 95_000}
    backlogs = topic_backlogs(starts, ends, oldest)
    assert backlogs == {"db.a": Backlog(10, NOW - 95_000), "db.b": Backlog(0, None)}
    assert backlogs["db.a"].lag_seconds(NOW) == 95.0


def test_a_pending_change_from_a_source_clock_ahead_of_ours_is_no_negative_lag() -> None:
    assert Backlog(3, NOW + 86_400_000).lag_seconds(NOW) == 0.0


def test_a_partition_with_only_markers_left_adds_nothing_next_to_one_with_changes() -> None:
    backlogs = topic_backlogs({A0: 10, A1: 3}, {A0: 12, A1: 4}, {A0: NOW - 5_000, A1: None})
    assert backlogs["db.a"] == Backlog(2, NOW - 5_000)


def test_the_stream_reads_a_partition_it_never_planned_from_the_first_offset_in_the_log() -> None:
    # A1 is new since the last batch; A0's unread records were removed by retention (lost, not pending)
    assert next_offsets({A0: 2, B0: 9}, {A0: 5, A1: 3, B0: 0}) == {A0: 5, A1: 3, B0: 9}


def test_a_records_commit_time_is_its_source_ts_in_lakesync_and_in_debezium_records() -> None:
    event = ChangeEvent(op="c", db="shop", table="t", before=None, after={"id": 1},
                        position=SourcePosition("binlog.000002", 400, 1), ts_ms=NOW - 7_000, key={"id": 1},
                        emitted_ms=NOW)
    _, value, _ = encode(event)
    assert record_source_ts_ms(value) == NOW - 7_000  # the source's commit, not the relay's send time
    wrapped = json.dumps({"schema": {}, "payload": {"op": "u", "source": {"ts_ms": NOW - 9_000}}})
    assert record_source_ts_ms(wrapped) == NOW - 9_000
    assert record_source_ts_ms(None) is None and record_source_ts_ms(b"not json") is None


def _status(*, lag: float | None, pending: int | None, silent: float | None, **relay) -> dict:
    return {"pipeline": "p", "tables": [{"table": "a", "stream": {"lag_seconds": lag, "pending": pending,
                                                                  "oldest_pending_at": "T"}}],
            "relay": {"position": "x", "updated_at": "U", "silent_seconds": silent, **relay}}


def test_an_idle_caught_up_pipeline_needs_no_attention() -> None:
    assert attention(_status(lag=0.0, pending=0, silent=4.0), lag_alert_seconds=60) == []


def test_pending_changes_older_than_the_threshold_alert_with_their_count() -> None:
    (item,) = attention(_status(lag=61.0, pending=7, silent=1.0), lag_alert_seconds=60)
    assert (item.level, item.table) == ("alert", "a")
    assert "7 offsets not applied" in item.message and "oldest committed at T" in item.message


def test_a_relay_silent_past_the_threshold_alerts_even_when_nothing_is_pending() -> None:
    assert attention(_status(lag=0.0, pending=0, silent=59.0), lag_alert_seconds=60) == []
    (item,) = attention(_status(lag=0.0, pending=0, silent=61.0), lag_alert_seconds=60)
    assert item.level == "alert" and item.table is None and "relay silent for 61 s" in item.message
    assert item.command == "lakesync relay --pipeline p"


def test_a_relay_that_never_ran_is_not_silent_and_a_waiting_relay_is_alive() -> None:
    assert relay_silence({"position": None}, NOW) is None
    assert relay_silence({"updated_ms": NOW - 90_000}, NOW) == 90.0
    waiting = {"updated_ms": NOW - 90_000, "backpressure": {"throttling": True, "updated_ms": NOW - 2_000}}
    assert relay_silence(waiting, NOW) == 2.0, "backpressure: it writes its state while it waits for the stream"
    released = {"updated_ms": NOW - 90_000, "backpressure": {"throttling": False, "updated_ms": NOW - 2_000}}
    assert relay_silence(released, NOW) == 90.0
