"""What needs an operator's attention first, in words, from a :func:`lakesync.monitoring.status.pipeline_status`.

One pure function for ``lakesync status``, the Airflow view and the stream DAG's health check, so the three
never disagree on what is wrong. Items come most urgent first: a binlog the relay needs that is purged,
stopped tables (with the command the stream recorded to recover them), a relay that can't be read or has been
silent (no progress, no heartbeat) past ``stream.lag_alert_seconds``, tables lagging past it (the oldest change
not applied yet is older than that: :mod:`lakesync.stream.lag`), a binlog about to expire, selected tables that
appeared after the load and are not synced, validations that found differences. Each item's command is its own
field, never repeated in its message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
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


def command_in(reason: str | None) -> str | None:
    """The ``lakesync ...`` command a stopped table's message names, if any."""
    match = _COMMAND.search(reason or "")
    return match.group(1) if match else None


def without_command(reason: str) -> str:
    """The message with its command replaced by a pointer, so the command is shown once, on its own."""
    return _COMMAND.sub("(see the recovery command)", reason)


def attention(status: dict[str, Any], *, lag_alert_seconds: float) -> list[Attention]:
    """Everything that needs a look, most urgent first; empty when all is well."""
    stopped, lagging, checks = [], [], []
    for entry in status.get("tables", []):
        name = entry["table"]
        stream = entry.get("stream") or {}
        reason = stream.get("stopped_reason")
        if reason:
            stopped.append(Attention("alert", name, f"stopped: {without_command(reason.splitlines()[0])}",
                                     command_in(reason)))
            continue
        lag = stream.get("lag_seconds")
        if lag is not None and lag > lag_alert_seconds:
            lagging.append(Attention("alert", name, f"lag {lag:,.0f} s is past lag_alert_seconds "
                                                    f"({lag_alert_seconds:,.0f} s): {stream.get('pending')} "
                                                    f"offsets not applied, the oldest committed at "
                                                    f"{stream.get('oldest_pending_at')}"))
        validation = entry.get("last_validation") or {}
        if validation.get("status") in ("mismatch", "error"):
            checks.append(Attention("warning", name, f"last validation {validation['status']} "
                                                     f"({validation.get('mismatched_keys') or 0} differing keys, "
                                                     f"{validation.get('finished_at')})",
                                    f"lakesync validate --pipeline {status['pipeline']} --tables {name}"))
    relay = status.get("relay") or {}
    relay_items = [Attention("alert", None, f"relay: {relay['error']}")] if relay.get("error") else []
    relay_items += relay_silent(relay, status["pipeline"], lag_alert_seconds=lag_alert_seconds)
    pressure = relay.get("backpressure") or {}
    if pressure.get("throttling"):  # backpressure: the relay holds back until the stream catches up
        relay_items.append(Attention("warning", None, f"relay throttled: the stream is {pressure.get('lag_records')} "
                                                      f"records behind (bound {pressure.get('max_lag')}); the relay "
                                                      "waits, nothing is dropped"))
    binlog = _binlog_item(status)
    if binlog is not None and binlog.command:  # a purged binlog: its pipeline-wide re-load covers every table,
        stopped = [replace(item, command=None) for item in stopped]  # so one command is shown, not one per table
    alerts = [binlog] if binlog is not None and binlog.level == "alert" else []
    warnings = [binlog] if binlog is not None and binlog.level == "warning" else []
    return alerts + stopped + relay_items + lagging + warnings + not_synced(status) + checks


def _binlog_item(status: dict[str, Any]) -> Attention | None:
    from lakesync.monitoring.binlog_retention import binlog_attention

    found = binlog_attention(status["pipeline"], status.get("binlog"))
    return None if found is None else Attention(found[0], None, found[1], found[2])


def relay_silent(relay: dict[str, Any], pipeline: str, *, lag_alert_seconds: float) -> list[Attention]:
    """An alert when the relay has shown no life (progress, heartbeat) for longer than ``lag_alert_seconds``:
    it is down or stuck, so changes made since are not in Kafka and no table's lag can show them."""
    silent = relay.get("silent_seconds")
    if silent is None or silent <= lag_alert_seconds:
        return []
    how = "it stopped cleanly then" if relay.get("stopped") else "it is not running or is stuck"
    return [Attention("alert", None, f"relay silent for {silent:,.0f} s (last progress or heartbeat at "
                                     f"{relay.get('updated_at')}), past lag_alert_seconds ({lag_alert_seconds:,.0f} "
                                     f"s): {how}; changes since then are not in Kafka",
                      f"lakesync relay --pipeline {pipeline}")]


def not_synced(status: dict[str, Any]) -> list[Attention]:
    """Selected tables that appeared after the full load and are not streamed, with why (stream/new_tables.py)
    and the command that loads them."""
    return [Attention("warning", entry["table"], f"not synced: {without_command(reason)}", command_in(reason))
            for entry in status.get("tables", []) if (reason := (entry.get("stream") or {}).get("not_synced"))]
