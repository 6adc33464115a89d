"""The stream's coverage check at its start: what it says when the relay has not published yet (start the
relay, no re-load) and when the relay's change log starts after a table's load (re-load those tables)."""

from __future__ import annotations

import pytest

from lakesync.core.errors import GapError
from lakesync.core.positions import SourcePosition
from lakesync.stream.handoff import check_coverage

LOADED = SourcePosition("binlog.000003", 1_000).key()


def test_a_relay_that_has_not_published_yet_is_started_not_a_reason_to_load_again():
    with pytest.raises(GapError, match="has not published") as refused:
        check_coverage("demo", {"orders": LOADED}, None)
    hint = str(refused.value.hint)
    assert "lakesync relay --pipeline demo" in hint
    assert "lakesync snapshot" not in hint


def test_a_change_log_starting_after_a_tables_load_names_the_table_to_load_again():
    later = SourcePosition("binlog.000003", 2_000).key()
    with pytest.raises(GapError, match="orders") as refused:
        check_coverage("demo", {"orders": LOADED, "items": later}, later)
    assert "lakesync snapshot --pipeline demo --tables orders" in str(refused.value.hint)


def test_a_change_log_reaching_back_to_every_load_passes():
    check_coverage("demo", {"orders": LOADED}, SourcePosition("binlog.000002", 5).key())
