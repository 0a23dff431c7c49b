#!/usr/bin/env bash
# Set up (idempotent), then run the whole test suite; extra arguments go to one plain pytest run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check runners server tests bench
.venv/bin/mypy
if [ $# -gt 0 ]; then
  exec .venv/bin/pytest "$@"
fi
# Tests that start no sandbox and time nothing share the cores (tests/conftest.py, CONCURRENT);
# then the rest, one at a time, as timing needs. Both parts run whatever the first one gives.
status=0
.venv/bin/pytest -n "$(nproc)" -m "concurrent and not full" || status=$?
# --durations: where the serial part's time goes, in every CI log. The GPU runner's image (half an
# hour of both cores from nothing) is checked where its recipe changes, not on every run:
# `bash scripts/test.sh -m gpu_image tests/test_apptainer_backend.py` (docs/contributors/testing.md).
.venv/bin/pytest -m "not concurrent and not full and not gpu_image" --durations=30 || status=$?
exit "$status"
