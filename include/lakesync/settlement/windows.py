"""Interval arithmetic for settlement syncs: which rows a data interval owns, and how it is named.

A settlement run for the data interval ``[start, end)`` reads the rows whose watermark lies in
``[start - w, end - w)``, where ``w`` is the safety window. Why shifted, not clipped: timestamps tie and
transactions commit out of order, so the newest ``w`` seconds before ``end`` may still receive rows stamped
inside them. Those seconds are left to the *next* interval, which starts its read exactly where this one
stopped. Consecutive intervals therefore tile the time line with no gap and no overlap, whatever ``w`` is,
and each row belongs to exactly one interval; re-running an interval reads the same window again.

Everything here is pure and keyed on the interval, never on the clock, so re-runs and backfills agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from lakesync.core.errors import ConfigError

#: Prefix of the Delta app transaction id each settled interval records (``settlement:<table>:<label>``).
APP_ID_PREFIX = "settlement"
#: Commit property names that mark a settlement commit in the table history.
PROP_PREFIX = "lakesync.settlement."


@dataclass(frozen=True)
class SettlementWindow:
    """A data interval and the watermark range it reads (``read_from`` inclusive, ``read_to`` exclusive)."""

    interval_start: datetime
    interval_end: datetime
    read_from: datetime
    read_to: datetime

    @property
    def label(self) -> str:
        """A stable, sortable name of the interval, e.g. ``20261119T020000Z``: the key of re-runs."""
        return self.interval_start.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")

    def source_bounds(self, timezone: str) -> tuple[datetime, datetime]:
        """The read range as naive datetimes in the source's wall-clock ``timezone``.

        MySQL ``DATETIME`` columns have no zone: the pipeline's ``settlement.timezone`` says which one
        their values are written in.
        """
        zone = ZoneInfo(timezone)
        return (
            self.read_from.astimezone(zone).replace(tzinfo=None),
            self.read_to.astimezone(zone).replace(tzinfo=None),
        )

    def commit_properties(self) -> dict[str, str]:
        """The begin/end markers written into the settlement commit (and looked up again on re-runs)."""
        return {
            f"{PROP_PREFIX}interval_start": self.interval_start.astimezone(UTC).isoformat(),
            f"{PROP_PREFIX}interval_end": self.interval_end.astimezone(UTC).isoformat(),
            f"{PROP_PREFIX}read_from": self.read_from.astimezone(UTC).isoformat(),
            f"{PROP_PREFIX}read_to": self.read_to.astimezone(UTC).isoformat(),
        }


def _aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(
            f"{name} {value.isoformat()} has no time zone",
            hint="pass timezone-aware datetimes (Airflow's data_interval_start/end are)",
        )
    return value


def settlement_window(interval_start: datetime, interval_end: datetime, *, safety_window: timedelta
                      ) -> SettlementWindow:
    """The window of data interval ``[interval_start, interval_end)`` with ``safety_window`` held back."""
    start = _aware(interval_start, "interval start")
    end = _aware(interval_end, "interval end")
    if end <= start:
        raise ConfigError(
            f"the data interval [{start.isoformat()}, {end.isoformat()}) is empty",
            hint="settlement needs a timetable with real data intervals (CronDataIntervalTimetable)",
        )
    if safety_window < timedelta(0):
        raise ConfigError(f"safety window must be >= 0, got {safety_window}")
    return SettlementWindow(start, end, start - safety_window, end - safety_window)


def app_id(table: str, window: SettlementWindow) -> str:
    """The Delta app transaction id of ``table``'s settlement of ``window``: its version counts the runs."""
    return f"{APP_ID_PREFIX}:{table}:{window.label}"


def schedule_intervals(schedule: str, timezone: str, start: datetime, end: datetime
                       ) -> list[tuple[datetime, datetime]]:
    """The data intervals of cron ``schedule`` (in ``timezone``) that lie inside ``[start, end]``.

    The same intervals Airflow's ``CronDataIntervalTimetable`` gives the settlement DAG, so the CLI and a
    backfill settle identical intervals."""
    from croniter import croniter

    zone = ZoneInfo(timezone)
    cursor = croniter(schedule, _aware(start, "from").astimezone(zone) - timedelta(microseconds=1))
    intervals: list[tuple[datetime, datetime]] = []
    begin = cursor.get_next(datetime)
    while True:
        finish = cursor.get_next(datetime)
        if finish > end:
            return intervals
        intervals.append((begin.astimezone(UTC), finish.astimezone(UTC)))
        begin = finish
