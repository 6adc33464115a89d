"""A lakesync error survives being turned into text (Spark's worker tracebacks) and back."""

from __future__ import annotations

import traceback

from lakesync.core.errors import BinlogPurgedError, LakesyncError, SinkError, carried_error


def _traceback_text(error: BaseException) -> str:
    try:
        raise error
    except BaseException as raised:
        return "".join(traceback.format_exception(raised))


def test_error_is_rebuilt_from_its_traceback_text_as_its_own_class() -> None:
    text = "Py4JJavaError: [STREAM_FAILED] ... " + _traceback_text(
        BinlogPurgedError('binlog "mysql-bin.000003" purged\n  on 2 lines', hint="re-run the full load")) + " SQLSTATE"
    rebuilt = carried_error(text)
    assert type(rebuilt) is BinlogPurgedError
    assert rebuilt.message == 'binlog "mysql-bin.000003" purged\n  on 2 lines'
    assert rebuilt.hint == "re-run the full load"


def test_the_note_stays_out_of_the_message() -> None:
    assert str(SinkError("disk full", hint="free space")) == "disk full\n  hint: free space"


def test_the_error_raised_last_wins() -> None:
    try:
        try:
            raise SinkError("inner")
        except SinkError as exc:
            raise BinlogPurgedError("outer") from exc
    except LakesyncError as outer:
        rebuilt = carried_error("".join(traceback.format_exception(outer)))
    assert type(rebuilt) is BinlogPurgedError and rebuilt.message == "outer" and rebuilt.hint is None


def test_text_without_a_whole_carried_error_gives_none() -> None:
    assert carried_error("java.lang.OutOfMemoryError: Java heap space") is None
    cut = _traceback_text(SinkError("disk full"))
    assert carried_error(cut[: cut.index('"message"') + 12]) is None
