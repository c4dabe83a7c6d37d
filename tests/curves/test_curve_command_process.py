"""``manage.py curve`` as a process: it runs without ``django.setup()`` (no app's models imported) and ends
without the interpreter's teardown, yet its output is complete, its log messages reach the settings'
handlers and its exit status is Django's."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, tmp_path: Path, importtime: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEBUG": "1", "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("platform", ".")),
           "ZICO_ESTIMATE_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, *(["-X", "importtime"] if importtime else []), str(ROOT / "manage.py"), "curve", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


def test_an_estimate_writes_its_whole_json_and_exits_zero_without_loading_the_apps(tmp_path):
    done = manage("estimate", "digits-cnn", "-p", "batch_size=8", "--device", "cuda:0", "--json", "-",
                  tmp_path=tmp_path, importtime=True)
    assert done.returncode == 0, done.stderr[-2000:]
    curve = json.loads(done.stdout)  # the summary went to stderr, the JSON (flushed before the exit) to stdout
    assert curve["source"] == "estimate" and curve["device"] == "cuda:0" and curve["peak_bytes"] > 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "zico_workloads.curves.estimate" in imported  # the importtime lines are there to read
    assert not {"zico.jobs.models", "zico.cluster.models", "django.contrib.admin", "psycopg"} & imported
    assert not {"celery", "kombu"} & imported  # the project's Celery app loads with the apps (zico/__init__.py)
    again = manage("estimate", "digits-cnn", "-p", "batch_size=8", "--device", "cuda:0", tmp_path=tmp_path)
    assert again.returncode == 0 and "cache       hit" in again.stdout
    [entry] = (tmp_path / "cache").glob("*.json")
    entry.write_text('{"inputs": ')  # corrupt: recomputed, and the settings' logging says so on stderr
    logged = manage("estimate", "digits-cnn", "-p", "batch_size=8", "--device", "cuda:0", tmp_path=tmp_path)
    assert logged.returncode == 0 and "cache       hit" not in logged.stdout
    assert "WARNING zico_workloads.curves.estimate_cache: estimate cache" in logged.stderr


def test_a_command_error_is_printed_and_exits_one(tmp_path):
    done = manage("estimate", "no-such-workload", tmp_path=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("CommandError: unknown workload 'no-such-workload'")
    usage = manage("estimate", tmp_path=tmp_path)  # argparse: the workload is missing
    assert usage.returncode == 2 and "the following arguments are required: workload" in usage.stderr


def test_django_setup_loads_the_projects_celery_app_that_shared_tasks_bind_to():
    """What ``manage.py curve`` skips with ``django.setup()``: every other Django process (web, scheduler,
    consumer) gets the project's Celery app, so a ``shared_task`` sends through it."""
    code = ("import django, sys; assert 'celery' not in sys.modules; import zico; assert 'celery' not in sys.modules; "
            "django.setup(); from celery import current_app; from zico.health import health; "
            "print(current_app.main, health.app is zico.celery_app, zico.celery_app.main)")
    env = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "zico.settings",
           "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("platform", "."))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["zico", "True", "zico"]
