"""The envelope both ways: the same source changes, captured once by lakesync's relay and once by the real
Debezium 3.5 MariaDB connector (the dev kit's settings), each streamed into its own Delta root, give identical
Delta tables: both equal to the source by the independent oracle, and equal to each other in schema and rows.
Each change decodes to the same typed row images from either topic too. The table and its writes are those of the
end-to-end test (every type Debezium can capture; FLOAT and UUID values it can carry unchanged,
docs/debezium.md); a few hundred changes.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from lakesync_devkit.dev.debezium import ConnectorSettings
from lakesync_devkit.dev.stack import DevStack

from lakesync.core.types import arrow_table_from_json_rows
from lakesync.events.envelope import decode
from lakesync.full_load.load import FullLoad
from lakesync.relay import Relay
from lakesync.stream.app import run_stream
from tests.integration.test_debezium_stream_e2e import (  # noqa: F401 - connect_holder is a fixture
    _INSERT,
    EDGES,
    TABLE,
    Writer,
    _pipeline,
    _row,
    _wait_for_key,
    connect_holder,
)
from tests.kafkakit import read_records
from tests.oracle import assert_tables_match, read_delta, read_delta_table

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

#: Columns whose JSON form differs between the two topics for the same change (docs/debezium.md, *The envelope
#: both ways*): TIMESTAMP(0) without a fraction in Debezium's ZonedTimestamp ("...:07Z", the relay "...:07.000000Z"),
#: and BIGINT UNSIGNED as Debezium's scale-0 Decimal, decoded to exact text (the relay writes a JSON number).
JSON_FORM_DIFFERENCES = {"c_timestamp", "c_bigint_u"}


def _images(bootstrap: str, topic: str) -> dict[tuple[str | None, str, int], tuple[dict | None, dict | None]]:
    """Each streamed change of ``topic`` by (GTID, op, key), with its row images in lakesync's JSON form."""
    out = {}
    for record in read_records(bootstrap, topic, isolation="read_uncommitted"):
        if record.value() is None:
            continue  # Debezium's tombstone after a delete
        event = decode(record.value(), record.headers())
        if event.op != "r":  # Debezium's own snapshot: the relay has none (the full load writes Delta)
            key = (event.after or event.before or {})["id"]
            out[(event.position.gtid, event.op, key)] = (event.before, event.after)
    return out


def test_relay_and_debezium_topics_give_identical_delta_tables(
        stack: DevStack, monkeypatch, fresh_database: str, tmp_path: Path, spark,
        connect_holder) -> None:  # noqa: F811 - the fixture imported above
    for name, value in stack.connection_env().items():
        monkeypatch.setenv(name, value)
    with stack.mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute(TABLE)
        for row in EDGES:
            cur.execute(_INSERT, row)
        conn.commit()
    writer = Writer(stack, fresh_database, seed=23, first_key=100)
    writer.keys = []  # the edge rows hold what Debezium can't carry unchanged (a 7-digit FLOAT, a UUID ending in 00)
    writer.run(10)

    prefix = f"dbz{uuid.uuid4().hex[:8]}"
    connector = ConnectorSettings(databases=(fresh_database,), tables=(f"{fresh_database}.alltypes",),
                                  topic_prefix=prefix, snapshot_mode="initial",
                                  server_id=random.randrange(60_000, 64_000), name="parity-debezium")
    connect = connect_holder["connect"] = stack.start_debezium(connector, home=tmp_path / "connect", timeout=120)
    connect.wait_streaming(timeout=120)
    pipelines = {}
    for side, topic_prefix in (("relay", f"rly{uuid.uuid4().hex[:8]}"), ("debezium", prefix)):
        (tmp_path / side).mkdir()
        pipelines[side] = _pipeline(tmp_path / side, fresh_database, topic_prefix)
        FullLoad(pipeline=pipelines[side]).run()

    writer.run(120)  # a few hundred changes: inserts, updates, deletes, primary-key changes
    marker = writer.next_key + 10_000
    with stack.mariadb.connect(fresh_database) as conn, conn.cursor() as cur:
        cur.execute(_INSERT, _row(marker, random.Random(5)))
        conn.commit()
    Relay(pipelines["relay"], heartbeat_seconds=0.3).run(stop_when_idle_seconds=1.0)
    topics = {side: pipeline.topic("alltypes") for side, pipeline in pipelines.items()}
    _wait_for_key(stack.broker.bootstrap, topics["debezium"], marker)
    for pipeline in pipelines.values():
        run_stream(pipeline, once=True, spark=spark)

    uris = {side: pipeline.delta.table_uri("alltypes") for side, pipeline in pipelines.items()}
    with stack.mariadb.connect() as conn:
        for uri in uris.values():
            assert_tables_match(conn, fresh_database, {"alltypes": uri})
    schemas = {side: [f for f in read_delta_table(uri).schema if not f.name.startswith("_lakesync_")]
               for side, uri in uris.items()}
    assert schemas["relay"] == schemas["debezium"]
    rows = {side: sorted(read_delta(uri)[1], key=lambda row: row["id"]) for side, uri in uris.items()}
    assert rows["relay"] == rows["debezium"]
    assert len(rows["relay"]) > 50

    relayed, captured = (_images(stack.broker.bootstrap, topics[side]) for side in ("relay", "debezium"))
    assert writer.ops >= 200 and len(relayed) >= 200
    assert set(relayed) <= set(captured), "every change the relay wrote, Debezium wrote too"
    # in the JSON form, only what docs/debezium.md lists differs; typed as the Delta table, nothing does
    differ = {column for change in relayed
              for relay_image, debezium_image in zip(relayed[change], captured[change], strict=True)
              if relay_image is not None and debezium_image is not None
              for column in relay_image if relay_image[column] != debezium_image.get(column)}
    assert differ <= JSON_FORM_DIFFERENCES, differ
    schema = pa.schema([f.with_nullable(True) for f in schemas["relay"]])
    for change in relayed:
        typed = [[None if image is None else arrow_table_from_json_rows(schema, [image]).to_pylist()[0]
                  for image in images] for images in (relayed[change], captured[change])]
        assert typed[0] == typed[1], f"{change} decodes differently: {typed}"
