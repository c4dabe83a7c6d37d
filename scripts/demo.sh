#!/usr/bin/env bash
# Zico's main job, end to end on this machine: set-up, database, demo tenant and login, the web
# server, then the demo driver (scheduler, control consumer, one CPU device worker, two real
# training jobs sharing it). The web server keeps running afterwards; `scripts/demo.sh stop` ends it.
# `scripts/demo.sh --check` is the non-interactive form (CI): the same run, then every process it started
# is stopped, and the exit status is the demo's checks' (0 only when all of them hold).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
RUN_DIR="$ZICO_VAR_DIR/run"
mkdir -p "$RUN_DIR"
export DEBUG="${DEBUG:-1}"
export ZICO_PORT="${ZICO_PORT:-8000}"
export ZICO_BASE_URL="http://127.0.0.1:$ZICO_PORT"

stop_all() {
  for f in "$RUN_DIR"/*.pid; do
    [ -f "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null && log "stopped $(basename "$f" .pid)"
    rm -f "$f"
  done
}
if [ "${1:-}" = stop ]; then stop_all; exit 0; fi
CHECK=""
if [ "${1:-}" = --check ]; then CHECK=1; trap stop_all EXIT; fi

ensure_system_packages
ensure_venv
build_native
build_frontend
ensure_redis
cd "$ZICO_ROOT"
stop_all
log "migrating the database ($ZICO_VAR_DIR)"
"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py createdemo

log "starting the web server on $ZICO_BASE_URL"
"$VENV/bin/gunicorn" zico.wsgi -b "127.0.0.1:$ZICO_PORT" -w 2 --daemon \
  --pid "$RUN_DIR/web.pid" --access-logfile "$ZICO_VAR_DIR/web-access.log" --error-logfile "$ZICO_VAR_DIR/web.log"
for _ in $(seq 100); do curl -fs -o /dev/null "$ZICO_BASE_URL/api/schema/" -H 'Accept: application/json' 2>/dev/null && break; sleep 0.2; done

if [ -n "$CHECK" ]; then
  status=0
  "$PY" scripts/demo.py --base-url "$ZICO_BASE_URL" --stop-after || status=$?
  log "demo check $([ "$status" = 0 ] && echo passed || echo "FAILED (exit $status)"); stopping what it started"
  exit "$status"
fi
"$PY" scripts/demo.py --base-url "$ZICO_BASE_URL"
log "web: $ZICO_BASE_URL/  (demo login printed above; stop with: scripts/demo.sh stop)"
