"""Django system checks for Zico's own invariants (ids ``zico.E0xx`` errors, ``zico.W0xx`` warnings).

Registered by ``TenantsConfig.ready()``; run by ``manage.py check`` and at server start.

| id        | what it catches                                                               |
|-----------|-------------------------------------------------------------------------------|
| zico.E001 | no Celery broker configured while tasks are not run eagerly                    |
| zico.E002 | the broker is not Redis (GPU workers speak only Redis: broker, telemetry)     |
| zico.E003 | ZICO_HOST cannot be used in a queue name (cpu.<host>, gpu.<host>.<index>)      |
| zico.W001 | ZICO_DATA_DIR exists but is not a readable directory                           |
| zico.W002 | ZICO_CHECKPOINT_DIR is not writable (and cannot be created)                    |
| zico.W003 | REDIS_URL is not a redis:// or rediss:// URL (live telemetry will not work)    |
| zico.W004 | (deploy) SQLite database while DEBUG is off: concurrent writers will block     |
"""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from zico_contracts.queues import cpu_queue

REDIS_SCHEMES = ("redis", "rediss", "unix")


def check_broker(app_configs=None, **kwargs):
    if getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False):
        return []
    url = getattr(settings, "CELERY_BROKER_URL", "") or ""
    if not url:
        return [Error("No Celery broker is configured and tasks are not run eagerly.",
                      hint="Set CELERY_BROKER_URL or REDIS_URL (redis://host:6379/0), or "
                           "CELERY_TASK_ALWAYS_EAGER=1 for single-process tests.", id="zico.E001")]
    if urlsplit(url).scheme not in REDIS_SCHEMES:
        return [Error(f"The Celery broker {urlsplit(url).scheme}:// is not Redis.",
                      hint="GPU workers talk only to Redis; set CELERY_BROKER_URL to a redis:// URL.",
                      id="zico.E002")]
    return []


def check_host(app_configs=None, **kwargs):
    try:
        cpu_queue(settings.ZICO_HOST)
    except ValueError as exc:
        return [Error(f"ZICO_HOST {settings.ZICO_HOST!r} cannot name a queue: {exc}",
                      hint="Set ZICO_HOST to letters, digits, '-' and '_' only.", id="zico.E003")]
    return []


def _creatable(path: Path) -> bool:
    """True when ``path`` is a writable directory, or could be created by this process."""
    if path.exists():
        return path.is_dir() and os.access(path, os.W_OK | os.X_OK)
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def check_dirs(app_configs=None, **kwargs):
    out = []
    data = Path(settings.ZICO_DATA_DIR)
    if data.exists() and not (data.is_dir() and os.access(data, os.R_OK | os.X_OK)):
        out.append(Warning(f"ZICO_DATA_DIR {data} is not a readable directory.",
                           hint="Jobs read their corpora and images there; fix its permissions or path.",
                           id="zico.W001"))
    ckpt = Path(settings.ZICO_CHECKPOINT_DIR)
    if not _creatable(ckpt):
        out.append(Warning(f"ZICO_CHECKPOINT_DIR {ckpt} is not writable and cannot be created.",
                           hint="Jobs whose worker is lost resume from checkpoints written there.",
                           id="zico.W002"))
    return out


def check_redis_url(app_configs=None, **kwargs):
    url = getattr(settings, "REDIS_URL", "") or ""
    if urlsplit(url).scheme not in REDIS_SCHEMES:
        return [Warning(f"REDIS_URL {url!r} is not a redis:// URL.",
                        hint="Live telemetry and control use Redis; set REDIS_URL=redis://host:6379/0.",
                        id="zico.W003")]
    return []


def sqlite_in_production(debug: bool, databases: dict) -> list[Warning]:
    """The W004 rule as a pure function of DEBUG and DATABASES (testable without touching settings)."""
    if not debug and databases["default"]["ENGINE"].endswith("sqlite3"):
        return [Warning("SQLite is the database while DEBUG is off.",
                        hint="Use PostgreSQL (DATABASE_URL=postgres://…) for the web, scheduler and control "
                             "consumer writing at once.", id="zico.W004")]
    return []


def check_sqlite_in_production(app_configs=None, **kwargs):
    return sqlite_in_production(settings.DEBUG, settings.DATABASES)


def register_all() -> None:
    """Register every check (idempotent: Django's registry is a set)."""
    register(check_broker, "zico")
    register(check_host, "zico")
    register(check_dirs, "zico")
    register(check_redis_url, "zico")
    register(check_sqlite_in_production, Tags.database, deploy=True)
