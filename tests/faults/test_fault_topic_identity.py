"""The stream's topic-id record: a recreated or vanished topic is refused, new topics join the record."""

from __future__ import annotations

import json

import pytest

from lakesync.core.errors import GapError
from lakesync.stream.topic_identity import TOPIC_IDS_FILE, check_topic_identity

pytestmark = pytest.mark.faults


def test_a_resumed_stream_refuses_a_recreated_or_vanished_topic(tmp_path):
    check_topic_identity(tmp_path, {"p.db.a": "id-a", "p.db.b": "id-b"}, pipeline="p", fresh=True)
    with pytest.raises(GapError, match=r"p\.db\.a") as recreated:
        check_topic_identity(tmp_path, {"p.db.a": "id-a2", "p.db.b": "id-b"}, pipeline="p", fresh=False)
    assert "`lakesync recover --pipeline p`" in str(recreated.value)
    with pytest.raises(GapError, match=r"p\.db\.b"):
        check_topic_identity(tmp_path, {"p.db.a": "id-a"}, pipeline="p", fresh=False)


def test_topics_created_later_are_recorded_and_a_new_checkpoint_starts_a_new_record(tmp_path):
    check_topic_identity(tmp_path, {"p.db.a": "id-a"}, pipeline="p", fresh=True)
    check_topic_identity(tmp_path, {"p.db.a": "id-a", "p.db.c": "id-c"}, pipeline="p", fresh=False)
    assert json.loads((tmp_path / TOPIC_IDS_FILE).read_text()) == {"p.db.a": "id-a", "p.db.c": "id-c"}
    check_topic_identity(tmp_path, {"p.db.a": "id-new"}, pipeline="p", fresh=True)
    assert json.loads((tmp_path / TOPIC_IDS_FILE).read_text()) == {"p.db.a": "id-new"}
