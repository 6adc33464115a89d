"""A Spark checkpoint restored from an older copy, through the real stream (issue 10).

Run the stream, copy its checkpoint folder away, run more, then put the old copy back (a backup, a VM
snapshot, an object store that lost recent files) and run again: the stream re-plans batch N over a larger
range than the batch N Delta already has. Delta must still equal the source (the independent oracle says so).
"""

from __future__ import annotations

import shutil

import pytest

from lakesync.full_load.load import FullLoad
from lakesync.stream.app import checkpoint_dir, run_stream
from tests.integration.test_stream_app import env, execute, items, relay_until_idle, write_pipeline  # noqa: F401
from tests.oracle import compare_table

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_a_restored_older_checkpoint_loses_nothing(env, mariadb, items, fresh_database, tmp_path, spark):  # noqa: F811
    pipeline = write_pipeline(tmp_path, fresh_database)
    FullLoad(pipeline=pipeline).run()
    execute(items, "UPDATE items SET label = 'first batch' WHERE id = 1")
    relay_until_idle(pipeline)
    run_stream(pipeline, once=True, spark=spark)  # batch 0
    backup = tmp_path / "checkpoint-backup"
    shutil.copytree(checkpoint_dir(pipeline), backup)

    execute(items, "UPDATE items SET label = 'second batch' WHERE id = 2", "DELETE FROM items WHERE id = 3")
    relay_until_idle(pipeline)
    run_stream(pipeline, once=True, spark=spark)  # batch 1 covers the second batch's changes only

    execute(items, "UPDATE items SET label = 'only in the re-planned batch' WHERE id = 4",
            "INSERT INTO items VALUES (40, 'new after the backup', 4.00)", "DELETE FROM items WHERE id = 5")
    relay_until_idle(pipeline)
    shutil.rmtree(checkpoint_dir(pipeline))
    shutil.copytree(backup, checkpoint_dir(pipeline))  # the restore: Spark plans batch 1 again, now larger
    run_stream(pipeline, once=True, spark=spark)

    with mariadb.connect() as conn:
        comparison = compare_table(conn, fresh_database, "items", pipeline.delta.table_uri("items"))
    assert comparison.identical, comparison.describe()
