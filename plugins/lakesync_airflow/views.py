"""The status view: a small FastAPI app the Airflow 3 API server mounts at ``/lakesync``.

``/lakesync/status`` is an HTML page (shown inside the Airflow UI through the plugin's external view),
``/lakesync/api/status`` the same data as JSON. Pages are rendered on the server, so the view needs no
JavaScript build; it refreshes itself every 10 seconds.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from lakesync.core.config import load_pipeline_file, pipeline_files
from lakesync.core.errors import LakesyncError
from lakesync_airflow.status import pipeline_status

app = FastAPI(title="lakesync status", description="Pipelines, tables, applied positions and lag")


def all_status() -> list[dict[str, Any]]:
    """Every pipeline's status; a pipeline that cannot be read shows its error instead of hiding the rest."""
    result = []
    for file in pipeline_files():
        try:
            result.append(pipeline_status(load_pipeline_file(file)))
        except LakesyncError as exc:
            result.append({"pipeline": file.stem, "error": str(exc), "tables": []})
    return result


@app.get("/api/status")
def status_json() -> list[dict[str, Any]]:
    return all_status()


def _cell(value: Any) -> str:
    return "<td>" + ("&mdash;" if value in (None, "") else html.escape(str(value))) + "</td>"


def _when(ms: int | None) -> str | None:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ms else None


def _lag(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds:,.0f} s"


def _applied(row: dict[str, Any]) -> str | None:
    known = [k for k in ((row.get("stream") or {}).get("applied_position"), (row.get("delta") or {}).get("max_position"))
             if k]
    return max(known) if known else None


def _table_row(row: dict[str, Any]) -> str:
    load = row.get("full_load") or {}
    stream = row.get("stream") or {}
    checked = row.get("last_validation") or {}
    settled = row.get("last_settlement") or {}
    interval = (f"{settled['interval_start'][:16]} → {(settled.get('interval_end') or '')[:16]} "
                f"(run {settled.get('run')}, {_when(settled.get('committed_ms'))})") if settled else None
    lag = _lag(stream.get("lag_seconds"))
    return ("<tr class='lagging'>" if row.get("lagging") else "<tr>") + "".join([
        _cell(row.get("table")), _cell(row.get("semantics")), _cell(_applied(row)), _cell(lag),
        _cell(stream.get("last_batch_at")),
        _cell(f"{load.get('status')}, {load.get('rows')} rows, {load.get('finished_at') or 'not finished'}"
              if load else None),
        _cell(f"{checked.get('status')} at {checked.get('finished_at')}" if checked else None),
        _cell(interval),
    ]) + "</tr>"


def render(pipelines: list[dict[str, Any]]) -> str:
    sections = []
    for status in pipelines:
        header = f"<h2>pipeline {html.escape(status['pipeline'])}</h2>"
        if status.get("error"):
            sections.append(header + f"<pre class='error'>{html.escape(status['error'])}</pre>")
            continue
        load = status.get("full_load") or {}
        meta = (f"<p>source database <code>{html.escape(str(status.get('database')))}</code> · Delta "
                f"<code>{html.escape(str(status.get('delta_root')))}</code> · full load position "
                f"<code>{html.escape(str(load.get('position') or '—'))}</code></p>")
        relay = status.get("relay") or {}
        meta += (f"<p>relay: {html.escape(str(relay.get('error') or relay.get('position') or 'not started'))}</p>"
                 if "relay" in status else "")
        rows = "".join(_table_row(row) for row in status["tables"]) or "<tr><td colspan=8>no tables yet</td></tr>"
        sections.append(
            header + meta + "<table><thead><tr><th>table</th><th>semantics</th><th>applied position</th>"
            "<th>lag</th><th>last batch</th><th>last full load</th><th>last validation</th>"
            f"<th>last settled interval</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    body = "".join(sections) or "<p>no pipeline files found</p>"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='10'>"
        "<title>lakesync status</title><style>body{font-family:sans-serif;margin:1.5em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
        "th{background:#f3f3f3}.error{color:#a00}.lagging{background:#fee}</style></head>"
        f"<body><h1>lakesync status</h1>{body}</body></html>"
    )


@app.get("/status", response_class=HTMLResponse)
def status_page() -> str:
    return render(all_status())
