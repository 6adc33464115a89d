#!/usr/bin/env bash
# lakesync quick start.
#   ./quickstart.sh demo   set up (if needed) and run the demo pipeline end to end on the embedded stack
#   ./quickstart.sh test   set up (if needed) and run the test suite
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"

# How many parallel pytest workers `test` runs: LAKESYNC_TEST_WORKERS if set (0 = one process), else one more
# than the cores (the suite waits on servers part of the time) but no more than the free memory allows at about
# 4 GiB each (every worker starts its own MariaDB, broker and Spark); one process below two workers.
test_workers() {
  if [ -n "${LAKESYNC_TEST_WORKERS:-}" ]; then echo "$LAKESYNC_TEST_WORKERS"; return; fi
  local by_cores=$(( $(nproc) + 1 ))
  local by_memory=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) / 4194304 ))
  local workers=$(( by_cores < by_memory ? by_cores : by_memory ))
  echo $(( workers < 2 ? 0 : workers ))
}

case "${1:-demo}" in
  demo) shift || true; exec lakesync demo run "$@" ;;
  test) shift || true; workers=$(test_workers); echo "==> pytest on ${workers} parallel workers (0 = one process)"
        exec python -m pytest -n "$workers" "$@" ;;
  *) echo "usage: ./quickstart.sh [demo|test] [extra arguments]" >&2; exit 2 ;;
esac
