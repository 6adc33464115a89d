"""Validation of the demo tables after a real full load, at a size that shows the throughput.

``LAKESYNC_VALIDATE_ROWS`` sets the number of transactions (default 200k; the note reports 1M). Prints the
seconds and rows/s of a full comparison, and proves that one changed row among them is found by its key.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import write_deltalake
from lakesync_devkit.demo.database import create_demo_database, seed_demo_data, seed_transactions

from lakesync.core.config import parse_pipeline
from lakesync.full_load.load import FullLoad
from lakesync.validation.validate import validate_pipeline
from tests.deltakit import delta_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = int(os.environ.get("LAKESYNC_VALIDATE_ROWS", "200000"))


@pytest.fixture
def loaded(stack, mariadb, fresh_database, tmp_path, monkeypatch):
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    with mariadb.connect() as conn:
        create_demo_database(conn, fresh_database)
        seed_demo_data(conn, fresh_database, customers=200, transactions=0)
        seed_transactions(conn, fresh_database, rows=ROWS, start_id=1)
    pipeline = parse_pipeline({
        "name": "scale",
        "source": {"conn_id": "lakesync_demo_mysql", "database": fresh_database},
        "tables": {"overrides": {"audit_log": {"semantics": "append_log"}}},
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topic_prefix": "t"},
        "delta": {"root": str(tmp_path / "delta")},
        "state_dir": str(tmp_path / "state"),
    }, source_name="scale.yaml")
    FullLoad(pipeline).run()
    return pipeline


def test_full_load_validates_equal_and_one_changed_row_is_found(loaded):
    for fast_read in (False, True):
        started = time.monotonic()
        report = validate_pipeline(loaded, settle_timeout_s=1, rounds=2, fast_read=fast_read)
        seconds = time.monotonic() - started
        rows = sum(table.source_rows for table in report.tables)
        print(f"\n{'fast' if fast_read else 'plain'} read: validated {rows} source rows in {len(report.tables)} "
              f"tables in {seconds:.2f}s ({rows / seconds:,.0f} rows/s): " + "; ".join(t.describe() for t in report.tables))
        assert report.matches, [t.describe() for t in report.failed]

    uri = loaded.delta.table_uri("transactions")
    table = delta_table(uri)
    target = ROWS // 2
    amount = pc.if_else(pc.equal(table["id"], target), pa.scalar(-1, table.schema.field("amount").type),
                        table["amount"])
    write_deltalake(uri, table.set_column(table.schema.get_field_index("amount"), table.schema.field("amount"),
                                          amount), mode="overwrite")
    started = time.monotonic()
    (result,) = validate_pipeline(loaded, tables=["transactions"], settle_timeout_s=1, rounds=2).tables
    print(f"found the changed row in {time.monotonic() - started:.2f}s: {result.describe()}")
    assert result.different == [{"id": target}]
