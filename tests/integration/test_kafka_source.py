"""The lakesync-kafka Spark source against the real embedded broker and a local Spark."""

from __future__ import annotations

import json
import os
import time
import uuid
from itertools import pairwise

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import StreamingQueryException

from lakesync.kafka.spark_source import SOURCE_NAME, register

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def create_topic(bootstrap: str, partitions: int = 2, *, prefix: str = "src") -> str:
    name = f"{prefix}.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=10)
    return name


def produce(bootstrap: str, topic: str, ids: range, *, partitions: int = 2, value_size: int = 0) -> None:
    """Message ``i`` goes to partition ``i % partitions`` with key ``k<i>`` and a ``lakesync.pos`` header."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500_000})
    padding = b"p" * value_size
    for n, i in enumerate(ids, start=1):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode() + padding, partition=i % partitions,
                         headers=[("lakesync.pos", f"{i:08d}".encode()), ("empty", None)])
        if n % 200 == 0:
            producer.poll(0)
    producer.flush()


@pytest.fixture(scope="module")
def kafka_spark(spark):
    register(spark)
    register(spark)  # idempotent
    return spark


def stream(spark, bootstrap: str, **options: str):
    reader = spark.readStream.format(SOURCE_NAME).option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def assert_cover_exactly(spans: list[tuple[int, int, int]], ends: dict[int, int]) -> None:
    """``(partition, start, end)`` ranges cover each partition's offsets ``[0, ends[p])`` consecutively: no gap,
    no overlap."""
    for partition, end in ends.items():
        mine = sorted((start, stop) for p, start, stop in spans if p == partition)
        assert mine[0][0] == 0 and mine[-1][1] == end
        assert all(a[1] == b[0] for a, b in pairwise(mine))


def run_available_now(df, checkpoint: str) -> list[list]:
    """Run the query to the data present at its start; returns each micro-batch's rows."""
    batches: list[list] = []
    query = (df.writeStream.foreachBatch(lambda batch, _id: batches.append(batch.collect()))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive, "the availableNow query did not finish"
    assert query.exception() is None
    return batches


def test_available_now_reads_every_message_once_and_a_rerun_reads_only_new_ones(kafka_spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(500))
    df = stream(kafka_spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest")
    checkpoint = str(tmp_path / "checkpoint")

    rows = [row for batch in run_available_now(df, checkpoint) for row in batch]

    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    assert sorted(int(bytes(r.key)[1:]) for r in rows) == list(range(500))
    assert len({(r.partition, r.offset) for r in rows}) == 500
    one = next(r for r in rows if bytes(r.key) == b"k7")
    assert (one.topic, one.partition, bytes(one.value), one.timestampType) == (topic, 1, b"v7", 0)
    assert one.offset == 3  # 7 is the 4th odd number, in partition 1
    assert [(h.key, h.value if h.value is None else bytes(h.value)) for h in one.headers] == \
        [("lakesync.pos", b"00000007"), ("empty", None)]
    assert abs(one.timestamp.timestamp() - time.time()) < 600

    produce(broker.bootstrap, topic, range(500, 620))
    again = [row for batch in run_available_now(df, checkpoint) for row in batch]
    assert sorted(int(bytes(r.key)[1:]) for r in again) == list(range(500, 620))


def test_a_new_stream_starts_at_latest_by_default(kafka_spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(50))
    df = stream(kafka_spark, broker.bootstrap, subscribe=topic)
    checkpoint = str(tmp_path / "checkpoint")

    assert [row for batch in run_available_now(df, checkpoint) for row in batch] == []
    produce(broker.bootstrap, topic, range(50, 60))
    assert sorted(bytes(r.key) for batch in run_available_now(df, checkpoint) for r in batch) == \
        sorted(f"k{i}".encode() for i in range(50, 60))


def test_max_offsets_per_trigger_splits_the_backlog_into_several_batches(kafka_spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(500))
    df = stream(kafka_spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="150")

    batches: list[list] = []
    query = (df.writeStream.foreachBatch(lambda batch, _id: batches.append(batch.collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(120)

    assert [len(batch) for batch in batches] == [150, 150, 150, 50]
    assert sorted(int(bytes(r.key)[1:]) for batch in batches for r in batch) == list(range(500))
    # The progress reports the log end next to the rate-limited batch end, so the lag is visible.
    first = next(p["sources"][0] for p in query.recentProgress if p["numInputRows"] == 150)
    assert json.loads(first["latestOffset"]) == {topic: {"0": 250, "1": 250}}
    assert sum(json.loads(first["endOffset"])[topic].values()) == 150


def test_pattern_subscription_picks_up_a_topic_created_after_the_query_started(kafka_spark, broker, tmp_path):
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = create_topic(broker.bootstrap, prefix=prefix)
    produce(broker.bootstrap, first, range(20))
    name = f"q_{prefix}"
    query = (stream(kafka_spark, broker.bootstrap, subscribePattern=rf"{prefix}\..*", startingOffsets="earliest")
             .writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
        assert kafka_spark.table(name).count() == 20

        second = create_topic(broker.bootstrap, prefix=prefix)
        produce(broker.bootstrap, second, range(100, 130))
        query.processAllAvailable()
        rows = kafka_spark.table(name).collect()
    finally:
        query.stop()

    assert sorted((r.topic, int(bytes(r.key)[1:])) for r in rows) == sorted(
        [(first, i) for i in range(20)] + [(second, i) for i in range(100, 130)])


def test_a_recreated_topic_stops_the_stream_loudly_unless_fail_on_data_loss_is_off(kafka_spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(50))
    checkpoint = str(tmp_path / "checkpoint")
    assert len(run_available_now(stream(kafka_spark, broker.bootstrap, subscribe=topic,
                                        startingOffsets="earliest"), checkpoint)[0]) == 50

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=10)
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(timeout=10)
    produce(broker.bootstrap, topic, range(100, 110))

    failing = (stream(kafka_spark, broker.bootstrap, subscribe=topic).writeStream.format("noop")
               .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="no longer in Kafka"):
        failing.awaitTermination(60)

    lenient = stream(kafka_spark, broker.bootstrap, subscribe=topic, failOnDataLoss="false")
    rows = [row for batch in run_available_now(lenient, checkpoint) for row in batch]
    assert sorted(int(bytes(r.key)[1:]) for r in rows) == list(range(100, 110))


def test_batch_read_honours_starting_and_ending_offsets(kafka_spark, broker):
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(100))  # 50 per partition
    rows = (kafka_spark.read.format(SOURCE_NAME).option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", f'{{"{topic}": {{"0": 10, "1": -2}}}}')
            .option("endingOffsets", f'{{"{topic}": {{"0": 20, "1": -1}}}}')
            .load().collect())
    assert sorted((r.partition, r.offset) for r in rows) == \
        [(0, offset) for offset in range(10, 20)] + [(1, offset) for offset in range(50)]

    backwards = (kafka_spark.read.format(SOURCE_NAME).option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("subscribe", topic).option("startingOffsets", f'{{"{topic}": {{"0": 30}}}}')
                 .option("endingOffsets", f'{{"{topic}": {{"0": 20}}}}'))
    with pytest.raises(Exception, match="startingOffsets is after endingOffsets"):
        backwards.load().collect()


def test_batch_read_with_ranges_output_gives_the_planned_ranges(kafka_spark, broker):
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(100))  # 50 per partition
    df = (kafka_spark.read.format(SOURCE_NAME).option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).option("output", "ranges")
          .option("startingOffsets", f'{{"{topic}": {{"0": 10, "1": -2}}}}').load())
    assert df.schema.simpleString() == \
        "struct<topic:string,partition:int,startOffset:bigint,endOffset:bigint>"
    assert sorted(tuple(row) for row in df.collect()) == [(topic, 0, 10, 50), (topic, 1, 0, 50)]


def test_ranges_output_gives_each_planned_range_once_and_the_stream_resumes_after_them(kafka_spark, broker,
                                                                                      tmp_path):
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(100))  # 50 per partition
    checkpoint = str(tmp_path / "checkpoint")
    ranges = stream(kafka_spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", output="ranges",
                    minPartitions="4")
    first = [row.asDict() for batch in run_available_now(ranges, checkpoint) for row in batch]
    # four tasks: each partition's 50 messages cut in two consecutive pieces that cover them exactly
    assert sorted((r["partition"], r["startOffset"], r["endOffset"]) for r in first) == \
        [(0, 0, 25), (0, 25, 50), (1, 0, 25), (1, 25, 50)]
    assert {r["topic"] for r in first} == {topic}
    produce(broker.bootstrap, topic, range(100, 104))
    again = [row.asDict() for batch in run_available_now(ranges, checkpoint) for row in batch]
    assert sorted((r["partition"], r["startOffset"], r["endOffset"]) for r in again) == \
        [(0, 50, 51), (0, 51, 52), (1, 50, 51), (1, 51, 52)]


def test_ranges_output_honours_max_offsets_per_trigger(kafka_spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(100))
    ranges = stream(kafka_spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", output="ranges",
                    maxOffsetsPerTrigger="30")
    batches = run_available_now(ranges, str(tmp_path / "checkpoint"))
    sizes = [sum(r["endOffset"] - r["startOffset"] for r in batch) for batch in batches]
    assert len(batches) == 4 and max(sizes) <= 30 and sum(sizes) == 100
    assert_cover_exactly([(r["partition"], r["startOffset"], r["endOffset"]) for batch in batches for r in batch],
                         {0: 50, 1: 50})


def test_ranges_output_replays_a_failed_batch_with_the_same_ranges_after_a_restart(kafka_spark, broker, tmp_path):
    """The batch whose foreachBatch failed is in Spark's offset log but not committed: a new query on the
    checkpoint (a new planner, nothing cached) must hand out exactly the same ranges again."""
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(60))
    checkpoint = str(tmp_path / "checkpoint")
    ranges = stream(kafka_spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", output="ranges",
                    maxOffsetsPerTrigger="40")
    failed: list[list] = []

    def fail_once(batch, _id):
        failed.append(sorted((r["partition"], r["startOffset"], r["endOffset"]) for r in batch.collect()))
        raise RuntimeError("the sink failed")

    query = (ranges.writeStream.foreachBatch(fail_once).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException, match="the sink failed"):
        query.awaitTermination(120)
    assert len(failed) == 1
    produce(broker.bootstrap, topic, range(60, 70))  # new messages must not widen the replayed batch

    batches = [sorted((r["partition"], r["startOffset"], r["endOffset"]) for r in batch)
               for batch in run_available_now(ranges, checkpoint)]

    assert failed[0] == [(0, 0, 20), (1, 0, 20)]  # 40 of the 60 messages, shared by the partitions' lag
    assert batches[0] == failed[0]
    assert_cover_exactly([span for batch in batches for span in batch], {0: 35, 1: 35})


@pytest.mark.slow
def test_throughput_of_200k_messages_into_a_counting_foreach_batch(kafka_spark, broker, tmp_path):
    """Measurement, not a check: prints rows/s. Run with ``-m slow -s``."""
    count = int(os.environ.get("LAKESYNC_BENCH_MESSAGES", "200000"))
    topic = create_topic(broker.bootstrap)
    produce(broker.bootstrap, topic, range(count), value_size=290)
    seen: list[int] = []
    df = stream(kafka_spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest")
    started = time.monotonic()
    query = (df.writeStream.foreachBatch(lambda batch, _id: seen.append(batch.count()))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(600)
    elapsed = time.monotonic() - started
    assert sum(seen) == count
    print(f"\nlakesync-kafka: {count} messages of ~300 bytes in {elapsed:.2f}s = {count / elapsed:,.0f} rows/s")
