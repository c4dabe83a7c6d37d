"""/metrics: Prometheus text with device, job, delay, placement and queue figures; staff or token only."""
import time

import pytest
import redis
from django.conf import settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from zico.cluster.models import Device, Node
from zico.jobs.models import Event, Job
from zico_contracts import keys
from zico.telemetry.models import TimelinePoint
from tests.support.tenants import make_personas

GIB = 1 << 30


def _samples(body: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def cluster(db):
    p = make_personas()
    node = Node.objects.create(host="metricsnode")
    dev = Device.objects.create(node=node, index=0, kind="gpu", name="H200", uuid="GPU-m0",
                                total_bytes=140 * GIB, budget_bytes=100 * GIB, last_heartbeat=timezone.now())
    running = Job.objects.create(tenant=p.tenant, owner=p.owner, name="r", workload="digits-cnn", params={})
    Job.objects.filter(pk=running.pk).update(status="running")
    Job.objects.create(tenant=p.tenant, owner=p.owner, name="q", workload="digits-cnn", params={})
    now = int(time.time())
    for sec, (alloc, res) in enumerate([(5 * GIB, 8 * GIB), (7 * GIB, 9 * GIB)]):
        TimelinePoint.objects.create(device=dev, job=None, second=now - 10 + sec, time=timezone.now(),
                                     allocated_bytes=alloc, reserved_bytes=res)
        TimelinePoint.objects.create(device=dev, job_id=running.pk, second=now - 10 + sec, time=timezone.now(),
                                     allocated_bytes=alloc // 2, reserved_bytes=res)
    Event.record(Event.Kind.DELAY, job=running, device=dev, iteration=3, delay_s=0.25, reason="budget")
    Event.record(Event.Kind.DELAY, job=running, device=dev, iteration=4, delay_s=0.5, reason="budget")
    r = redis.Redis.from_url(settings.REDIS_URL)
    hb = keys.heartbeat_key(keys.device_key("gpu", "metricsnode", 0))
    r.set(hb, "{}", ex=30)
    yield p, dev, running
    r.delete(hb)


def test_it_exposes_device_job_delay_and_queue_figures_to_staff(client, cluster):
    p, dev, running = cluster
    client.force_login(p.staff)
    resp = client.get("/metrics")
    assert resp.status_code == 200
    s = _samples(resp.content.decode())
    lab = (("device", "gpu.metricsnode.0"), ("host", "metricsnode"), ("index", "0"), ("kind", "gpu"))
    assert s[("zico_device_budget_bytes", lab)] == 100 * GIB
    assert s[("zico_device_total_bytes", lab)] == 140 * GIB
    assert s[("zico_device_reserved_bytes", lab)] == 9 * GIB  # the newest point, not the first
    assert s[("zico_device_allocated_bytes", lab)] == 7 * GIB
    assert s[("zico_worker_up", lab)] == 1
    assert s[("zico_worker_last_heartbeat_timestamp_seconds", lab)] == pytest.approx(time.time(), abs=60)
    job_lab = (("job", str(running.pk)), ("tenant", "acme"), ("workload", "digits-cnn"))
    assert s[("zico_job_allocated_bytes", job_lab)] == (7 * GIB) // 2
    assert s[("zico_delays_total", ())] == 2
    assert s[("zico_delay_seconds_total", ())] == pytest.approx(0.75)
    assert s[("zico_queue_length", ())] == 1
    assert s[("zico_jobs", (("status", "running"),))] == 1


def test_it_refuses_tenant_members_and_anonymous_callers(client, cluster):
    p, _, _ = cluster
    assert client.get("/metrics").status_code == 403
    client.force_login(p.owner)  # a tenant owner is not cluster staff: the series name other tenants' jobs
    assert client.get("/metrics").status_code == 403


def test_it_accepts_the_bearer_token_and_rejects_a_wrong_one(client, cluster, settings):
    settings.ZICO_METRICS_TOKEN = "scrape-secret-123"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-123").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403


def test_it_still_answers_when_redis_is_down(client, cluster, settings):
    p, _, _ = cluster
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    client.force_login(p.staff)
    resp = client.get("/metrics")
    assert resp.status_code == 200
    s = _samples(resp.content.decode())
    assert not any(name == "zico_worker_up" for name, _ in s)  # unknown, not "down"
    assert any(name == "zico_device_budget_bytes" for name, _ in s)


def test_grafana_dashboard_only_queries_series_the_endpoint_exports(client, cluster):
    import json
    import re
    from pathlib import Path

    p, _, _ = cluster
    client.force_login(p.staff)
    exported = {name for name, _ in _samples(client.get("/metrics").content.decode())}
    dash = json.loads((Path(__file__).resolve().parents[2] / "deploy/grafana/zico-dashboard.json").read_text())
    queried = {m for panel in dash["panels"] for t in panel["targets"] for m in re.findall(r"zico_[a-z_]+", t["expr"])}
    assert queried and queried <= exported, queried - exported
