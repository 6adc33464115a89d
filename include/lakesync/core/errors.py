"""The lakesync exception family.

Every error a user can meet is a :class:`LakesyncError` whose message says what happened and what to do
next. Low-level exceptions (PyMySQL, confluent-kafka, delta-rs) are caught at the boundary that talks to
the outside system and re-raised as one of these, with the original chained as ``__cause__``. The CLI
prints the message without a traceback; ``--debug`` shows the chain.
"""

from __future__ import annotations

import json
from typing import ClassVar

#: Starts the note that carries a :class:`LakesyncError` across a process boundary as one JSON line.
CARRIED_MARKER = "lakesync-error: "


class LakesyncError(Exception):
    """Base class: a failure lakesync understands and can explain.

    ``hint`` is the "what to do" part, kept apart so the CLI and the Airflow view can show it on its own line.

    Spark hands the driver an error raised in one of its Python workers (the decode's tasks on the executors,
    ``foreachBatch``) only as text: the worker's formatted traceback inside Spark's own exception. So every
    lakesync error carries a note (printed in tracebacks, not part of ``str()``) with its kind, message and
    hint as one JSON line, from which :func:`carried_error` rebuilds it on the driver, with no parsing of
    traceback layout or message wording.
    """

    exit_code = 2
    _kinds: ClassVar[dict[str, type[LakesyncError]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        LakesyncError._kinds[cls.__name__] = cls

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.add_note(CARRIED_MARKER + json.dumps({"kind": type(self).__name__, "message": message, "hint": hint}))

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


def carried_error(text: str) -> LakesyncError | None:
    """The lakesync error whose note appears last in ``text`` (the one raised last, as tracebacks print
    causes first), rebuilt as its own class; None when ``text`` carries none."""
    start = text.rfind(CARRIED_MARKER)
    if start < 0:
        return None
    try:
        payload, _ = json.JSONDecoder().raw_decode(text, start + len(CARRIED_MARKER))
        kind = LakesyncError._kinds.get(payload["kind"], LakesyncError)
        return kind(str(payload["message"]), hint=payload["hint"])
    except (ValueError, KeyError, TypeError):  # cut short or altered on the way: no error to rebuild
        return None


class ConfigError(LakesyncError):
    """A pipeline file or a setting is missing, malformed or contradictory."""


class SourceError(LakesyncError):
    """The MySQL/MariaDB source refused us or is not set up the way lakesync needs."""


class SourceUnavailableError(SourceError):
    """The source server went away (refused, restarted, lost the connection): worth reconnecting to."""


class BinlogPurgedError(SourceError):
    """The binlog position we need is no longer on the server."""


class ServerIdInUseError(SourceError):
    """Another replica or binlog reader registered on the source uses the pipeline's server id (it may be
    this relay's own connection from before a crash, until the source notices it is gone)."""


class GapError(LakesyncError):
    """The change log does not reach back to the position the target needs: data would be lost."""


class SchemaChangeError(LakesyncError):
    """A DDL change that lakesync cannot apply to the Delta table; that table stops, others go on."""


class BrokerError(LakesyncError):
    """The Kafka broker is unreachable or refused a request after retries."""


class BrokerUnavailableError(BrokerError):
    """The broker went away or aborted the relay's transaction: the relay can start over from its committed
    progress once the broker answers again."""


class RelayFencedError(BrokerError):
    """Another relay with the same ``transactional.id`` took over; this one must stop."""


class SinkError(LakesyncError):
    """Writing to the Delta table failed; nothing was committed."""


class ValidationMismatch(LakesyncError):
    """Source and Delta differ after re-checks; the message names the tables (and the first keys) that differ."""

    exit_code = 3


class StackError(LakesyncError):
    """The embedded development stack could not start, stop or be found."""


class JarFetchError(LakesyncError):
    """A pinned JVM jar could not be downloaded, or what was downloaded is not the locked file."""
