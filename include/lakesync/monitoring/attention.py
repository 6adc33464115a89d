"""What needs an operator's attention first, in words, from a :func:`lakesync.monitoring.status.pipeline_status`.

One pure function for ``lakesync status``, the Airflow view and the stream DAG's health check, so the three
never disagree on what is wrong. Items come most urgent first: stopped tables (with the command the stream
recorded to recover them), a relay that can't be read, tables lagging past ``stream.lag_alert_seconds``,
selected tables that appeared after the load and are not synced, validations that found differences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

#: the command inside a stopped table's message (the stream writes "... run `lakesync ...`")
_COMMAND = re.compile(r"`(lakesync [^`]+)`")


@dataclass(frozen=True)
class Attention:
    level: Literal["alert", "warning"]
    table: str | None
    message: str
    command: str | None = None

    def describe(self) -> str:
        where = f"table {self.table}: " if self.table else ""
        return f"{self.level.upper()} {where}{self.message}" + (f"\n  run: {self.command}" if self.command else "")


def table_state(entry: dict[str, Any]) -> str:
    """One word: stopped, not synced, lagging, streaming, loaded, loading, or new (nothing done yet)."""
    stream, load = entry.get("stream") or {}, entry.get("full_load") or {}
    if stream.get("stopped_reason"):
        return "stopped"
    if stream.get("not_synced"):
        return "not synced"
    if entry.get("lagging"):
        return "lagging"
    if stream.get("applied_position") or stream.get("last_batch_id") is not None:
        return "streaming"
    if load:
        return "loaded" if load.get("status") == "done" else "loading"
    return "new"


def recovery_command(reason: str | None) -> str | None:
    """The ``lakesync ...`` command a stopped table's message names, if any."""
    match = _COMMAND.search(reason or "")
    return match.group(1) if match else None


def attention(status: dict[str, Any], *, lag_alert_seconds: float) -> list[Attention]:
    """Everything that needs a look, most urgent first; empty when all is well."""
    stopped, lagging, checks = [], [], []
    for entry in status.get("tables", []):
        name = entry["table"]
        stream = entry.get("stream") or {}
        reason = stream.get("stopped_reason")
        if reason:
            stopped.append(Attention("alert", name, f"stopped: {reason.splitlines()[0]}", recovery_command(reason)))
            continue
        lag = stream.get("lag_seconds")
        if lag is not None and lag > lag_alert_seconds:
            lagging.append(Attention("alert", name, f"lag {lag:,.0f} s is past lag_alert_seconds "
                                                    f"({lag_alert_seconds:,.0f} s)"))
        validation = entry.get("last_validation") or {}
        if validation.get("status") in ("mismatch", "error"):
            checks.append(Attention("warning", name, f"last validation {validation['status']} "
                                                     f"({validation.get('mismatched_keys') or 0} differing keys, "
                                                     f"{validation.get('finished_at')})",
                                    f"lakesync validate --pipeline {status['pipeline']} --tables {name}"))
    relay = status.get("relay") or {}
    relay_items = [Attention("alert", None, f"relay: {relay['error']}")] if relay.get("error") else []
    pressure = relay.get("backpressure") or {}
    if pressure.get("throttling"):  # backpressure: the relay holds back until the stream catches up
        relay_items.append(Attention("warning", None, f"relay throttled: the stream is {pressure.get('lag_records')} "
                                                      f"records behind (bound {pressure.get('max_lag')}); the relay "
                                                      "waits, nothing is dropped"))
    return stopped + relay_items + lagging + not_synced(status) + checks


def not_synced(status: dict[str, Any]) -> list[Attention]:
    """Selected tables that appeared after the full load and are not streamed, with why (stream/new_tables.py)
    and, once, the command that loads them."""
    return [Attention("warning", entry["table"], f"not synced: {_COMMAND.sub('the command below', reason)}",
                      recovery_command(reason))
            for entry in status.get("tables", []) if (reason := (entry.get("stream") or {}).get("not_synced"))]
