"""Tenant rules through the service: weighted fair share of device-memory-seconds decides who
goes first, and tenants that do not allow it never share a device."""
import uuid
from datetime import timedelta

from django.utils import timezone

from placement.curves import triangular_curve
from zico.cluster.models import Placement
from zico.jobs.models import Job
from zico.scheduling.service import Scheduler
from zico.tenants.models import Tenant
from zico.jobs.lifecycle import transition

GiB = 1 << 30
BIG = triangular_curve(6 * GiB, 14 * GiB, 0.2)  # one per 16 GiB device


def _tenant(name, **kw):
    return Tenant.objects.create(name=name, slug=f"{name}-{uuid.uuid4().hex[:6]}", max_running_jobs=100, **kw)


def _used(tenant, make_job, hours):
    """A finished job of ``tenant`` that held 14 GiB for ``hours`` (its device-memory-seconds)."""
    job = make_job(tenant, curve=BIG, status="ready")
    for to in ("placed", "running", "succeeded"):
        transition(job, to)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=hours))


def test_the_tenant_that_used_less_goes_first(cluster, make_job):
    heavy, light = _tenant("heavy"), _tenant("light")
    _used(heavy, make_job, hours=5)
    early = [make_job(heavy, curve=BIG) for _ in range(3)]
    late = make_job(light, curve=BIG)  # submitted last
    res = Scheduler().run_round()
    assert late.pk in res.placed
    assert len(res.placed) == 2 and sum(j.pk in res.placed for j in early) == 1


def test_a_larger_weight_earns_a_larger_share(cluster, make_job):
    a, b = _tenant("a", share_weight=1.0), _tenant("b", share_weight=10.0)
    _used(a, make_job, hours=1)
    _used(b, make_job, hours=5)  # five times a's usage, but ten times its weight
    jobs_a = [make_job(a, curve=BIG) for _ in range(2)]
    jobs_b = [make_job(b, curve=BIG) for _ in range(2)]
    res = Scheduler().run_round()
    assert all(j.pk in res.placed for j in jobs_b) and not any(j.pk in res.placed for j in jobs_a)


def test_tenants_that_do_not_allow_it_never_share_a_device(cluster, make_job):
    a, b = _tenant("a"), _tenant("b", allow_cross_tenant_colocation=True)
    for t in (a, b, a, b):
        make_job(t)  # 10 GiB peaks: two fit a 16 GiB device with a shift
    res = Scheduler().run_round()
    assert len(res.placed) == 4
    for p in Placement.objects.filter(pk__in=res.placed.values()):
        assert len({j.tenant_id for j in Job.objects.filter(placements__device=p.device)}) == 1
