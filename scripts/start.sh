#!/usr/bin/env bash
# Start paragrade on its embedded defaults: SQLite in var/, schema migrated by Alembic, the shipped
# course imported (once an instructor exists), the API on :8000 and a local runner (bwrap).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/paragrade serve "$@"
