"""Two jobs submitted through the REST API are profiled on the worker, placed together on a real worker, both succeed, the
timeline is stored, and the device's sampled peak reserved never exceeds its budget.

Real PostgreSQL, real Redis (private), and the real processes: control consumer, scheduler service
(``manage.py runscheduler``) and one CPU device worker started the documented way.
"""
import pytest
from django.db.models import Max
from rest_framework.test import APIClient

from zico.jobs.models import Job
from zico.telemetry.models import TimelinePoint
from zico.tenants.models import ApiToken

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_two_api_jobs_share_the_device_and_succeed_within_its_budget(stack, waiter, tenant_owner):
    stack.consumer(lost_after_s=15)
    stack.worker("--kind", "cpu", "--capacity", "2GiB", "--budget", "1GiB", "--slots", "2", "--loglevel", "WARNING")
    device = stack.registered_device()
    tenant, owner = tenant_owner
    _, secret = ApiToken.issue(owner, "test")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    ids = []
    for workload, params in (("digits-cnn", {"iterations": 60}), ("tiny-lm", {"iterations": 30})):
        resp = api.post("/api/jobs/", {"workload": workload, "params": params}, format="json")
        assert resp.status_code == 201, resp.content
        ids.append(resp.json()["id"])
    # One scheduler round sends both jobs to profiling on the device; once both curves are stored the
    # scheduler runs on and sees two ready jobs in the same round (so it can place them as one group).
    first = stack.manage("runscheduler", "--rounds", "1", log="scheduler.log")
    assert first.wait(120) == 0
    waiter(lambda: all(Job.objects.get(pk=i).status == "ready" for i in ids), 300, "both jobs profiled")
    stack.manage("runscheduler", "--interval", "1", log="scheduler.log")

    waiter(lambda: all(Job.objects.get(pk=i).status in ("succeeded", "failed", "cancelled") for i in ids), 900,
           "both jobs to end")
    jobs = [Job.objects.get(pk=i) for i in ids]
    assert [j.status for j in jobs] == ["succeeded", "succeeded"], [j.failure_reason for j in jobs]
    for j in jobs:
        body = api.get(f"/api/jobs/{j.pk}/").json()
        assert body["status"] == "succeeded" and body["metrics"]["iterations_per_s"] > 0
    shared = set(jobs[0].placements.values_list("pk", flat=True)) & set(jobs[1].placements.values_list("pk", flat=True))
    assert shared, "the two jobs were not placed together"
    for j in jobs:
        assert TimelinePoint.objects.filter(job=j).exists()
    device.refresh_from_db()
    points = TimelinePoint.objects.filter(device=device, job__isnull=True)
    assert points.count() > 5
    assert points.aggregate(m=Max("reserved_bytes"))["m"] <= device.budget_bytes
    # the figures the pages show come from the run itself (issue 16): per-job peaks from the allocator,
    # slowdown measured against the planned curve's solo iteration time beside the plan's prediction
    for j in jobs:
        m = j.metrics
        assert m["peak_allocated_bytes"] > 0 and m["peak_reserved_bytes"] >= 0
        assert m["slowdown_run"] == pytest.approx(m["mean_iteration_s"] / m["solo_iteration_s"], rel=1e-3)
        beside = m.get("beside_iteration_s", m["mean_iteration_s"])  # Note [Slowdown beside neighbours]
        assert m["slowdown"] == pytest.approx(beside / m["solo_iteration_s"], rel=1e-3)
        assert "predicted_slowdown" in m
    # the device chart's stored bands never sum above the pool's allocated bytes. The reporter reads the jobs'
    # and the pool's figures one after another, so a tick's job sum can pass the pool reading by what was
    # allocated in between; the page builder scales such a second down (timelines._clip_to_pool)
    from zico.web import timelines
    jobs_rows = timelines._stored(TimelinePoint.objects.filter(device=device, job__isnull=False), 0, 600,
                                  ("allocated_at_peak_bytes",))
    for r in jobs_rows:
        r["stacked"] = r.pop("allocated_at_peak_bytes")
    pool_rows = timelines._stored(points, 0, 600, ("allocated_bytes",))
    timelines._clip_to_pool(jobs_rows, pool_rows)
    per_second: dict = {}
    for r in jobs_rows:
        per_second[r["second"]] = per_second.get(r["second"], 0) + (r["stacked"] or 0)
    pool = {r["second"]: r["allocated_bytes"] for r in pool_rows}
    assert per_second and all(total <= pool[s] for s, total in per_second.items() if s in pool)
    # idle means idle: once both jobs ended the worker returned the pool's cache
    waiter(lambda: TimelinePoint.objects.filter(device=device, job__isnull=True).order_by("-second")
           .values_list("reserved_bytes", flat=True).first() == 0, 30, "the idle device's pool to hold nothing")
