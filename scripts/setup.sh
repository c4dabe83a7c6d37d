#!/usr/bin/env bash
# Zico set-up, shared by scripts/demo.sh and scripts/test.sh: system packages, the virtualenv
# with pinned dependencies, the native allocator build, front-end assets, and local services.
# Idempotent: a second run only does what changed. Source it, then call the functions you need.
set -euo pipefail

ZICO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ZICO_ROOT/.venv"
PY="$VENV/bin/python"
export ZICO_VAR_DIR="${ZICO_VAR_DIR:-$ZICO_ROOT/var}"
mkdir -p "$ZICO_VAR_DIR"

log() { printf '\033[1m[zico]\033[0m %s\n' "$*" >&2; }
die() { printf '[zico] error: %s\n' "$*" >&2; exit 1; }

_as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $*"; fi; }

_apt_updated=""
apt_install() {  # apt_install PKG... — installs the Debian packages that are missing
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing system packages (${missing[*]}) and no apt-get to install them"
  log "installing system packages: ${missing[*]}"
  if [ -z "$_apt_updated" ]; then _as_root apt-get update -q >/dev/null; _apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive _as_root apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_system_packages() {  # what the demo needs; tests add postgresql and chromium
  command -v python3.11 >/dev/null || apt_install python3.11 python3.11-venv
  # bubblewrap: the sandbox of user-script jobs (workers/agent/sandbox.py); setpriv and prlimit are util-linux's
  apt_install redis-server g++ cmake make bubblewrap
  command -v npm >/dev/null || apt_install nodejs npm
}

ensure_test_system_packages() {
  ensure_system_packages
  # docker-compose: the deployment test validates docker-compose.yml with `docker-compose config`
  apt_install postgresql chromium chromium-driver docker-compose
}

ensure_venv() {
  local stamp="$VENV/.zico-stamp" want
  want="$(cat "$ZICO_ROOT/requirements.lock" "$ZICO_ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
  if [ ! -x "$PY" ]; then
    log "creating virtualenv in .venv"
    "$(command -v python3.11 || command -v python3)" -m venv "$VENV"
  fi
  "$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || die ".venv is not Python 3.11; remove it and rerun"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing pinned Python dependencies (requirements.lock)"
    "$PY" -m pip install -q --upgrade pip
    # torch first and by exact version: the CPU build, never an accidental multi-GB CUDA build.
    "$PY" -m pip install -q "torch==2.13.0"
    "$PY" -m pip install -q -r "$ZICO_ROOT/requirements.lock"
    "$PY" -m pip install -q --no-deps -e "$ZICO_ROOT"
    echo "$want" > "$stamp"
  fi
}

build_native() {  # the shared allocator (C++/CUDA) and its CPU shim
  if [ -f "$ZICO_ROOT/allocator/python/zico_allocator/build.py" ]; then
    log "building the shared allocator"
    "$PY" -m zico_allocator.build >/dev/null
  fi
}

build_frontend() {  # pinned chart library from npm, copied into static files
  if [ -f "$ZICO_ROOT/frontend/package.json" ]; then
    if [ ! -d "$ZICO_ROOT/frontend/node_modules" ] || [ "$ZICO_ROOT/frontend/package-lock.json" -nt "$ZICO_ROOT/frontend/node_modules" ]; then
      log "installing front-end packages (npm ci)"
      (cd "$ZICO_ROOT/frontend" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
    (cd "$ZICO_ROOT/frontend" && npm run --silent build >/dev/null)
  fi
}

ensure_redis() {
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    log "starting Redis on 127.0.0.1:6379"
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 50); do redis-cli ping >/dev/null 2>&1 && return 0; sleep 0.1; done
    die "Redis did not start"
  fi
}

ensure_postgres() {
  if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    log "starting PostgreSQL on 127.0.0.1:5432"
    local ver; ver="$(ls /etc/postgresql | sort -V | tail -1)"
    _as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start
    for _ in $(seq 100); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
  fi
  # Tests connect as postgres over TCP: use trust (this machine) or fall back to a local password.
  if [ -z "${DATABASE_URL:-}" ] && ! psql -h 127.0.0.1 -U postgres -tAc 'select 1' postgres >/dev/null 2>&1; then
    log "setting a local password for the postgres role (TCP login for the tests)"
    _as_root su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
    export DATABASE_URL="postgres://postgres:postgres@127.0.0.1:5432/zico"
  fi
}
