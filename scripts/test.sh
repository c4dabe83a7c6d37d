#!/usr/bin/env bash
# Zico's whole test suite: set-up (idempotent), start PostgreSQL and Redis if they are down, run pytest.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/placement -q`.
# `scripts/test.sh --fast` is the fast tier: the pure core and the unit tests, no service started or reached
# (PostgreSQL and Redis URLs point at a closed port, so a test that needs one fails instead of passing by luck);
# tests/placement runs without Django at all.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
if [ "${1:-}" = "--fast" ]; then
  shift
  ensure_system_packages
  ensure_venv
  build_native
  cd "$ZICO_ROOT"
  closed="127.0.0.1:9"  # the discard port: nothing listens there
  export REDIS_URL="redis://$closed/15" DATABASE_URL="postgres://postgres@$closed/zico"
  log "fast tier: tests/placement without Django"
  "$PY" -m pytest -p no:django -W ignore::pytest.PytestConfigWarning tests/placement "$@"
  log "fast tier: the unit tests that need no service"
  exec "$PY" -m pytest --fast --ignore=tests/placement "$@"
fi
ensure_test_system_packages
ensure_venv
build_native
build_frontend
ensure_redis
ensure_postgres
cd "$ZICO_ROOT"
log "running the test suite"
exec "$PY" -m pytest "$@"
