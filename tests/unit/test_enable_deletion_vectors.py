"""What ``lakesync enable-deletion-vectors`` plans per table, and how a failed table is reported (no Spark:
``make_writable`` is replaced where a test needs it to fail; the real one runs in
tests/integration/test_enable_deletion_vectors_command.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from deltalake.exceptions import CommitFailedError

from lakesync.cli.enable_deletion_vectors import _upgrade_cell
from lakesync.sink import upgrade
from lakesync.sink.upgrade import TableUpgrade, inspect_table, upgrade_table


def test_a_delta_rs_table_needs_its_features_listed_then_deletion_vectors_switched_on_in_that_order() -> None:
    plan = TableUpgrade("t", "/x", exists=True, reader_version=1, writer_version=7,
                        missing_features=["invariants"])
    assert plan.steps == ["add the writer features invariants",
                          "switch deletion vectors on (protocol reader 3 / writer 7; can't be undone)"]


@pytest.mark.parametrize("plan", [
    TableUpgrade("t", "/x", exists=False),
    TableUpgrade("t", "/x", exists=True, refused=["a b"]),
    TableUpgrade("t", "/x", exists=True, error="can't read the table: denied"),
    TableUpgrade("t", "/x", exists=True, reader_version=3, writer_version=7, deletion_vectors=True),
], ids=["absent", "refused", "unreadable", "done"])
def test_a_table_absent_refused_unreadable_or_done_has_no_step(plan: TableUpgrade) -> None:
    assert plan.steps == []


def _table(tmp_path) -> str:
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([1, 2], pa.int64())}))
    return uri


def test_a_failure_is_reported_per_table_with_the_state_read_again(tmp_path, monkeypatch) -> None:
    uri = _table(tmp_path)

    def fails(table, table_uri, session) -> None:
        raise RuntimeError("the object store said no")

    monkeypatch.setattr(upgrade, "make_writable", fails)
    after = upgrade_table(inspect_table("t", uri, None), session=None, storage_options=None)  # type: ignore[arg-type]
    assert after.error == "RuntimeError: the object store said no" and not after.upgraded
    assert not after.changed_before_error and after.exists
    assert _upgrade_cell(after).startswith("failed, nothing changed: RuntimeError")


def test_a_lost_commit_race_is_tried_again(tmp_path, monkeypatch) -> None:
    uri = _table(tmp_path)
    calls = []

    def loses_once(table, table_uri, session) -> None:
        calls.append(table_uri)
        if len(calls) == 1:
            raise CommitFailedError("a concurrent writer committed first")

    monkeypatch.setattr(upgrade, "make_writable", loses_once)
    after = upgrade_table(inspect_table("t", uri, None), session=None, storage_options=None)  # type: ignore[arg-type]
    assert len(calls) == 2 and after.error is None and after.upgraded
