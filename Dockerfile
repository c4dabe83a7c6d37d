# Zico image for every service (web, scheduler, control consumer, device workers).
# TORCH_SPEC selects the PyTorch build: the default CPU wheel for web/control images; GPU hosts
# build with e.g. --build-arg TORCH_SPEC="torch==2.13.0" --build-arg TORCH_INDEX=<CUDA wheel index>.
FROM python:3.11-slim-bookworm
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 ZICO_VAR_DIR=/var/lib/zico
RUN apt-get update && apt-get install -y --no-install-recommends g++ cmake make curl \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.lock pyproject.toml ./
RUN pip install ${TORCH_INDEX:+--index-url $TORCH_INDEX} "$TORCH_SPEC" && pip install -r requirements.lock
COPY . .
RUN pip install --no-deps -e . && (python -m zico_allocator.build || true)
EXPOSE 8000
CMD ["gunicorn", "zico.wsgi", "-b", "0.0.0.0:8000", "-w", "3"]
