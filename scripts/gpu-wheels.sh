#!/usr/bin/env bash
# Fetch, on a machine with package-index access, the wheels a bare GPU host (CUDA + torch +
# transformers + pytest preinstalled, no network) lacks for scripts/gpu-check.sh, at the versions
# pinned in requirements.lock. Then copy the folder to the GPU host and run there:
#   ZICO_WHEELHOUSE=<folder> scripts/gpu-check.sh      (or: pip install --no-index --target ... <folder>/*.whl)
# Usage: scripts/gpu-wheels.sh [DEST (default var/gpu-wheels)] [PYTHON_VERSION of the GPU host (default 3.12)]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/var/gpu-wheels}"
PYVER="${2:-3.12}"
# What the GPU check imports beyond such an image: the catalog's JSON-Schema validation and, through
# workers.device, the Celery app and the telemetry keys (Django settings are never loaded).
NAMES="jsonschema jsonschema-specifications referencing rpds-py celery kombu billiard vine amqp
click-didyoumean click-plugins click-repl prompt_toolkit wcwidth tzlocal Django asgiref sqlparse redis"
pins=()
for n in $NAMES; do
  line="$(grep -i -E "^${n//[-_]/[-_]}==" "$ROOT/requirements.lock")" || { echo "not pinned in requirements.lock: $n" >&2; exit 1; }
  pins+=("$line")
done
mkdir -p "$DEST"
python3 -m pip download --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST" "${pins[@]}"
echo "wheels for Python $PYVER in $DEST"
