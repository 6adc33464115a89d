"""The lakesync exception family.

Every error a user can meet is a :class:`LakesyncError` whose message says what happened and what to do
next. Low-level exceptions (PyMySQL, confluent-kafka, delta-rs) are caught at the boundary that talks to
the outside system and re-raised as one of these, with the original chained as ``__cause__``. The CLI
prints the message without a traceback; ``--debug`` shows the chain.
"""

from __future__ import annotations


class LakesyncError(Exception):
    """Base class: a failure lakesync understands and can explain.

    ``hint`` is the "what to do" part, kept apart so the CLI and the Airflow view can show it on its own line.
    """

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class ConfigError(LakesyncError):
    """A pipeline file or a setting is missing, malformed or contradictory."""


class SourceError(LakesyncError):
    """The MySQL/MariaDB source refused us or is not set up the way lakesync needs."""


class BinlogPurgedError(SourceError):
    """The binlog position we need is no longer on the server."""


class GapError(LakesyncError):
    """The change log does not reach back to the position the target needs: data would be lost."""


class SchemaChangeError(LakesyncError):
    """A DDL change that lakesync cannot apply to the Delta table; that table stops, others go on."""


class BrokerError(LakesyncError):
    """The Kafka broker is unreachable or refused a request after retries."""


class SinkError(LakesyncError):
    """Writing to the Delta table failed; nothing was committed."""


class ValidationMismatch(LakesyncError):
    """Source and Delta differ after re-checks; the message names the tables (and the first keys) that differ."""

    exit_code = 3


class StackError(LakesyncError):
    """The embedded development stack could not start, stop or be found."""
