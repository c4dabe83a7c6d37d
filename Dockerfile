# Zico image for every service (web, scheduler, control consumer, device workers).
# Build arguments (every default is what a connected host wants; deploy/build/README.md has the details):
#   PYTHON_IMAGE, NODE_IMAGE  base images (default python:3.11-slim-bookworm, node:20-slim); a host without a
#                             registry builds from local images with the same interface (scripts/compose-check.sh)
#   TORCH_SPEC, TORCH_INDEX   the PyTorch build: the default CPU wheel, or e.g. TORCH_INDEX=<CUDA wheel index>
# Build inputs, read by the build stages only and never copied into the image (deploy/build/):
#   deploy/build/extra-ca.pem    an extra CA bundle trusted by npm and pip during the build (a TLS proxy)
#   deploy/build/wheelhouse/     wheels: when it holds any, pip installs torch and requirements.lock from it alone
# Added top-level folders need no change here: the source is copied whole (less .dockerignore and deploy/build).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NODE_IMAGE=node:20-slim

# Stage 1: the pinned chart library (frontend/package-lock.json) copied into static/vendor.
FROM ${NODE_IMAGE} AS frontend
WORKDIR /frontend
COPY deploy/build /build-inputs
COPY frontend/package.json frontend/package-lock.json frontend/build.mjs ./
RUN if [ -f /build-inputs/extra-ca.pem ]; then export NODE_EXTRA_CA_CERTS=/build-inputs/extra-ca.pem; fi \
    && mkdir -p static && npm ci --no-audit --no-fund && npm run build

# Stage 2: the Python environment (/opt/venv), from the wheelhouse when one is given, else from the index.
FROM ${PYTHON_IMAGE} AS python-deps
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY deploy/build /build-inputs
COPY requirements.lock /tmp/requirements.lock
RUN set -e; python -m venv /opt/venv; \
    if [ -f /build-inputs/extra-ca.pem ]; then \
      cat "$(/opt/venv/bin/python -m pip._vendor.certifi)" /build-inputs/extra-ca.pem > /tmp/ca.pem; \
      export PIP_CERT=/tmp/ca.pem; fi; \
    if ls /build-inputs/wheelhouse/*.whl >/dev/null 2>&1; then \
      set -- --no-index --find-links /build-inputs/wheelhouse; else set --; fi; \
    /opt/venv/bin/pip install "$@" "setuptools>=70"; \
    /opt/venv/bin/pip install "$@" ${TORCH_INDEX:+--index-url $TORCH_INDEX} "$TORCH_SPEC"; \
    /opt/venv/bin/pip install "$@" -r /tmp/requirements.lock; \
    rm -f /tmp/ca.pem

# Stage 3: the source, less the build inputs.
FROM ${PYTHON_IMAGE} AS source
COPY . /src
RUN rm -rf /src/deploy/build

# Stage 4: the image.
FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 ZICO_VAR_DIR=/var/lib/zico PATH=/opt/venv/bin:$PATH
# bubblewrap: the sandbox of user-script jobs (docs/workers.md, "User scripts and the sandbox")
RUN apt-get update && apt-get install -y --no-install-recommends g++ cmake make curl bubblewrap util-linux \
    && rm -rf /var/lib/apt/lists/*
COPY --from=python-deps /opt/venv /opt/venv
WORKDIR /app
COPY --from=source /src /app
COPY --from=frontend /frontend/static/vendor frontend/static/vendor
RUN pip install --no-deps --no-build-isolation -e . && python -m zico_allocator.build
EXPOSE 8000
CMD ["gunicorn", "zico.wsgi", "-b", "0.0.0.0:8000", "-w", "3"]
