"""Why a policy leaves a job waiting (placement.reasons): one reason per job it did not place,
the closest device's refusal with its figures, on literal cluster states."""
import pytest

from placement import reasons
from placement.curves import triangular_curve
from placement.groups import plan_group
from placement.policies import FirstFitFifo, MemoryAware
from placement.state import ClusterState, Device, Job, Tenant

GiB = 1 << 30
A = triangular_curve(1 * GiB, 6 * GiB, 1.0)
B = triangular_curve(1 * GiB, 6 * GiB, 0.7)  # another period: a pair with A is gated


def _state(devices, queued, tenants=None):
    return ClusterState(tuple(devices), tuple(queued), tenants or {"t": Tenant("t")})


def _job(i, curve=A, tenant="t", at=0.0, **kw):
    return Job(i, tenant, curve, submitted_s=at, curve_key=id(curve), **kw)


def test_compute_contention_over_the_limit_names_the_device_the_jobs_and_both_factors():
    dev = Device("d0", 16 * GiB, running=(_job(1, compute_share=0.86),), host="h", kind="gpu", index=3)
    why = MemoryAware(max_slowdown=1.6).decide(_state([dev], [_job(2, compute_share=0.86, at=1)])).waiting[2]
    assert why.kind == reasons.SLOWDOWN_LIMIT and why.device == "gpu.h.3"
    assert why.text == ("waiting for device gpu.h.3: co-locating with job 1 would slow job 1 and this job "
                        "by 1.72× (limit 1.6×)")
    assert why.figures["slowdown"] == pytest.approx(1.72) and why.figures["limit"] == 1.6


def test_a_gated_plan_over_the_limit_names_the_job_it_slows_most_with_the_plans_figure():
    running, queued = _job(1, compute_share=0.3), _job(2, B, compute_share=0.3, at=1)
    plan = plan_group([running, queued], 8 * GiB)
    worst = max(plan.predicted_slowdown)
    assert plan.mode == "gating" and worst > 1.1
    limit = 1.1
    why = MemoryAware(max_slowdown=limit).decide(_state([Device("d0", 8 * GiB, running=(running,))],
                                                        [queued])).waiting[2]
    slowed = "job 1" if plan.predicted_slowdown[0] == worst else "this job"
    assert why.kind == reasons.SLOWDOWN_LIMIT
    assert f"would slow {slowed} by {worst:.2f}× (limit 1.1×)" in why.text
    # with a limit above the plan's slowdown the same job is placed and has no reason
    d = MemoryAware(max_slowdown=worst + 0.01).decide(_state([Device("d0", 8 * GiB, running=(running,))], [queued]))
    assert [p.job_id for p in d.placements] == [2] and d.waiting == {}


def test_no_device_big_enough_gives_the_peak_and_the_largest_budget():
    devs = [Device("d0", 4 * GiB), Device("d1", 5 * GiB)]
    for policy in (MemoryAware(), FirstFitFifo()):
        why = policy.decide(_state(devs, [_job(1)])).waiting[1]
        assert why.kind == reasons.NO_DEVICE_FITS
        assert why.text == "no device can hold its 6 GiB peak (largest budget 5 GiB)"


def test_a_spent_running_jobs_quota_gives_the_count_and_the_limit():
    tenants = {"t": Tenant("t", max_running_jobs=2)}
    devs = [Device("d0", 16 * GiB, running=(_job(1),)), Device("d1", 16 * GiB, running=(_job(2),)),
            Device("d2", 16 * GiB)]
    for policy in (MemoryAware(), FirstFitFifo()):
        why = policy.decide(_state(devs, [_job(3, at=1)], tenants)).waiting[3]
        assert why.kind == reasons.QUOTA and why.text == "tenant quota: 2 of 2 running jobs"


def test_a_quota_filled_during_the_round_counts_the_jobs_placed_in_it():
    tenants = {"t": Tenant("t", max_running_jobs=1)}
    d = FirstFitFifo().decide(_state([Device("d0", 16 * GiB), Device("d1", 16 * GiB)],
                                     [_job(1, at=1), _job(2, at=2)], tenants))
    assert [p.job_id for p in d.placements] == [1]
    assert d.waiting[2].text == "tenant quota: 1 of 1 running jobs"


@pytest.mark.parametrize("mine, theirs, who", [(False, True, "this job's tenant does not"),
                                               (True, False, "the other tenant does not")])
def test_tenants_that_do_not_share_say_which_one_refuses_and_never_name_the_other_job(mine, theirs, who):
    tenants = {"t": Tenant("t", allow_cross_tenant=mine), "u": Tenant("u", allow_cross_tenant=theirs)}
    dev = Device("d0", 16 * GiB, running=(_job(71, tenant="u"),))
    why = MemoryAware().decide(_state([dev], [_job(2, at=1)], tenants)).waiting[2]
    assert why.kind == reasons.TENANTS_DO_NOT_SHARE
    assert why.text == (f"waiting for device gpu.localhost.0: it runs a job of another tenant and {who} allow "
                        "sharing a device with other tenants")
    assert "71" not in why.text and why.figures["job_ids"] == [71]


@pytest.mark.parametrize("policy", [MemoryAware(), FirstFitFifo()], ids=["memory-aware", "fifo"])
@pytest.mark.parametrize("mine, theirs, who", [(False, True, "this job's tenant does not"),
                                               (True, False, "the other tenant does not")])
def test_a_device_profiling_a_job_of_a_tenant_that_does_not_share_is_refused_with_what_it_is_doing(
        policy, mine, theirs, who):
    """Note [Profile runs are tenants on their device]: the device's group is empty, its profiling tenant counts."""
    tenants = {"t": Tenant("t", allow_cross_tenant=mine), "u": Tenant("u", allow_cross_tenant=theirs)}
    dev = Device("d0", 16 * GiB, profiling_tenants={"u"})
    d = policy.decide(_state([dev, Device("d1", 16 * GiB, profiling_tenants={"t"})], [_job(2, at=1)], tenants))
    assert [(p.job_id, p.device_id) for p in d.placements] == [(2, "d1")]  # beside its own tenant's profile run
    d = policy.decide(_state([dev], [_job(2, at=1)], tenants))
    assert d.placements == [] and d.waiting[2].kind == reasons.TENANTS_DO_NOT_SHARE
    assert d.waiting[2].text == (f"waiting for device gpu.localhost.0: it is profiling a job of another tenant and "
                                 f"{who} allow sharing a device with other tenants")


def test_a_profiling_tenant_counts_beside_a_group_too():
    tenants = {"t": Tenant("t", allow_cross_tenant=True), "u": Tenant("u")}
    dev = Device("d0", 16 * GiB, running=(_job(1, B, compute_share=0.3),), profiling_tenants={"u"})
    d = MemoryAware().decide(_state([dev], [_job(2, compute_share=0.3, at=1)], tenants))
    assert d.placements == [] and d.waiting[2].kind == reasons.TENANTS_DO_NOT_SHARE
    assert [p.job_id for p in MemoryAware().decide(_state([Device("d0", 16 * GiB, running=dev.running)],
                                                          [_job(2, compute_share=0.3, at=1)], tenants)).placements] \
        == [2]


def test_no_device_at_all():
    for policy in (MemoryAware(), FirstFitFifo()):
        assert policy.decide(_state([], [_job(1)])).waiting[1].kind == reasons.NO_DEVICE


def test_a_full_group_and_the_fifo_one_job_per_device_say_what_runs_there():
    dev = Device("d0", 16 * GiB, running=(_job(1, compute_share=0.3), _job(2, compute_share=0.3)))
    why = MemoryAware(max_group=2).decide(_state([dev], [_job(3, compute_share=0.3, at=1)])).waiting[3]
    assert why.kind == reasons.DEVICE_BUSY
    assert why.text == "waiting for device gpu.localhost.0: it already runs 2 jobs (at most 2 per device)"
    why = FirstFitFifo().decide(_state([Device("d0", 16 * GiB, running=(_job(1),))], [_job(3)])).waiting[3]
    assert why.text == "waiting for device gpu.localhost.0: it runs job 1 (one job per device)"


def test_no_room_beside_the_running_jobs_gives_what_the_group_needs_and_the_budget():
    # the job alone fits 6.5 GiB; beside job 1 gating needs one peak plus the other's persistent bytes, 6 + 1 GiB
    dev = Device("d0", 6.5 * GiB, running=(_job(1, compute_share=0.3),))
    why = MemoryAware().decide(_state([dev], [_job(2, compute_share=0.3, at=1)])).waiting[2]
    assert why.kind == reasons.NO_ROOM
    assert why.text == ("waiting for device gpu.localhost.0: beside job 1 it needs a device budget of at least 7 GiB; "
                        "this device's is 6.5 GiB, so it waits until the jobs there end")
    # Note [A budget reason names a device budget]: a group is planned against the device's share for groups
    # (here 0.8 × 7.5 = 6 GiB); the sentence names the device budget that admits it, 7 GiB / 0.8
    dev = Device("d0", 7.5 * GiB, running=(_job(1, compute_share=0.3),), group_share=0.8)
    why = MemoryAware().decide(_state([dev], [_job(2, compute_share=0.3, at=1)])).waiting[2]
    assert why.text.endswith("it needs a device budget of at least 8.75 GiB; this device's is 7.5 GiB, so it waits "
                             "until the jobs there end")
    assert "group budget" not in why.text
    assert why.figures["need_bytes"] == 7 * GiB and why.figures["budget_bytes"] == 6 * GiB
    assert why.figures["device_need_bytes"] == pytest.approx(8.75 * GiB)


def test_the_closest_device_is_named_a_slowdown_before_a_device_too_small():
    small = Device("d0", 2 * GiB, index=0)
    shared = Device("d1", 16 * GiB, running=(_job(1, compute_share=0.9),), index=1)
    why = MemoryAware().decide(_state([small, shared], [_job(2, compute_share=0.9, at=1)])).waiting[2]
    assert why.kind == reasons.SLOWDOWN_LIMIT and why.device == "gpu.localhost.1"


def test_every_queued_job_is_placed_or_has_a_reason():
    tenants = {"t": Tenant("t", max_running_jobs=3), "u": Tenant("u")}
    devs = [Device(f"d{i}", (4 + 3 * i) * GiB, index=i) for i in range(3)]
    jobs = [_job(i, (A, B)[i % 2], tenant=("t", "u")[i % 3 == 0], at=i, compute_share=0.2 + 0.1 * (i % 7))
            for i in range(12)]
    for policy in (MemoryAware(), FirstFitFifo()):
        d = policy.decide(_state(devs, jobs, tenants))
        placed = {p.job_id for p in d.placements}
        assert placed and not placed & set(d.waiting)
        assert placed | set(d.waiting) == {j.id for j in jobs}
        assert all(r.text and r.kind in reasons.KINDS for r in d.waiting.values())
        assert [p.job_id for p in policy.place(_state(devs, jobs, tenants))] == [p.job_id for p in d.placements]


def test_an_offline_device_that_would_hold_the_job_is_named():
    why = reasons.no_device_fits(_job(1), [Device("d0", 4 * GiB)])
    unavailable = [("gpu.h.1", 8 * GiB, "offline"), ("gpu.h.2", 2 * GiB, "offline")]
    refined = reasons.unavailable_devices(why, 6 * GiB, unavailable)
    assert refined.kind == reasons.DEVICE_OFFLINE and refined.device == "gpu.h.1"
    assert refined.text == ("no online device can hold its 6 GiB peak (largest budget 4 GiB); device gpu.h.1 can, "
                            "but is offline")
    none_online = reasons.unavailable_devices(reasons.no_device(), 6 * GiB, [("gpu.h.2", 2 * GiB, "draining")])
    assert none_online.text == "no device is online (gpu.h.2 draining)"


def test_bytes_read_as_people_write_them():
    assert reasons.format_bytes(3.2 * GiB) == "3.2 GiB"
    assert reasons.format_bytes(285 * (1 << 20)) == "285 MiB"
    assert reasons.format_bytes(512) == "512 B"
