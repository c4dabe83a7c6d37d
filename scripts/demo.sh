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
# where device workers fetch a job's code and send its output files: this web server, on whichever port
export ZICO_WORKER_API_URL="${ZICO_WORKER_API_URL:-$ZICO_BASE_URL}"

# stop_all: SIGTERM to every process with a pid file in $RUN_DIR, then wait until each has exited, at most
# ZICO_STOP_WAIT_S seconds (default 20) for all of them together; one still running then gets SIGKILL. It returns
# only once every process it signalled is gone (a process stuck in the kernel past 5 s after SIGKILL is named),
# and says what it stopped and how.
STOP_WAIT_S="${ZICO_STOP_WAIT_S:-20}"
_alive() {  # a zombie (exited, not yet reaped by its parent) counts as gone
  kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]
}
stop_all() {
  local f name pid entry started=$SECONDS deadline pending=()
  for f in "$RUN_DIR"/*.pid; do
    [ -f "$f" ] || continue
    name="$(basename "$f" .pid)"; pid="$(cat "$f")"; rm -f "$f"
    if [[ "$pid" =~ ^[0-9]+$ ]] && kill "$pid" 2>/dev/null; then pending+=("$name:$pid")
    else log "$name (pid $pid) was not running"; fi
  done
  [ ${#pending[@]} -eq 0 ] && return 0
  deadline=$((SECONDS + STOP_WAIT_S))
  for entry in "${pending[@]}"; do
    name="${entry%%:*}"; pid="${entry##*:}"
    while _alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if _alive "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 50); do _alive "$pid" || break; sleep 0.1; done
      if _alive "$pid"; then log "$name (pid $pid) did not stop within ${STOP_WAIT_S} s of SIGTERM, nor 5 s after SIGKILL"
      else log "$name (pid $pid) did not stop within ${STOP_WAIT_S} s of SIGTERM: killed"; fi
    else
      log "stopped $name (pid $pid) in $((SECONDS - started)) s"
    fi
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
