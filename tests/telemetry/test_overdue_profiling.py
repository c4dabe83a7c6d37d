"""The backstop of the profiling time limit: the control consumer fails a job still profiling at twice
ZICO_PROFILE_TIME_LIMIT_S, naming the limit, and asks its worker to stop (real Redis and PostgreSQL)."""
from datetime import timedelta

import pytest
from django.utils import timezone

from workers.link import Link
from zico.jobs.models import Job
from zico.telemetry.consumer import ControlConsumer
from zico.jobs.lifecycle import transition

pytestmark = pytest.mark.django_db(transaction=True)


def _profiling_job(tenant, started_s_ago: float) -> Job:
    job = Job.objects.create(tenant=tenant, workload="digits-cnn", params={})
    transition(job, "profiling")
    Job.objects.filter(pk=job.pk).update(status_changed_at=timezone.now() - timedelta(seconds=started_s_ago))
    return job


def test_a_job_profiling_past_twice_the_limit_is_failed_with_the_limit_named(redis_url, r, tenant, settings):
    settings.ZICO_PROFILE_TIME_LIMIT_S = 10.0
    overdue = _profiling_job(tenant, started_s_ago=21)
    recent = _profiling_job(tenant, started_s_ago=19)
    ControlConsumer(redis_url, name="test", block_ms=20).tick()
    overdue.refresh_from_db()
    assert overdue.status == "failed"
    assert "twice the profiling time limit of 10 s (ZICO_PROFILE_TIME_LIMIT_S)" in overdue.failure_reason
    assert Link(redis_url, "cpu.h1.0").cancel_requested(overdue.pk)  # the worker stops between iterations
    assert Job.objects.get(pk=recent.pk).status == "profiling"
    assert not Link(redis_url, "cpu.h1.0").cancel_requested(recent.pk)


def test_the_profile_spec_carries_the_limit(tenant, settings):
    settings.ZICO_PROFILE_TIME_LIMIT_S = 42.0
    settings.ZICO_JOB_TIME_LIMIT_S = 3600.0
    job = Job.objects.create(tenant=tenant, workload="digits-cnn", params={"iterations": 3})
    assert job.profile_spec() == {"workload": "digits-cnn", "params": {"iterations": 3}, "time_limit_s": 42.0,
                                 "tenant": job.tenant_id,  # and the hard wall-clock limit (zico_contracts.walltime)
                                 "wall_limit": {"seconds": 3600.0, "source": "platform"}}
