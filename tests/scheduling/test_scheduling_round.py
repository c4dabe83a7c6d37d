"""One scheduling round against the real PostgreSQL and Redis: profiling triggers, placements
with their sharing plans, run tasks on the right device queue, unplaceable jobs failed."""
import pytest

from placement.curves import curve_from_dict, triangular_curve
from placement.gating import DEFAULT_GATE_HEADROOM
from placement.policies import FirstFitFifo
from zico.cluster.models import Placement
from zico.jobs.models import Event, Job
from zico.scheduling.service import Scheduler
from zico.jobs.lifecycle import transition

GiB = 1 << 30


def test_a_queued_job_without_a_curve_is_sent_to_profiling(cluster, tenant, make_job, queued_messages):
    job = make_job(tenant, curve=False, status="queued")
    res = Scheduler().run_round()
    assert res.profiling == [job.pk]
    assert Job.objects.get(pk=job.pk).status == "profiling"
    [(task, args)] = queued_messages(cluster[0].queue) + queued_messages(cluster[1].queue)
    assert task == "zico.device.profile_job"
    assert args == [job.pk, {"workload": "digits-cnn", "params": {"iterations": 50, "seed": job.params["seed"]},
                             "time_limit_s": 120.0,
                             "tenant": job.tenant_id,  # and its hard wall-clock limit, the platform's here
                             "wall_limit": {"seconds": 86400.0, "source": "platform"}}]


def test_a_queued_job_with_a_curve_becomes_ready_and_is_placed_in_the_same_round(cluster, tenant, make_job, queued_messages):
    job = make_job(tenant, status="queued")
    res = Scheduler().run_round()
    assert res.ready == [job.pk] and list(res.placed) == [job.pk]
    assert Job.objects.get(pk=job.pk).status == "placed"


def test_ready_jobs_are_placed_with_a_plan_and_their_run_tasks_go_to_the_device_queue(cluster, tenant, make_job, queued_messages):
    jobs = [make_job(tenant) for _ in range(4)]  # 10 GiB peaks, 2 GiB persistent, on two 16 GiB GPUs
    res = Scheduler().run_round()
    assert sorted(res.placed) == sorted(j.pk for j in jobs)
    placements = Placement.objects.filter(pk__in=res.placed.values())
    for p in placements:
        assert p.plan["predicted_peak_bytes"] <= p.device.budget_bytes
        assert set(p.plan["job_ids"]) >= set(p.jobs.values_list("pk", flat=True))
    # two triangular 10 GiB jobs cannot share 16 GiB without a shift: the plan has one
    assert any(p.plan["mode"] == "shift" for p in placements)
    sent = [m for d in cluster for m in queued_messages(d.queue)]
    assert sorted(args[0] for _, args in sent) == sorted(j.pk for j in jobs)
    for task, (job_id, spec) in sent:
        assert task == "zico.device.run_job"
        assert spec["placement"] == res.placed[job_id]
        assert curve_from_dict(spec["curve"]).peak_bytes == pytest.approx(10 * GiB, rel=1e-6)
        # a group is planned against the share of the budget the worker's gate uses
        assert spec["plan"]["budget_bytes"] == pytest.approx((1 - DEFAULT_GATE_HEADROOM) * 16 * GiB)
        assert spec["run_token"] == str(placements.get(pk=spec["placement"]).run_token)
        # with the id, names the job across deployments (workers.job.checkpoints)
        assert spec["job_created_at"] == Job.objects.get(pk=job_id).created_at.isoformat()
    # every placement has its own token: a done record of one run never matches another's
    assert len({p.run_token for p in placements}) == placements.count()


def test_a_second_round_places_nothing_twice(cluster, tenant, make_job, queued_messages):
    jobs = [make_job(tenant) for _ in range(6)]
    first = Scheduler().run_round()
    second = Scheduler().run_round()
    assert second.placed == {}
    assert len(first.placed) == 4  # two per 16 GiB device; the other two wait
    for j in jobs:
        assert Placement.objects.filter(jobs=j).count() == (1 if j.pk in first.placed else 0)


def test_the_baseline_policy_puts_one_job_per_device(cluster, tenant, make_job, queued_messages):
    for _ in range(3):
        make_job(tenant)
    res = Scheduler(FirstFitFifo()).run_round()
    assert len(res.placed) == 2 and len(set(res.placed.values())) == 2


def test_a_job_no_device_could_hold_fails_with_the_reason(cluster, tenant, make_job, queued_messages):
    job = make_job(tenant, curve=triangular_curve(2 * GiB, 40 * GiB, 0.2))
    res = Scheduler().run_round()
    assert res.failed == [job.pk]
    job.refresh_from_db()
    assert job.status == "failed" and "exceeds the largest device budget" in job.failure_reason


def test_a_job_whose_peak_exceeds_its_own_budget_fails_with_both_figures(cluster, tenant, make_job, queued_messages):
    over, within = make_job(tenant), make_job(tenant)  # 10 GiB peaks
    Job.objects.filter(pk=over.pk).update(budget_bytes=8 * GiB)
    Job.objects.filter(pk=within.pk).update(budget_bytes=12 * GiB)
    res = Scheduler().run_round()
    assert res.failed == [over.pk] and list(res.placed) == [within.pk]
    over.refresh_from_db()
    assert over.status == "failed"
    assert f"exceeds its own budget of {8 * GiB} bytes" in over.failure_reason
    assert str(10 * GiB) in over.failure_reason


def test_a_cancelled_job_is_not_placed(cluster, tenant, make_job, queued_messages):
    keep, gone = make_job(tenant), make_job(tenant)
    transition(gone, "cancelled")
    res = Scheduler().run_round()
    assert list(res.placed) == [keep.pk]
    assert Event.objects.filter(kind="placement").count() == 1


def test_a_resent_run_task_carries_the_same_run_token_as_the_first(cluster, tenant, make_job, queued_messages):
    from zico.scheduling.recovery import unsent_tasks
    from zico.scheduling.service import PROFILE_TASK, RUN_TASK

    jobs = [make_job(tenant) for _ in range(2)]
    Scheduler().run_round()
    first = {args[0]: args[1] for d in cluster for _, args in queued_messages(d.queue)}
    resent = {job_id: args[1] for _, job_id, _, args in unsent_tasks(RUN_TASK, PROFILE_TASK)}
    assert sorted(resent) == sorted(first) == sorted(j.pk for j in jobs)
    for job_id, spec in resent.items():
        # the same run: a worker that already finished it ignores the resend (same placement and token)
        assert (spec["placement"], spec["run_token"]) == (first[job_id]["placement"], first[job_id]["run_token"])
