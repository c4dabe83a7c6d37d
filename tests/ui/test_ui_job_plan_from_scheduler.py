"""The job page reads the sharing plan exactly as the scheduler stores it (SharingPlan.to_dict(): per-job
lists aligned with ``job_ids``): a real scheduling round places two jobs together, then the page renders."""
import re
import uuid

import pytest
import redis
from django.conf import settings

from placement.curves import triangular_curve
from zico.cluster.models import Device, Node
from zico.jobs.models import Job, MemoryProfile
from zico.scheduling.service import Scheduler
from zico.jobs.lifecycle import transition
from zico.jobs import lifecycle

GIB = 1 << 30


@pytest.fixture
def gpu(db):
    """One 16 GiB GPU on a unique host; its Celery queue is emptied afterwards."""
    host = f"uiplan-{uuid.uuid4().hex[:8]}"
    device = Device.objects.create(node=Node.objects.create(host=host), index=0, kind="gpu", name="Test GPU",
                                   uuid=f"GPU-{host}", total_bytes=16 * GIB, budget_bytes=16 * GIB)
    yield device
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(device.queue)


def test_a_job_placed_by_the_scheduler_shows_its_plan(gpu, personas, client_for):
    # two 10 GiB triangular jobs cannot share 16 GiB without a time shift: the plan is a "shift" plan
    jobs = []
    for _ in range(2):
        job = Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn",
                                 params={"iterations": 50})
        MemoryProfile.record(job, triangular_curve(2 * GIB, 10 * GIB, 0.2))
        transition(job, "ready")
        jobs.append(job)
    res = Scheduler().run_round()
    assert sorted(res.placed) == sorted(j.pk for j in jobs)
    placement = jobs[0].placements.get()
    # the shift search decided the mode and the predicted figures; its offsets are not stored (nothing reads them:
    # the worker's coordinator finds each delay live)
    assert placement.plan["mode"] == "shift" and "shifts_s" not in placement.plan
    figures = placement.plan_by_job()
    assert set(figures) == {j.pk for j in jobs}
    slowdowns = {j: f["predicted_slowdown"] for j, f in figures.items()}
    assert sorted(slowdowns.values()) == sorted(placement.plan["predicted_slowdown"])

    c = client_for(personas.owner)
    for job in jobs:
        r = c.get(f"/jobs/{job.pk}/")
        assert r.status_code == 200
        html = r.content.decode()
        section = html[html.index('id="plan-title"'):html.index("Delays imposed")]
        for other in jobs:  # both co-located jobs' predicted slowdowns are listed (both are the owner's)
            assert f"×{slowdowns[other.pk]:.2f}" in section
        assert re.search(r"<dt>Mode</dt><dd>shift</dd>", section) and "Time shift" not in section


def test_a_plan_without_per_job_lists_still_renders(gpu, personas, client_for):
    from zico.cluster.models import Placement

    job = Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn", params={})
    transition(job, "ready")
    placement = lifecycle.place(gpu, [job], {"budget_bytes": 16 * GIB})
    assert placement.plan_by_job() == {}
    assert client_for(personas.owner).get(f"/jobs/{job.pk}/").status_code == 200
    # lists of another length than job_ids, or ids that are no integers: no figures, no error
    Placement.objects.filter(pk=placement.pk).update(plan={"job_ids": [job.pk, "x"], "predicted_slowdown": [1.5]})
    placement.refresh_from_db()
    assert placement.plan_by_job() == {job.pk: {"predicted_slowdown": None}}
    assert client_for(personas.owner).get(f"/jobs/{job.pk}/").status_code == 200
