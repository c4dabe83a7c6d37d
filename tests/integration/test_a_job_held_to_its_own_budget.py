"""A job is held to its own budget (Note [A job's own budget] in the allocator's agent_server.cpp), end to end: a
script that leaks every step's autograd graph, submitted with ``zico submit --budget 128MiB``, and a normal
training script on one CPU device of the demo's size (budget 323 MiB). The leaker fails naming its 128 MiB budget
and its peak; its neighbour succeeds; the device's stored peak reserved stays within the device's budget.

Real PostgreSQL, real Redis (private), a real web server, and the real processes (consumer, scheduler, one CPU
device worker, sandboxed job processes)."""
import shutil

import pytest

from tests.support.script_device import submit_scripts
from django.db.models import Max

from zico.jobs.models import Job
from zico.telemetry.models import TimelinePoint

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MiB = 1 << 20
DEVICE_BUDGET = 323 * MiB  # the demo's device (scripts/demo.py picks about this on 2 cores)




@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_a_leaker_fails_at_its_own_budget_and_its_neighbour_succeeds(stack, waiter, tenant_owner, live_server,
                                                                      tmp_path, settings):
    device, ids = submit_scripts(stack, tenant_owner, live_server, tmp_path, settings, DEVICE_BUDGET, ("mlp_adam.py", "leaks_tensors.py"),
                                 [("mlp", [], ["python", "mlp_adam.py", "--steps", "1500"]),
                                 ("leaker", ["--budget", "128MiB"], ["python", "leaks_tensors.py"])])
    ended = ("succeeded", "failed", "cancelled")
    waiter(lambda: all(Job.objects.get(pk=i).status in ended for i in ids.values()), 600, "both jobs to end")
    mlp, leaker = Job.objects.get(pk=ids["mlp"]), Job.objects.get(pk=ids["leaker"])
    worker_log = stack.log("worker.log")[-3000:]
    assert leaker.status == "failed", (leaker.status, worker_log)
    assert "past its budget of 128.0 MiB" in leaker.failure_reason and "its peak" in leaker.failure_reason, \
        leaker.failure_reason
    assert mlp.status == "succeeded", (mlp.failure_reason, worker_log)
    a, b = mlp.placements.get(), leaker.placements.get()
    assert a.device_id == b.device_id == device.pk and a.started_at < b.ended_at and b.started_at < a.ended_at, \
        "the leaker did not run beside its neighbour"
    peak = TimelinePoint.objects.filter(device=device, job__isnull=True).aggregate(m=Max("reserved_bytes"))["m"]
    print({"device_peak_reserved_mib": peak / MiB, "leaker_reason": leaker.failure_reason})
    assert peak is not None and peak <= DEVICE_BUDGET
