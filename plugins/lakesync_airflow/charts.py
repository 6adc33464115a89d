"""Small inline SVG charts for the status view: drawn on the server, no script and nothing fetched.

Colours are CSS classes (``axis``, ``line``, ``bar``, ``limit``, ``ok``, ``bad``, ``none``) that the page
styles for light and dark mode. Each chart carries a ``<title>`` and its figures as text (start, end, the
largest value), so it reads without a mouse.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime

WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 420, 130, 46, 18, 16

Point = tuple[datetime, float | None]


def _x(when: datetime, start: datetime, end: datetime) -> float:
    span = (end - start).total_seconds() or 1.0
    return PAD_LEFT + (WIDTH - PAD_LEFT - 4) * min(1.0, max(0.0, (when - start).total_seconds() / span))


def _y(value: float, top: float) -> float:
    plot = HEIGHT - PAD_BOTTOM - PAD_TOP
    return PAD_TOP + plot * (1 - (value / top if top > 0 else 0))


def _label(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def _time(when: datetime, start: datetime, end: datetime) -> str:
    return when.strftime("%H:%M" if (end - start).total_seconds() <= 86_400 else "%m-%d %H:%M")


def _frame(kind: str, title: str, start: datetime, end: datetime, top: float | None, unit: str, body: str) -> str:
    """Axes, caption and ticks around ``body``; no value ticks when ``top`` is None (a status strip)."""
    bottom = HEIGHT - PAD_BOTTOM
    ticks = "" if top is None else (
        f"<text class='tick' x='{PAD_LEFT - 4}' y='{PAD_TOP + 4}' text-anchor='end'>{_label(top)}{unit}</text>"
        f"<text class='tick' x='{PAD_LEFT - 4}' y='{bottom}' text-anchor='end'>0</text>")
    return (
        f"<svg class='chart {kind}' role='img' viewBox='0 0 {WIDTH} {HEIGHT}' width='{WIDTH}' height='{HEIGHT}'>"
        f"<title>{html.escape(title)}</title>"
        f"<text class='caption' x='{PAD_LEFT}' y='11'>{html.escape(title)}</text>"
        f"<line class='axis' x1='{PAD_LEFT}' y1='{bottom}' x2='{WIDTH - 4}' y2='{bottom}'/>"
        f"<line class='axis' x1='{PAD_LEFT}' y1='{PAD_TOP}' x2='{PAD_LEFT}' y2='{bottom}'/>"
        f"{ticks}<text class='tick' x='{PAD_LEFT}' y='{HEIGHT - 3}'>{_time(start, start, end)}</text>"
        f"<text class='tick' x='{WIDTH - 4}' y='{HEIGHT - 3}' text-anchor='end'>{_time(end, start, end)}</text>"
        f"{body}</svg>"
    )


def line_chart(points: Sequence[Point], *, start: datetime, end: datetime, title: str, unit: str = "",
               limit: float | None = None) -> str:
    """A line of the known values (gaps where a value is None), scaled to them; a dashed ``limit`` line
    when the values reach it (a far-away limit would flatten the line)."""
    known = [v for _, v in points if v is not None]
    top = max([*known, 1.0]) * 1.1
    segments: list[list[str]] = []
    current: list[str] = []
    for when, value in points:
        if value is None:
            if current:
                segments.append(current)
            current = []
            continue
        current.append(f"{_x(when, start, end):.1f},{_y(value, top):.1f}")
    if current:
        segments.append(current)
    body = "".join(f"<polyline class='line' fill='none' points='{' '.join(s)}'/>" for s in segments if len(s) > 1)
    body += "".join(f"<circle class='dot' r='2' cx='{s[0].split(',')[0]}' cy='{s[0].split(',')[1]}'/>"
                    for s in segments if len(s) == 1)
    if limit is not None and limit <= top:
        y = _y(limit, top)
        body += f"<line class='limit' x1='{PAD_LEFT}' y1='{y:.1f}' x2='{WIDTH - 4}' y2='{y:.1f}'/>"
    if not known:
        body += f"<text class='tick' x='{WIDTH / 2}' y='{HEIGHT / 2}' text-anchor='middle'>no data yet</text>"
    return _frame("lag", title, start, end, top, unit, body)


def bar_chart(bars: Sequence[tuple[datetime, datetime, float]], *, start: datetime, end: datetime, title: str
              ) -> str:
    """One bar per interval ``(from, to, value)``."""
    top = max([v for *_, v in bars] + [1.0])
    body = ""
    for begin, finish, value in bars:
        x0, x1 = _x(begin, start, end), _x(finish, start, end)
        y = _y(value, top)
        body += (f"<rect class='bar' x='{x0:.1f}' y='{y:.1f}' width='{max(1.0, x1 - x0 - 0.5):.1f}' "
                 f"height='{HEIGHT - PAD_BOTTOM - y:.1f}'><title>{_label(value)}</title></rect>")
    return _frame("changes", title, start, end, top, "", body)


_CELL_KINDS = {"equal": "ok", "not_comparable": "info"}


def status_strip(cells: Sequence[tuple[datetime, datetime, str | None]], *, start: datetime, end: datetime,
                 title: str) -> str:
    """One coloured cell per interval: ``ok`` (equal), ``bad`` (mismatch, error), ``info`` (not comparable row
    for row: an append-only table, which is how it is, not a fault), ``none`` (no result)."""
    body = ""
    for begin, finish, status in cells:
        kind = _CELL_KINDS.get(status or "", "bad") if status is not None else "none"
        x0, x1 = _x(begin, start, end), _x(finish, start, end)
        body += (f"<rect class='{kind}' x='{x0:.1f}' y='{PAD_TOP + 20}' width='{max(1.0, x1 - x0):.1f}' "
                 f"height='40'><title>{html.escape(status or 'no validation')}</title></rect>")
    return _frame("validation", title, start, end, None, "", body)
