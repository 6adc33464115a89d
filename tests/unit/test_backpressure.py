"""Backpressure decisions and the stream's lag from its checkpoint, without servers."""

from __future__ import annotations

import json
from pathlib import Path

from lakesync.relay.backpressure import Backpressure, load_state
from lakesync.stream.lag import committed_offsets, records_behind


def write_batch(checkpoint: Path, batch: int, offsets: dict[str, dict[str, int]], *, committed: bool = True) -> None:
    """A micro-batch as Spark records it: ``offsets/<n>`` (version, metadata, one line per source), then
    ``commits/<n>`` once the batch's sink work is done."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(
        "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}) + "\n" + json.dumps(offsets))
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_lag_counts_from_the_newest_committed_batch_not_the_newest_planned_one(tmp_path: Path) -> None:
    write_batch(tmp_path, 0, {"t": {"0": 10, "1": 4}})
    write_batch(tmp_path, 1, {"t": {"0": 20, "1": 9}})
    write_batch(tmp_path, 2, {"t": {"0": 90, "1": 9}}, committed=False)  # planned, not applied yet
    committed = committed_offsets(tmp_path)
    assert committed == {("t", 0): 20, ("t", 1): 9}
    assert records_behind(committed, {("t", 0): 100, ("t", 1): 9}) == 80


def test_no_lag_is_known_before_the_stream_commits_its_first_batch(tmp_path: Path) -> None:
    assert committed_offsets(tmp_path) is None
    write_batch(tmp_path, 0, {"t": {"0": 5}}, committed=False)
    assert committed_offsets(tmp_path) is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _backpressure(tmp_path: Path, lags: list[int | None], *, max_lag: int | None = 100) -> tuple[Backpressure, list]:
    clock, seen = FakeClock(), []

    def lag() -> int | None:
        value = lags.pop(0) if len(lags) > 1 else lags[0]
        seen.append((load_state(tmp_path) or {}).get("throttling"))
        return value

    return Backpressure(tmp_path, max_lag=max_lag, check_seconds=1.0, lag=lag, sleep=clock.sleep, clock=clock), seen


def test_relay_pauses_above_the_bound_waits_while_over_it_and_is_released_below(tmp_path: Path) -> None:
    backpressure, seen = _backpressure(tmp_path, [50, 150, 150, 140, 120, 90])
    assert not backpressure.must_pause()  # 50: under the bound
    assert not backpressure.must_pause()  # checked again only after check_seconds
    backpressure._clock.sleep(1.0)  # type: ignore[attr-defined]
    assert backpressure.must_pause()  # 150
    backpressure.wait(lambda: False)
    assert seen[-2] is True  # the state said "throttling" while it waited
    state = load_state(tmp_path)
    assert state is not None and state["throttling"] is False and state["lag_records"] == 90
    assert backpressure.pauses == 1 and backpressure.throttled_seconds == 3.0


def test_a_stop_request_ends_the_wait(tmp_path: Path) -> None:
    backpressure, _ = _backpressure(tmp_path, [500])
    stops = iter([False, True])
    backpressure.wait(lambda: next(stops))
    assert backpressure.throttled_seconds == 1.0


def test_no_bound_or_no_committed_batch_never_pauses(tmp_path: Path) -> None:
    unbounded, _ = _backpressure(tmp_path, [10**9], max_lag=None)
    unknown, _ = _backpressure(tmp_path, [None])
    assert not unbounded.must_pause() and not unknown.must_pause()
