"""Deployment configuration: the compose file validates, production settings pass `check --deploy`,
and a production start without SECRET_KEY is refused with a message naming it."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROD_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "DEBUG": "0",
    "SECRET_KEY": "x" * 64 + "-prod-like-secret-for-check-deploy",
    "ALLOWED_HOSTS": "zico.example.org",
    "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/zico"),
    "DJANGO_SETTINGS_MODULE": "zico.settings",
}


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose (Debian package) not installed")
def test_compose_file_validates():
    out = subprocess.run(["docker-compose", "config", "-q"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose (Debian package) not installed")
def test_compose_file_validates_with_the_mps_profile_and_the_worker_in_the_hosts_ipc_namespace():
    env = {**os.environ, "ZICO_GPU_WORKER_IPC": "host"}
    out = subprocess.run(["docker-compose", "--profile", "mps", "config"], cwd=REPO, capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr
    import yaml

    services = yaml.safe_load(out.stdout)["services"]
    assert services["mps-daemon"]["ipc"] == "host" and services["gpu-worker-0"]["ipc"] == "host"
    # without the variable the worker keeps a private IPC namespace
    plain = subprocess.run(["docker-compose", "config"], cwd=REPO, capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "ZICO_GPU_WORKER_IPC"})
    assert plain.returncode == 0, plain.stderr
    assert yaml.safe_load(plain.stdout)["services"]["gpu-worker-0"]["ipc"] == "private"


def test_check_deploy_is_clean_with_production_env():
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                         cwd=REPO, env=PROD_ENV, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_production_without_secret_key_is_refused():
    env = {k: v for k, v in PROD_ENV.items() if k != "SECRET_KEY"}
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "SECRET_KEY must be set" in out.stderr


def test_no_pending_migrations():
    env = {**PROD_ENV, "DEBUG": "1"}
    out = subprocess.run([sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
                         cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
