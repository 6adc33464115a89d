"""Which topics a micro-batch read, from the checkpoint's offset log alone (what ``stream.decode: spark_sql``
uses to run only the jobs the batch needs)."""

from __future__ import annotations

import json
from pathlib import Path

from lakesync.stream.lag import batch_topics


def _planned(checkpoint: Path, batch_id: int, offsets: dict[str, dict[str, int]] | None) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    line = "-" if offsets is None else json.dumps(offsets)
    (checkpoint / "offsets" / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{line}\n')


def test_a_batch_read_the_topics_whose_planned_end_moved_past_the_previous_batchs(tmp_path) -> None:
    _planned(tmp_path, 4, {"db.a": {"0": 10, "1": 3}, "db.b": {"0": 7}, "db._schema": {"0": 2}})
    _planned(tmp_path, 5, {"db.a": {"0": 10, "1": 9}, "db.b": {"0": 7}, "db._schema": {"0": 2}, "db.c": {"0": 4}})
    assert batch_topics(tmp_path, 5) == frozenset({"db.a", "db.c"})


def test_a_partition_new_in_the_batch_counts_only_when_it_holds_records(tmp_path) -> None:
    _planned(tmp_path, 0, {"db.a": {"0": 5}})
    _planned(tmp_path, 1, {"db.a": {"0": 5, "1": 0}})
    assert batch_topics(tmp_path, 1) == frozenset()


def test_a_first_batch_starts_where_sparks_kafka_source_started_the_checkpoint(tmp_path) -> None:
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_text('\x00v1\n{"db.a":{"0":5},"db._schema":{"0":2}}')
    _planned(tmp_path, 0, {"db.a": {"0": 9}, "db._schema": {"0": 2}})
    assert batch_topics(tmp_path, 0) == frozenset({"db.a"})


def test_without_the_files_where_the_batch_started_the_topics_are_not_known(tmp_path) -> None:
    _planned(tmp_path, 0, {"db.a": {"0": 5}})
    assert batch_topics(tmp_path, 0) is None  # no sources/0/0: not Spark's Kafka source's checkpoint
    assert batch_topics(tmp_path, 3) is None  # no offset file at all
    _planned(tmp_path, 3, {"db.a": {"0": 9}})
    assert batch_topics(tmp_path, 3) is None  # the previous batch's file is gone (Spark purged it)
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_text("\x00v1\n")
    assert batch_topics(tmp_path, 0) is None  # not the shape Spark writes
