"""Fixtures for the `zico` command's tests: a real Django server (pytest-django's live_server) over the test
PostgreSQL database and Redis, personas with API tokens, and the command run in-process (click's runner) or
as its own process, with its config under a temporary XDG_CONFIG_HOME."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from django.conf import settings as django_settings

from zico.tenants.models import ApiToken
from tests.support.tenants import make_personas
from zico_cli import config
from zico_cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def personas(transactional_db):
    return make_personas()


@pytest.fixture
def server(live_server, settings, tmp_path):
    """The live server's URL, with code archives and job files under the test's own directory."""
    settings.ZICO_CODE_DIR, settings.ZICO_JOB_FILES_DIR = tmp_path / "code", tmp_path / "jobfiles"
    return live_server.url


@pytest.fixture
def home(tmp_path, monkeypatch):
    """XDG_CONFIG_HOME for the command (where `zico login` writes its config)."""
    path = tmp_path / "config-home"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(path))
    return path


@pytest.fixture
def token_of():
    return lambda user: ApiToken.issue(user, "cli test")[1]


@pytest.fixture
def zico(home):
    """zico(*args) -> click's Result of running the command in this process."""
    runner = CliRunner()
    return lambda *args, input=None: runner.invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


@pytest.fixture
def signed_in(zico, server, personas, token_of):
    """The teammate signed in with `zico login`."""
    result = zico("login", server, "--token", token_of(personas.teammate))
    assert result.exit_code == 0, result.output
    return config.load()


@pytest.fixture
def zico_process(home):
    """zico_process(*args) -> a Popen of `python -m zico_cli ARGS` (text pipes)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = []

    def start(*args):
        p = subprocess.Popen([sys.executable, "-m", "zico_cli", *map(str, args)], cwd=ROOT, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.fixture
def rdb():
    r = redis.Redis.from_url(django_settings.REDIS_URL)
    yield r
    for key in r.scan_iter("zico:job:*:log"):
        r.delete(key)
