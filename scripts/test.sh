#!/usr/bin/env bash
# Set up (idempotent), then run the whole test suite; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check runners server tests bench
.venv/bin/mypy
exec .venv/bin/pytest "$@"
