"""A script submitted without a budget is profiled beside a job of known memory under the platform's default bound
(Note [Where a script is profiled] in zico.scheduling.service; zico_contracts.jobbudget), end to end: a normal
training script and a script whose every step needs a 200 MiB batch (``big_steps.py``), both without ``--budget``,
on one CPU device of the demo's size (budget 323 MiB). The first is profiled alone and trains; the big one starts
beside it under the default bound (half the budget, 160 MiB in whole chunks), is stopped there by the agent in its
first step, and goes back to the queue saying so rather than failing for a limit its user never set; it waits,
saying it is profiled alone, until the device is free, and is then profiled alone under the device's budget, where
it succeeds. The neighbour is untouched: it succeeds, and the device's stored peak stays within the budget.

(A script whose first iterations fit the bound has its curve stored and the bound lifted: from then on it is a job
of known memory, gated by its curve; a leak past it is the containment suite's "leaker without a budget" row.)

Real PostgreSQL, real Redis (private), a real web server, and the real processes (consumer, scheduler, one CPU
device worker, sandboxed job processes)."""
import shutil

import pytest
from django.db.models import Max

from tests.support.script_device import submit_scripts
from zico.jobs.models import Event, Job
from zico.telemetry.models import TimelinePoint

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MiB = 1 << 20
DEVICE_BUDGET = 323 * MiB  # the demo's device (scripts/demo.py picks about this on 2 cores)
BOUND = 160 * MiB  # half of 323 MiB in whole 2 MiB chunks: the neighbour's peak leaves more than that


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_a_script_without_a_budget_is_stopped_at_the_default_bound_and_profiled_alone(
        stack, waiter, tenant_owner, live_server, tmp_path, settings):
    device, ids = submit_scripts(stack, tenant_owner, live_server, tmp_path, settings, DEVICE_BUDGET, ("mlp_adam.py", "big_steps.py"),
                                 [("mlp", [], ["python", "mlp_adam.py", "--steps", "3000"]),
                                 ("big", [], ["python", "big_steps.py", "--mib", "200", "--steps", "10"])])
    ended = ("succeeded", "failed", "cancelled")
    waiter(lambda: all(Job.objects.get(pk=i).status in ended for i in ids.values()), 600, "both jobs to end")
    mlp, big = Job.objects.get(pk=ids["mlp"]), Job.objects.get(pk=ids["big"])
    worker_log = stack.log("worker.log")[-3000:]
    assert mlp.status == "succeeded", (mlp.failure_reason, worker_log)

    # its first run: beside the neighbour, under the default bound, stopped there and requeued
    story = [(e.kind, e.details) for e in big.events.order_by("time", "pk")]
    placements = list(big.placements.order_by("started_at"))
    assert len(placements) == 2, (big.status, big.failure_reason, [p.plan for p in placements], story, worker_log)
    beside, alone = placements
    neighbour = mlp.placements.get()
    assert beside.plan["default_budget_bytes"] == BOUND, beside.plan
    assert beside.started_at < neighbour.ended_at and neighbour.started_at < beside.ended_at, \
        "the big script was not profiled beside its neighbour"
    requeued = big.events.get(kind="status_change", details__from="profiling", details__to="queued")
    assert requeued.details["reason"] == ("needed more than the 160.00 MiB default bound beside the device's jobs while "
                                          "profiled: it will be profiled alone; submit with --budget to say what it "
                                          "needs"), requeued.details
    stopped = big.metrics["default_bound_exceeded"]
    assert stopped["bound_bytes"] == BOUND and stopped["refusals"] >= 1 and stopped["peak_reserved_bytes"] <= BOUND, \
        stopped
    # it waited, saying why, while the neighbour ran
    waits = [e.details.get("reason", "") for e in big.events.filter(kind=Event.Kind.WAITING, time__gt=requeued.time)]
    assert any("this job is profiled alone (it needed more than its default bound beside other jobs)" in w
               for w in waits), waits
    # its second run: alone, under the device's budget, where its 200 MiB steps fit
    assert "default_budget_bytes" not in alone.plan and alone.started_at >= neighbour.ended_at
    assert big.status == "succeeded", (big.failure_reason, worker_log)
    # the curve measured alone (the first row; the run's end stores a copy with its measured compute share)
    assert big.profiles.order_by("created_at", "pk").first().peak_bytes > BOUND
    peak = TimelinePoint.objects.filter(device=device, job__isnull=True).aggregate(m=Max("reserved_bytes"))["m"]
    print({"device_peak_reserved_mib": peak / MiB, "requeued": requeued.details["reason"],
           "big_peak_mib": big.profiles.order_by("created_at", "pk").first().peak_bytes / MiB})
    assert peak is not None and peak <= DEVICE_BUDGET
