"""What both load checks need before they start: a loopback-only guard and a migrated database."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[2]


def loopback_only(url: str) -> None:
    """Exit unless ``url`` names this machine's loopback: a load check never loads another server."""
    host = urlparse(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit(f"refusing to load a non-loopback server: {url}")


def ensure_database(url: str, env: dict[str, str] | None = None) -> None:
    """Create the PostgreSQL database of ``url`` if missing, then migrate it (``manage.py`` run with ``env``)."""
    import psycopg

    name = urlparse(url).path.lstrip("/")
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True)
