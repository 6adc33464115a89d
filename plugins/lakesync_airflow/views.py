"""The status view: a small FastAPI app the Airflow 3 API server mounts at ``/lakesync``.

``/lakesync/status`` is an HTML page shown inside the Airflow UI (the plugin's external view): per pipeline
what needs attention (stopped tables with the stream's message and the command that recovers them), links
to the pipeline's DAGs, and per table its current state and charts of the last hours or days (lag, changes
per interval, validation results) from the history table (:mod:`lakesync.monitoring.history`).
``?range=6h`` (default), ``24h`` or ``7d`` picks the window. ``/lakesync/api/status`` gives the same data as
JSON. Pages are rendered on the server with inline SVG: no JavaScript build, nothing fetched from the
internet. The page follows ``prefers-color-scheme`` and, when it can see it, Airflow's own light/dark
choice; it refreshes itself every 30 seconds.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse

from lakesync.core.config import load_pipeline_file, pipeline_files
from lakesync.core.errors import LakesyncError
from lakesync_airflow.charts import bar_chart, line_chart, status_strip
from lakesync_airflow.page import page
from lakesync_airflow.status import pipeline_status

app = FastAPI(title="lakesync status", description="Pipelines, tables, lag, history and what needs attention")

RANGES = {"6h": timedelta(hours=6), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
BUCKETS = 72
#: the ``?range=`` parameter (a plain default, so the functions can also be called directly)
Window = Annotated[str, Query(pattern="^(6h|24h|7d)$")]


def all_status(window: timedelta = RANGES["6h"]) -> list[dict[str, Any]]:
    """Every pipeline's status; a pipeline that cannot be read shows its error instead of hiding the rest."""
    result = []
    for file in pipeline_files():
        try:
            result.append(pipeline_status(load_pipeline_file(file), history_window=window))
        except LakesyncError as exc:
            result.append({"pipeline": file.stem, "error": str(exc), "tables": []})
    return result


@app.get("/api/status")
def status_json(range: Window = "6h") -> list[dict[str, Any]]:
    return all_status(RANGES[range])


def _esc(value: Any) -> str:
    return "—" if value in (None, "") else html.escape(str(value))


@dataclass
class Bucket:
    start: datetime
    end: datetime
    rows: int = 0
    changes: int = 0
    lag: float | None = None
    validation: str | None = None


def buckets(rows: list[dict[str, Any]], start: datetime, end: datetime) -> list[Bucket]:
    """History rows of one table folded into :data:`BUCKETS` equal intervals: changes summed, lag the
    largest, validation the last known; a bucket without rows has no values."""
    width = (end - start) / BUCKETS
    out = [Bucket(start + width * i, start + width * (i + 1)) for i in range(BUCKETS)]
    for row in rows:
        bucket = out[min(BUCKETS - 1, max(0, int((row["interval_end"] - start) / width)))]
        bucket.rows += 1
        bucket.changes += row["changes"]
        if row["lag_seconds"] is not None:
            bucket.lag = max(bucket.lag or 0.0, row["lag_seconds"])
        bucket.validation = row["validation_status"] or bucket.validation
    return out


def _charts(table: str, rows: list[dict[str, Any]], start: datetime, end: datetime, limit: float) -> str:
    folded = buckets(rows, start, end)
    folded = [b for b in folded if b.rows]
    lag = line_chart([(b.end, b.lag) for b in folded], start=start, end=end, unit=" s", limit=limit,
                     title=f"{table}: lag (seconds, largest per interval)")
    changes = bar_chart([(b.start, b.end, b.changes) for b in folded], start=start, end=end,
                        title=f"{table}: changes applied per interval")
    checks = status_strip([(b.start, b.end, b.validation) for b in folded], start=start, end=end,
                          title=f"{table}: validation result")
    return f"<div class='charts'>{lag}{changes}{checks}</div>"


def _state(row: dict[str, Any]) -> tuple[str, str]:
    from lakesync.monitoring.attention import table_state

    state = table_state(row)
    return state, {"stopped": "bad", "lagging": "bad", "streaming": "ok"}.get(state, "none")


#: a validation result in words where its code name would read like a fault
_RESULT_WORDS = {"not_comparable": "not comparable row for row (append-only: no key)"}


def _table_card(row: dict[str, Any], history: list[dict[str, Any]], start: datetime, end: datetime,
                limit: float, stem: str | None) -> str:
    from lakesync.monitoring.attention import without_command
    from lakesync.monitoring.display import position_text

    stream, load = row.get("stream") or {}, row.get("full_load") or {}
    checked, settled = row.get("last_validation") or {}, row.get("last_settlement") or {}
    state, kind = _state(row)
    lag = stream.get("lag_seconds")
    facts = [
        ("semantics", row.get("semantics")), ("lag", None if lag is None else f"{lag:,.1f} s"),
        ("applied position", position_text(row.get("applied_position"), stem)),
        ("last batch", stream.get("last_batch_at")),
        ("full load", f"{load.get('status')}, {load.get('rows')} rows" if load else None),
        ("last validation", f"{_RESULT_WORDS.get(checked.get('status') or '', checked.get('status'))} at "
                            f"{checked.get('finished_at')}" if checked else None),
        ("last settled interval", f"{settled['interval_start'][:16]} → {(settled.get('interval_end') or '')[:16]} "
                                  f"(run {settled.get('run')})" if settled else None),
    ]
    stopped = ""
    if stream.get("stopped_reason"):  # its command is in the attention list above, once
        stopped = f"<div class='stopped'><b>stopped</b><pre>{_esc(without_command(stream['stopped_reason']))}</pre></div>"
    dl = "".join(f"<dt>{name}</dt><dd>{_esc(value)}</dd>" for name, value in facts)
    return (f"<section class='card' id='table-{_esc(row['table'])}'><h3>{_esc(row['table'])} "
            f"<span class='badge {kind}'>{state}</span></h3>{stopped}<dl>{dl}</dl>"
            f"{_charts(row['table'], history, start, end, limit)}</section>")


def _links(name: str) -> str:
    kinds = ("full_load", "stream", "health", "settlement", "maintenance")
    return "DAGs: " + " · ".join(f"<a target='_top' href='../dags/lakesync_{_esc(name)}_{kind}'>{kind}</a>"
                                 for kind in kinds)


def _attention_item(item: dict[str, Any]) -> str:
    """One thing that needs attention: its words, then its command (the only place the page shows it)."""
    where = f"table {_esc(item['table'])}: " if item.get("table") else ""
    command = (f"<br>to recover, run: <code class='command'>{_esc(item['command'])}</code>"
               if item.get("command") else "")
    return f"<li class='{item['level']}'>{item['level'].upper()} {where}{_esc(item['message'])}{command}</li>"


def _pipeline(status: dict[str, Any], start: datetime, end: datetime) -> str:
    header = f"<h2>pipeline {_esc(status['pipeline'])}</h2>"
    if status.get("error"):
        return header + f"<pre class='error'>{_esc(status['error'])}</pre>"
    from lakesync.monitoring.display import position_text, status_file_stem

    relay, stem = status.get("relay") or {}, status_file_stem(status)
    where = relay.get("error") or (relay.get("position") and f"at {position_text(relay['position'], stem)}")
    meta = (f"<p class='meta'>{_esc(status.get('database'))} → <code>{_esc(status.get('delta_root'))}</code> · "
            f"relay {_esc(where or 'not started')} · {_links(status['pipeline'])}</p>")
    items = status.get("attention") or []
    notes = "".join(_attention_item(item) for item in items)
    attention = (f"<ul class='attention'>{notes}</ul>" if items
                 else "<p class='allwell'>nothing needs attention</p>")
    history = status.get("history") or {}
    limit = status.get("lag_alert_seconds") or 0.0
    cards = "".join(_table_card(row, history.get(row["table"], []), start, end, limit, stem)
                    for row in status["tables"])
    return header + meta + attention + (cards or "<p>no tables yet</p>")


def render(pipelines: list[dict[str, Any]], *, window: str = "6h", now: datetime | None = None) -> str:
    end = now or datetime.now(UTC)
    start = end - RANGES[window]
    picker = " ".join(f"<a class='{'on' if key == window else ''}' href='?range={key}'>{key}</a>" for key in RANGES)
    body = "".join(_pipeline(status, start, end) for status in pipelines) or "<p>no pipeline files found</p>"
    return page(f"<header><h1>lakesync</h1><nav>last {picker}</nav></header>{body}")


@app.get("/status", response_class=HTMLResponse)
def status_page(range: Window = "6h") -> str:
    return render(all_status(RANGES[range]), window=range)
