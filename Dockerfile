# Zico image for every service (web, scheduler, control consumer, device workers).
# TORCH_SPEC selects the PyTorch build: the default CPU wheel for web/control images; GPU hosts
# build with e.g. --build-arg TORCH_SPEC="torch==2.13.0" --build-arg TORCH_INDEX=<CUDA wheel index>.

# Stage 1: the pinned chart library (frontend/package-lock.json) copied into static/vendor.
FROM node:20-slim AS frontend
WORKDIR /frontend
COPY frontend/package.json frontend/package-lock.json frontend/build.mjs ./
RUN mkdir -p static && npm ci --no-audit --no-fund && npm run build

# Stage 2: the Python app.
FROM python:3.11-slim-bookworm
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 ZICO_VAR_DIR=/var/lib/zico
# bubblewrap: the sandbox of user-script jobs (docs/workers.md, "User scripts and the sandbox")
RUN apt-get update && apt-get install -y --no-install-recommends g++ cmake make curl bubblewrap \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.lock pyproject.toml ./
RUN pip install ${TORCH_INDEX:+--index-url $TORCH_INDEX} "$TORCH_SPEC" && pip install -r requirements.lock
COPY . .
COPY --from=frontend /frontend/static/vendor frontend/static/vendor
RUN pip install --no-deps -e . && python -m zico_allocator.build
EXPOSE 8000
CMD ["gunicorn", "zico.wsgi", "-b", "0.0.0.0:8000", "-w", "3"]
