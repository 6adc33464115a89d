"""The demo's report reads cleanly: log lines go to the log file, and the burst reports the rate it paced."""

from __future__ import annotations

import logging

from lakesync_devkit.demo.load import LoadReport
from lakesync_devkit.demo.run import log_to_file


def test_log_lines_during_the_demo_go_to_the_log_file_not_to_stderr(tmp_path, capsys):
    root = logging.getLogger()
    stderr_handler = logging.StreamHandler()
    root.addHandler(stderr_handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        with log_to_file(tmp_path / "demo.log", keep_stderr=False):
            logging.getLogger("lakesync.validation").info("validating table accounts")
        logging.getLogger("lakesync.after").info("after the demo")
    finally:
        root.removeHandler(stderr_handler)
        root.setLevel(level)
    assert "validating table accounts" in (tmp_path / "demo.log").read_text()
    err = capsys.readouterr().err
    assert "validating table accounts" not in err
    assert "after the demo" in err, "the handlers are restored afterwards"


def test_burst_summary_gives_the_paced_transaction_rate_and_the_row_change_rate_apart():
    report = LoadReport(transactions=1000, seconds=5.0)
    report.operations.update({"insert": 900, "update": 560})
    assert report.summary().startswith("1000 transactions in 5.0s (200/s), 1460 row changes (292/s)")
