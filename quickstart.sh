#!/usr/bin/env bash
# lakesync quick start.
#   ./quickstart.sh demo   set up (if needed) and run the demo pipeline end to end on the embedded stack
#   ./quickstart.sh test   set up (if needed) and run the test suite
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"
case "${1:-demo}" in
  demo) shift || true; exec lakesync demo run "$@" ;;
  # LAKESYNC_TEST_WORKERS=3 runs the suite on three parallel pytest workers (each its own MariaDB, broker and
  # Spark, about 3.5 GB); the default, 0, runs it in one process: a parallel run failed once in three
  # (docs/testing.md).
  test) shift || true; exec python -m pytest -n "${LAKESYNC_TEST_WORKERS:-0}" "$@" ;;
  *) echo "usage: ./quickstart.sh [demo|test] [extra arguments]" >&2; exit 2 ;;
esac
