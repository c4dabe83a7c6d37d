"""The profiling time limit end to end: with ZICO_PROFILE_TIME_LIMIT_S set far below one profiling run, the real
scheduler sends the limit in the profile_job spec, the real worker stops the run after its first iteration and the
control consumer fails the job with the worker's reason; the worker is free again, so the next job (a stored curve, no
profiling) runs to success behind it."""
import pytest

from placement.curves import triangular_curve
from zico.jobs.models import Job, MemoryProfile
from zico.jobs.submission import submit_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PARAMS = {"iterations": 20, "batch_size": 64}


def test_a_profiling_run_past_its_time_limit_fails_the_job_and_frees_the_worker(stack, waiter, tenant_owner):
    stack.consumer()  # its backstop (twice the default 120 s) stays out of the way
    stack.worker("--kind", "cpu", "--capacity", "2GiB", "--slots", "1", "--loglevel", "WARNING")
    stack.registered_device()
    tenant, owner = tenant_owner
    slow = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params=PARAMS)
    stack.env["ZICO_PROFILE_TIME_LIMIT_S"] = "0.001"  # the scheduler's setting; it travels in the spec
    stack.scheduler("--interval", "0.5")
    failed = waiter(lambda: Job.objects.filter(pk=slow.pk, status="failed").first(), 180, "the job to fail")
    assert "profiling time limit of 0.001 s (ZICO_PROFILE_TIME_LIMIT_S)" in failed.failure_reason
    assert "1 of 4 iterations" in failed.failure_reason  # stopped at the first iteration boundary
    assert not MemoryProfile.objects.filter(job=slow).exists()
    behind = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params={**PARAMS, "iterations": 5})
    MemoryProfile.record(behind, triangular_curve(8 << 20, 64 << 20, iteration_s=0.05))  # known: no profiling
    done = waiter(lambda: Job.objects.filter(pk=behind.pk, status__in=["succeeded", "failed"]).first(), 180,
                  "the job behind it to end")
    assert done.status == "succeeded", done.failure_reason
