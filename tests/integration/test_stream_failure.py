"""A lakesync error raised inside a Spark query reaches the caller of the stream as itself (class, message,
hint), whether it was raised in an executor's Python worker (the decode) or in ``foreachBatch`` on the driver."""

from __future__ import annotations

import pytest

from lakesync.core.errors import ConfigError, GapError
from lakesync.stream.app import stream_failure

pytestmark = [pytest.mark.spark]


def _failure_of(query) -> Exception:
    with pytest.raises(Exception) as failed:  # Spark's StreamingQueryException, the error inside as text
        query.awaitTermination(120)
    return failed.value


def test_error_raised_in_an_executors_python_worker_comes_back_as_itself(spark, tmp_path) -> None:
    def decode(batches):
        raise ConfigError("column 'amount' of p.db.t can't hold 1e40", hint="widen the column, then re-load")
        yield from batches

    def apply(batch, batch_id: int) -> None:  # as the stream's decode: a mapInArrow job run from foreachBatch
        batch.sparkSession.range(1).mapInArrow(decode, "id long").collect()

    query = (spark.readStream.format("rate").option("rowsPerSecond", 1).load()
             .writeStream.foreachBatch(apply).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    error = stream_failure("p", _failure_of(query))
    assert type(error) is ConfigError
    assert error.message == "the stream of pipeline 'p' failed: column 'amount' of p.db.t can't hold 1e40"
    assert error.hint == "widen the column, then re-load"


def test_error_raised_in_foreach_batch_comes_back_as_itself(spark, tmp_path) -> None:
    def apply(batch, batch_id: int) -> None:
        raise GapError("offsets [3, 9) of p.db.t are no longer in the log", hint="re-run the full load")

    query = (spark.readStream.format("rate").option("rowsPerSecond", 1).load()
             .writeStream.foreachBatch(apply).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    error = stream_failure("p", _failure_of(query))
    assert type(error) is GapError
    assert error.message == "the stream of pipeline 'p' failed: offsets [3, 9) of p.db.t are no longer in the log"
    assert error.hint == "re-run the full load"
