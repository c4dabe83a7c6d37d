"""The job page's "Waiting: …" line follows the scheduler in a real browser: it appears when a round
leaves the job waiting, with the reason's figures, and goes away once a round places the job."""
import dataclasses
import uuid

import pytest
import redis
from django.conf import settings
from playwright.sync_api import expect

from placement.curves import triangular_curve
from zico.cluster.models import Device, Node
from zico.jobs.models import Job, MemoryProfile
from zico.scheduling.service import Scheduler
from zico.jobs.lifecycle import transition

GIB = 1 << 30
CURVE = dataclasses.replace(triangular_curve(2 * GIB, 10 * GIB, 0.2), meta={"compute_share": 0.86})


@pytest.mark.django_db(transaction=True)
def test_the_waiting_line_appears_with_the_reason_and_goes_once_placed(page, sign_in, personas):
    host = f"uiwait-{uuid.uuid4().hex[:8]}"
    node = Node.objects.create(host=host)
    gpu0 = Device.objects.create(node=node, index=0, kind="gpu", name="Test GPU", uuid=f"GPU-{host}-0",
                                 total_bytes=16 * GIB, budget_bytes=16 * GIB)
    jobs = []
    for _ in range(2):  # two compute-heavy jobs: together 0.86 + 0.86 = 1.72x slower, over the 1.6x limit
        job = Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn",
                                 params={"iterations": 50})
        MemoryProfile.record(job, CURVE)
        transition(job, "ready")
        jobs.append(job)
    first, second = jobs
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        sign_in(personas.owner)
        page.goto(f"/jobs/{second.pk}/")
        line = page.locator("#job-waiting")
        expect(line).to_be_hidden()  # no round yet
        assert list(Scheduler().run_round().placed) == [first.pk]  # same tenant: submission order
        expect(line).to_be_visible(timeout=5000)  # the page's poll brings it, no reload
        expect(line).to_have_text(f"Waiting: waiting for device {gpu0}: co-locating with job {first.pk} would "
                                  f"slow job {first.pk} and this job by 1.72× (limit 1.6×)")
        Device.objects.create(node=node, index=1, kind="gpu", name="Test GPU", uuid=f"GPU-{host}-1",
                              total_bytes=16 * GIB, budget_bytes=16 * GIB)
        assert second.pk in Scheduler().run_round().placed
        expect(page.locator("#job-status")).to_have_text("placed", timeout=5000)
        expect(line).to_be_hidden()
    finally:
        for d in Device.objects.filter(node__host=host):
            broker.delete(d.queue)
