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
  test) shift || true; exec python -m pytest "$@" ;;
  *) echo "usage: ./quickstart.sh [demo|test] [extra arguments]" >&2; exit 2 ;;
esac
