#!/usr/bin/env bash
# The deployment check: docker-compose.yml run for real on this host, as users run it. Starts dockerd if none
# runs; builds local stand-ins of the base images (deploy/compose-check/standins/, cached as images); builds the
# project's image from the real Dockerfile (offline: a wheelhouse of torch + requirements.lock in
# deploy/build/wheelhouse, kept as a cache; the host's CA bundle as the build's extra CA); then
# deploy/compose-check/check.py brings up docker-compose.yml + deploy/compose-check/override.yml (no GPU, local
# base images), creates a tenant, user and token with manage.py, submits a catalog job and a sandbox-probing user
# script with the zico command and sees both succeed co-located, checks the web page and /metrics, restarts with
# down/up (jobs and timelines kept), adds a second worker host (its own compose project on the same network),
# kills it mid-job and sees its job finish on the first host. Prints each phase's time. On exit it removes every
# container, network and volume it made and stops the dockerd it started; images stay (the cache).
# Publishes only the web port, on 127.0.0.1 (a free port), never 5432 or 6379.
# Usage (root): scripts/compose-check.sh      Environment: PYTHON (default .venv/bin/python),
#   ZICO_CHECK_CA (the extra CA bundle for the build, default /etc/ssl/certs/ca-certificates.crt; empty: none)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
CA="${ZICO_CHECK_CA-/etc/ssl/certs/ca-certificates.crt}"
LOGS="$ROOT/var/compose-check"
FILES=(-f docker-compose.yml -f deploy/compose-check/override.yml)
mkdir -p "$LOGS"
T0=$SECONDS
phase_start=$SECONDS
say() { echo "[compose-check $(date +%H:%M:%S)] $*"; }
phase() { say "phase $1: $((SECONDS - phase_start)) s"; TIMES+=("$(printf '%5d s  %s' $((SECONDS - phase_start)) "$1")"); phase_start=$SECONDS; }
TIMES=()

for tool in docker docker-compose debootstrap; do
  command -v "$tool" >/dev/null || { echo "compose-check: $tool is not installed (apt-get install docker.io docker-compose debootstrap)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "compose-check: run as root (it may start dockerd and runs debootstrap)" >&2; exit 2; }
[ -x "$PYTHON" ] || { echo "compose-check: no Python at $PYTHON (scripts/setup.sh makes .venv; or set PYTHON)" >&2; exit 2; }

WORK="$(mktemp -d /tmp/zico-compose-check.XXXXXX)"
DOCKERD_PID=""
WROTE_CA=""
cleanup() {
  rc=$?
  set +e
  if docker info >/dev/null 2>&1; then
    if [ $rc != 0 ]; then  # what each service said, for the failure
      for p in zicocheck zicocheck-host2; do
        docker ps -a --filter "label=com.docker.compose.project=$p" --format '{{.Names}}' | while read -r c; do
          docker logs --tail 200 "$c" >"$LOGS/$c.log" 2>&1
        done
      done
      say "the services' last log lines: $LOGS/zicocheck*.log"
    fi
    say "removing the check's containers, networks and volumes"
    ZICO_FIRST_HOST_NETWORK=zicocheck_default docker-compose -p zicocheck-host2 --env-file "$WORK/env" "${FILES[@]}" \
      -f deploy/compose-check/second-host.yml --profile cpu down -v --remove-orphans >>"$LOGS/down.log" 2>&1
    docker-compose -p zicocheck --env-file "$WORK/env" "${FILES[@]}" --profile cpu down -v --remove-orphans \
      >>"$LOGS/down.log" 2>&1
  fi
  if [ -n "$DOCKERD_PID" ]; then
    say "stopping the dockerd this check started (pid $DOCKERD_PID)"
    kill "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  [ -n "$WROTE_CA" ] && rm -f deploy/build/extra-ca.pem
  rm -rf "$WORK"
  say "$([ $rc = 0 ] && echo PASSED || echo FAILED) in $((SECONDS - T0)) s"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# dockerd: the host's if one answers, else our own (overlay2, logs in var/compose-check/dockerd.log)
if ! docker info >/dev/null 2>&1; then
  dockerd --storage-driver=overlay2 >"$LOGS/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { tail -20 "$LOGS/dockerd.log" >&2; exit 1; }
  say "started dockerd (pid $DOCKERD_PID)"
fi
phase "dockerd"

deploy/compose-check/standins/build.sh
phase "stand-in base images"

# build inputs (deploy/build/README.md): the wheelhouse (kept between runs) and the extra CA bundle
# (async-timeout: what redis needs on Python < 3.11.3, such as Debian bookworm's 3.11.2 in the stand-in)
if ! ls deploy/build/wheelhouse/async_timeout-*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip download -q --no-deps -d deploy/build/wheelhouse -r requirements.lock torch==2.13.0 \
    'setuptools>=70' 'async-timeout>=4.0.3' >"$LOGS/wheelhouse.log" 2>&1 || { tail -20 "$LOGS/wheelhouse.log" >&2; exit 1; }
fi
if [ -n "$CA" ] && [ ! -f deploy/build/extra-ca.pem ]; then cp "$CA" deploy/build/extra-ca.pem; WROTE_CA=1; fi
phase "wheelhouse"

port="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
rand() { "$PYTHON" -c 'import secrets; print(secrets.token_hex(24))'; }
cat >"$WORK/env" <<EOF
SECRET_KEY=$(rand)
POSTGRES_PASSWORD=$(rand)
ZICO_METRICS_TOKEN=$(rand)
ALLOWED_HOSTS=localhost,127.0.0.1
SECURE_SSL_REDIRECT=0
ZICO_HTTP_PORT=127.0.0.1:$port
EOF
# a stale run's leftovers (an interrupted check whose clean-up could not run) would hold the names
docker-compose -p zicocheck --env-file "$WORK/env" "${FILES[@]}" --profile cpu down -v --remove-orphans \
  >>"$LOGS/down.log" 2>&1 || true
docker-compose -p zicocheck --env-file "$WORK/env" "${FILES[@]}" --profile cpu build web >"$LOGS/build.log" 2>&1 \
  || { tail -40 "$LOGS/build.log" >&2; exit 1; }
phase "image build (Dockerfile)"

PYTHONPATH="$ROOT" "$PYTHON" deploy/compose-check/check.py "$WORK/env" "$WORK"
phase "compose phases (check.py)"
for t in "${TIMES[@]}"; do say "time $t"; done
