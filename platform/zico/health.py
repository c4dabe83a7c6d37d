"""Health checks: the Celery health task (a worker consumes its queue and reaches the broker) and
the `/healthz` endpoint (the web process reaches its database and Redis), for compose and probes.
"""
import os
import socket
import time

import redis
from celery import shared_task
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

from zico_contracts.tasks import HEALTH


@shared_task(name=HEALTH, ignore_result=False)
def health(nonce: str = "") -> dict:
    """Echo ``nonce`` with the answering worker's host, pid and wall-clock time (s since epoch)."""
    return {"ok": True, "nonce": nonce, "host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}


@never_cache
def healthz(request):
    """200 with {"database": "ok", "redis": "ok"} when both answer; 503 naming what failed otherwise."""
    checks = {}
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # any driver error means "not healthy"; report its class, not secrets
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1).ping()
        checks["redis"] = "ok"
    except redis.RedisError as exc:
        checks["redis"] = f"error: {type(exc).__name__}"
    ok = all(v == "ok" for v in checks.values())
    return JsonResponse({"ok": ok, **checks}, status=200 if ok else 503)
