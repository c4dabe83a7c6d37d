#!/usr/bin/env bash
# Zico's whole test suite: set-up (idempotent), start PostgreSQL and Redis if they are down, run pytest.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/placement -q`.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_test_system_packages
ensure_venv
build_native
build_frontend
ensure_redis
ensure_postgres
cd "$ZICO_ROOT"
log "running the test suite"
exec "$PY" -m pytest "$@"
