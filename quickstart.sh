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
  # The suite runs on LAKESYNC_TEST_WORKERS parallel pytest workers (default 3; each runs its own MariaDB,
  # broker and Spark, about 3.5 GB); -n 0 on the command line runs it in one process (docs/testing.md).
  test) shift || true; exec python -m pytest -n "${LAKESYNC_TEST_WORKERS:-3}" "$@" ;;
  *) echo "usage: ./quickstart.sh [demo|test] [extra arguments]" >&2; exit 2 ;;
esac
