"""The device worker's own settings, read from the environment (and ``.env`` in the repository root, where real
environment variables win), without Django: Redis and the Celery broker, the host name in queue names, and the
directories. Same variables and defaults as the web side's settings (README.md, Configuration).

Malformed values raise ValueError naming the variable (the worker refuses to start with that message).
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root, as the web side's BASE_DIR
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_VISIBILITY_TIMEOUT_S = 43200  # as the web side's ZICO_BROKER_VISIBILITY_TIMEOUT_S (12 h)


def _dotenv(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of ``path`` (``#`` comments, an optional ``export``, quotes around the value
    stripped); {} when the file does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[name.strip()] = value
    return out


def get(name: str, default: str) -> str:
    """The variable ``name``: the environment's, else ``.env``'s, else ``default`` (an empty value counts as unset)."""
    value = os.environ.get(name) or _dotenv(ROOT / ".env").get(name)
    return value if value else default


def redis_url() -> str:
    return get("REDIS_URL", DEFAULT_REDIS_URL)


def broker_url() -> str:
    return get("CELERY_BROKER_URL", redis_url())


def result_backend() -> str:
    return get("CELERY_RESULT_BACKEND", redis_url())


def host() -> str:
    """Host name in queue names (``ZICO_HOST``; default: this machine's short host name)."""
    return get("ZICO_HOST", socket.gethostname().split(".")[0])


def var_dir() -> Path:
    return Path(get("ZICO_VAR_DIR", str(ROOT / "var")))


def data_dir() -> Path:
    return Path(get("ZICO_DATA_DIR", str(var_dir() / "data")))


def checkpoint_dir() -> Path:
    return Path(get("ZICO_CHECKPOINT_DIR", str(var_dir() / "checkpoints")))


def visibility_timeout_s() -> int:
    """``ZICO_BROKER_VISIBILITY_TIMEOUT_S``: seconds a task may stay unacknowledged before Redis redelivers it."""
    raw = get("ZICO_BROKER_VISIBILITY_TIMEOUT_S", str(DEFAULT_VISIBILITY_TIMEOUT_S)).strip()
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"ZICO_BROKER_VISIBILITY_TIMEOUT_S={raw!r}: expected a positive int")
    return int(raw)


def log_level() -> str:
    return get("LOG_LEVEL", "INFO")
