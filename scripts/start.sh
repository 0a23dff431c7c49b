#!/usr/bin/env bash
# Start paragrade on its embedded defaults. Until the server lands this runs the grading demo:
# the t1 reference and the unfinished starter graded in the bwrap sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/paragrade demo "$@"
