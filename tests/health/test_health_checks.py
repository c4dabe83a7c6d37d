"""Health: a task goes through the real Redis to a real worker and back; /healthz checks DB and Redis."""
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from zico.celery import app
from zico_contracts.queues import cpu_queue, device_queue, gpu_queue

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker_queue():
    queue = f"cpu.test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "zico.test_settings"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "zico", "worker", "-Q", queue, "-P", "solo",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        yield queue
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_health_task_round_trips_through_redis_to_a_real_worker(worker_queue):
    nonce = uuid.uuid4().hex
    result = app.send_task("zico.control.health", args=[nonce], queue=worker_queue)
    answer = result.get(timeout=60)
    assert answer["ok"] is True
    assert answer["nonce"] == nonce
    assert answer["pid"] != os.getpid()  # answered by the worker process, not eagerly here


def test_queue_names_follow_the_declared_scheme():
    assert cpu_queue("node1") == "cpu.node1"
    assert gpu_queue("node1", 3) == "gpu.node1.3"
    assert device_queue("gpu", "n", 0) == "gpu.n.0"
    for bad in ("", "a.b", "x y", "../etc"):
        with pytest.raises(ValueError, match="host"):
            cpu_queue(bad)
    with pytest.raises(ValueError, match="index"):
        gpu_queue("n", -1)
    with pytest.raises(ValueError, match="kind"):
        device_queue("tpu", "n", 0)


def test_control_tasks_route_to_the_control_queue():
    route = app.amqp.router.route({}, "zico.control.health")
    assert route["queue"].name == "control"


@pytest.mark.django_db
def test_healthz_reports_database_and_redis(client):
    resp = client.get("/healthz")
    assert resp.status_code == 200
    assert resp.json() == {"ok": True, "database": "ok", "redis": "ok"}


@pytest.mark.django_db
def test_healthz_names_redis_when_it_is_unreachable(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    resp = client.get("/healthz")
    assert resp.status_code == 503
    assert resp.json()["redis"].startswith("error:")
    assert resp.json()["database"] == "ok"
