"""Fixtures for the security tests: personas, fresh rate-limit counters per test, rate overrides."""
import uuid

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from zico.ratelimits import FallbackRedisCache
from tests.support.tenants import make_personas


@pytest.fixture
def personas(db):
    return make_personas()


@pytest.fixture(autouse=True)
def fresh_counters():
    """Every test counts under its own Redis key prefix (deleted afterwards) and starts with Redis 'up'."""
    prefix = f"zico-test-rl-{uuid.uuid4().hex[:12]}"
    caches = {**settings.CACHES, "ratelimit": {**settings.CACHES["ratelimit"], "KEY_PREFIX": prefix}}
    FallbackRedisCache._down_until = 0.0
    with override_settings(CACHES=caches):
        yield prefix
    FallbackRedisCache._down_until = 0.0
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)


@pytest.fixture
def rates():
    """rates(api="3/m", ...) -> a context manager setting those limits (the others stay as configured)."""

    def make(**limits):
        return override_settings(RATE_LIMITS={**settings.RATE_LIMITS, **limits})

    return make
