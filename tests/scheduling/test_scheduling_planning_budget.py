"""The round's planning budget against the real PostgreSQL and Redis (Note [Planning budget] in
placement.policies): rounds that each stop once their policy has spent its budget on new plans, each
continuing the decision of the one before, end with the placements (devices, plans) and waiting reasons of one
unbounded round on the same state."""
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from placement.curves import triangular_curve
from placement.policies import MemoryAware
from zico.cluster.models import Placement
from zico.jobs.models import Job
from zico.scheduling.service import Scheduler, make_policy

GiB = 1 << 30
# unequal iteration times: a group over its budget is a gating plan (a coordinator run per group)
CURVES = [triangular_curve(1 * GiB, 5 * GiB, 0.2), triangular_curve(1.5 * GiB, 6 * GiB, 0.3),
          triangular_curve(0.5 * GiB, 4 * GiB, 0.45, forward_fraction=0.4)]


class _Undo(Exception):
    pass


def _outcome(jobs, devices) -> dict:
    """Each job's status, device and waiting reason; each device's open placements' plans, oldest first."""
    placed = {}
    plans = {d.pk: [p.plan for p in Placement.objects.active().filter(device=d).order_by("pk")] for d in devices}
    for p in Placement.objects.active().filter(device__in=devices):
        for pk in p.jobs.values_list("pk", flat=True):
            placed[pk] = p.device_id
    rows = {j.pk: j for j in Job.objects.filter(pk__in=[j.pk for j in jobs])}
    return {"jobs": {pk: (j.status, placed.get(pk), j.waiting_kind, j.waiting_reason) for pk, j in rows.items()},
            "last plans": {d: ps[-1] if ps else None for d, ps in plans.items()}}


def test_bounded_rounds_reach_the_placements_of_one_unbounded_round(cluster, tenant, make_job):
    jobs = [make_job(tenant, curve=CURVES[i % 3], priority=i % 2) for i in range(9)]
    try:
        with transaction.atomic():  # one unbounded round, undone
            res = Scheduler(MemoryAware(max_group=3)).run_round()
            assert res.deferred == 0 and len(res.placed) >= 5
            whole = _outcome(jobs, cluster)
            raise _Undo
    except _Undo:
        pass
    assert all(j.status == "ready" for j in Job.objects.filter(pk__in=[j.pk for j in jobs]))
    # a budget of 0: each round stops after the first job whose turn made a new plan
    scheduler = Scheduler(MemoryAware(max_group=3, planning_budget_s=0.0))
    rounds = [scheduler.run_round()]
    while rounds[-1].deferred:
        rounds.append(scheduler.run_round())
        assert len(rounds) <= len(jobs)  # every round considers a job at least
    assert len(rounds) > 2 and sum(bool(r.placed) for r in rounds) > 1  # placements made over several rounds
    after = _outcome(jobs, cluster)
    assert after["jobs"] == whole["jobs"]
    # a device that got jobs in several rounds has a placement per round; its newest plan covers its group
    assert after["last plans"] == whole["last plans"]


def test_the_service_policy_has_the_settings_planning_budget(settings):
    settings.ZICO_ROUND_PLANNING_BUDGET_S = 0.125
    assert make_policy().planning_budget_s == 0.125
    settings.ZICO_ROUND_PLANNING_BUDGET_S = None
    assert make_policy().planning_budget_s is None


@pytest.mark.parametrize("raw", ["-0.1", "fast", "inf", "nan"])
def test_a_bad_planning_budget_is_refused_naming_the_variable(monkeypatch, raw):
    from zico import settings as zico_settings

    monkeypatch.setenv("ZICO_ROUND_PLANNING_BUDGET_S", raw)
    with pytest.raises(ImproperlyConfigured, match="ZICO_ROUND_PLANNING_BUDGET_S"):
        zico_settings._budget_s("ZICO_ROUND_PLANNING_BUDGET_S", 0.3)
    for raw, value in (("0", 0.0), ("0.5", 0.5), ("off", None), ("OFF", None)):
        monkeypatch.setenv("ZICO_ROUND_PLANNING_BUDGET_S", raw)
        assert zico_settings._budget_s("ZICO_ROUND_PLANNING_BUDGET_S", 0.3) == value
