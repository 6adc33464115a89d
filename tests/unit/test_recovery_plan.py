"""Recovery by position, the pure parts: where each table's replay starts (or why it is re-loaded), and the
consumed-through marks the stream keeps from the relay's progress and the offsets it applied."""

from __future__ import annotations

from lakesync.recovery.plan import TableFacts, plan_recovery, plan_table
from lakesync.stream.consumed import Candidate, kept, passed, promote

LOAD, MARK, APPLIED, LATER = "00000001.000000001000.000000", "00000003.000000000500.000000", \
    "00000003.000000000400.000002", "00000004.000000000100.000000"


def _everything_available(_: str) -> bool:
    return True


def test_a_keyed_table_replays_from_its_mark_when_it_is_newer_than_its_load():
    plan = plan_table("t", TableFacts(LOAD, MARK, APPLIED, append_log=False), partitions=3,
                      available=_everything_available)
    assert (plan.replay_from, plan.handoff) == (MARK, MARK)


def test_a_quiet_table_without_a_mark_replays_from_its_load_and_one_with_newer_changes_is_reloaded():
    quiet = plan_table("q", TableFacts(LOAD, None, None, append_log=False), partitions=1,
                       available=_everything_available)
    assert quiet.replay_from == LOAD
    unmarked = plan_table("u", TableFacts(LOAD, None, APPLIED, append_log=False), partitions=1,
                          available=_everything_available)
    assert unmarked.reload and "no consumed-through mark" in unmarked.why


def test_a_start_the_binlog_no_longer_has_reloads_that_table_alone():
    facts = {"old": TableFacts(LOAD, None, None, append_log=False),
             "recent": TableFacts(LOAD, MARK, APPLIED, append_log=False)}
    plan = plan_recovery(facts, partitions=1, available=lambda key: key >= MARK)
    assert plan.reloaded == ["old"] and plan.relay_from == MARK
    assert "no longer has" in plan.tables[0].why


def test_an_append_log_table_hands_off_at_its_newest_applied_change_with_one_partition_only():
    one = plan_table("log", TableFacts(LOAD, "00000002.000000000004.000000", APPLIED, append_log=True), partitions=1,
                     available=_everything_available)
    assert one.replay_from == "00000002.000000000004.000000" and one.handoff == APPLIED, \
        "replayed from a transaction boundary; the stream drops what Delta holds (up to the applied change)"
    several = plan_table("log", TableFacts(LOAD, MARK, APPLIED, append_log=True), partitions=2,
                         available=_everything_available)
    assert several.reload and "append twice" in several.why


def test_the_relay_replays_from_the_earliest_start():
    facts = {"a": TableFacts(LOAD, MARK, None, append_log=False), "b": TableFacts(LOAD, LATER, None, append_log=False)}
    assert plan_recovery(facts, partitions=1, available=_everything_available).relay_from == MARK


def test_a_candidate_is_passed_when_every_partition_of_the_topic_is_applied_up_to_its_end():
    candidate = Candidate(MARK, {("t", 0): 10, ("t", 1): 0, ("u", 0): 7})
    assert passed(candidate, {("t", 0): 10}, "t"), "partition 1 was empty"
    assert not passed(candidate, {("t", 0): 9}, "t")
    assert not passed(candidate, {("t", 0): 10}, "missing"), "a topic never seen gives no mark"


def test_each_table_gets_the_newest_candidate_its_offsets_passed():
    older, newer = Candidate(MARK, {("t", 0): 5, ("u", 0): 3}), Candidate(LATER, {("t", 0): 9, ("u", 0): 3})
    marks = promote([older, newer], {("t", 0): 6, ("u", 0): 3}, {"t": "t", "u": "u"}, "schema")
    assert marks == {"t": MARK, "u": LATER}, "u is quiet: the newer progress covers it; t has passed only the older"


def test_a_schema_change_not_applied_yet_holds_every_mark_back():
    """Recovery skips a table's DDL at or before its mark: a TRUNCATE of a quiet table still unread on the
    schema topic must keep the quiet table's mark before it."""
    candidate = Candidate(LATER, {("t", 0): 4, ("schema", 0): 2})
    assert promote([candidate], {("t", 0): 4, ("schema", 0): 1}, {"t": "t"}, "schema") == {}
    assert promote([candidate], {("t", 0): 4, ("schema", 0): 2}, {"t": "t"}, "schema") == {"t": LATER}
    no_ddl_yet = Candidate(LATER, {("t", 0): 4})
    assert promote([no_ddl_yet], {("t", 0): 4}, {"t": "t"}, "schema") == {"t": LATER}, "no schema topic: no DDL"


def test_a_lagging_stream_keeps_the_oldest_candidate_it_will_pass_first():
    candidates = [Candidate(f"{i:05d}", {("t", 0): i}) for i in range(20)]
    trimmed = kept(candidates, limit=8)
    assert len(trimmed) == 8 and trimmed[0] is candidates[0] and trimmed[-1] is candidates[-1]


def test_a_table_the_stream_stopped_or_whose_load_had_not_finished_is_reloaded():
    stopped = plan_table("s", TableFacts(LOAD, MARK, None, append_log=False, reload_because="the stream stopped it"),
                         partitions=1, available=_everything_available)
    assert stopped.reload and stopped.why == "the stream stopped it"
