"""The interval arithmetic of settlement syncs: windows tile time, the safety window shifts, names are stable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from itertools import pairwise

import pytest

from lakesync.core.errors import ConfigError
from lakesync.settlement.windows import app_id, schedule_intervals, settlement_window

DAY = timedelta(days=1)
START = datetime(2026, 11, 19, 2, 0, tzinfo=UTC)


def test_window_is_the_interval_shifted_back_by_the_safety_window():
    window = settlement_window(START, START + DAY, safety_window=timedelta(seconds=60))
    assert window.read_from == START - timedelta(seconds=60)
    assert window.read_to == START + DAY - timedelta(seconds=60)


def test_consecutive_intervals_tile_with_no_gap_and_no_overlap():
    safety = timedelta(minutes=5)
    windows = [settlement_window(START + k * DAY, START + (k + 1) * DAY, safety_window=safety) for k in range(5)]
    for earlier, later in pairwise(windows):
        assert earlier.read_to == later.read_from


def test_safety_window_longer_than_the_interval_still_tiles():
    hour = timedelta(hours=1)
    first = settlement_window(START, START + hour, safety_window=2 * hour)
    second = settlement_window(START + hour, START + 2 * hour, safety_window=2 * hour)
    assert first.read_to == second.read_from == START - hour


def test_zero_safety_window_reads_exactly_the_interval():
    window = settlement_window(START, START + DAY, safety_window=timedelta(0))
    assert (window.read_from, window.read_to) == (START, START + DAY)


def test_label_and_app_id_are_keyed_on_the_interval_in_utc():
    cet = timezone(timedelta(hours=1))
    window = settlement_window(START.astimezone(cet), (START + DAY).astimezone(cet), safety_window=timedelta(0))
    assert window.label == "20261119T020000Z"
    assert app_id("transactions", window) == "settlement:transactions:20261119T020000Z"


def test_source_bounds_are_wall_clock_in_the_source_timezone():
    window = settlement_window(START, START + DAY, safety_window=timedelta(seconds=30))
    low, high = window.source_bounds("Europe/Berlin")
    assert low == datetime(2026, 11, 19, 2, 59, 30) and low.tzinfo is None
    assert high == datetime(2026, 11, 20, 2, 59, 30)


def test_commit_properties_mark_begin_and_end_of_the_interval():
    props = settlement_window(START, START + DAY, safety_window=timedelta(0)).commit_properties()
    assert props["lakesync.settlement.interval_start"] == "2026-11-19T02:00:00+00:00"
    assert props["lakesync.settlement.interval_end"] == "2026-11-20T02:00:00+00:00"


@pytest.mark.parametrize("start,end", [(START, START), (START + DAY, START)])
def test_empty_or_reversed_interval_is_refused(start, end):
    with pytest.raises(ConfigError, match="is empty"):
        settlement_window(start, end, safety_window=timedelta(0))


def test_naive_datetimes_are_refused():
    with pytest.raises(ConfigError, match="no time zone"):
        settlement_window(START.replace(tzinfo=None), START + DAY, safety_window=timedelta(0))


def test_negative_safety_window_is_refused():
    with pytest.raises(ConfigError, match=">= 0"):
        settlement_window(START, START + DAY, safety_window=timedelta(seconds=-1))


def test_schedule_intervals_are_the_cron_intervals_inside_the_range():
    intervals = schedule_intervals("0 2 * * *", "UTC", START, START + 3 * DAY)
    assert intervals == [(START + k * DAY, START + (k + 1) * DAY) for k in range(3)]


def test_schedule_intervals_skip_a_partial_interval_at_either_end():
    intervals = schedule_intervals("0 2 * * *", "UTC", START + timedelta(hours=1), START + 2 * DAY + timedelta(hours=1))
    assert intervals == [(START + DAY, START + 2 * DAY)]
