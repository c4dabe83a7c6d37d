"""Settings for the test suite: the real PostgreSQL and Redis on localhost unless overridden.

Env defaults are set before zico.settings reads the environment; anything already set wins,
so CI or a developer can point the tests elsewhere with DATABASE_URL / REDIS_URL.
"""
import os

os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/zico")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")  # not db 0: the demo and default settings use that
# Rate limits out of the way of the rest of the suite (personas reuse usernames, every client is
# 127.0.0.1); tests/security sets the rates it tests explicitly (override_settings(RATE_LIMITS=...)).
for _var in ("ZICO_RATE_SIGNIN_IP", "ZICO_RATE_SIGNIN_USER", "ZICO_RATE_API", "ZICO_RATE_API_BAD_TOKEN",
             "ZICO_RATE_JOB_SUBMIT_USER", "ZICO_RATE_JOB_SUBMIT_TENANT"):
    os.environ.setdefault(_var, "100000/m")
os.environ["DJANGO_SETTINGS_MODULE"] = "zico.test_settings"  # inherited by worker subprocesses

from .settings import *  # noqa: E402,F401,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast user creation in tests
