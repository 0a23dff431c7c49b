#!/usr/bin/env bash
# The whole-course check: both shipped courses imported into a live server (embedded broker, a
# cpu,mpi runner), every package validated, every reference a CPU runner can grade submitted by a
# student and ranked on its leaderboard. Minutes on a 2-core machine; not part of the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pytest -m full tests/server/test_shipped_courses.py -s "$@"
