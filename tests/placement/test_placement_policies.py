"""Placement policies on literal cluster states: FIFO first-fit with backfill, memory-aware
co-location, quotas, cross-tenant rules and weighted fair share."""
import pytest

from placement.curves import triangular_curve
from placement.policies import FirstFitFifo, MemoryAware
from placement.state import ClusterState, Device, Job, StateError, Tenant
from placement.tenancy import fair_order

GB = 1e9
SMALL = triangular_curve(1 * GB, 4 * GB, 1.0)
BIG = triangular_curve(2 * GB, 10 * GB, 1.0)


def _state(devices, queued, tenants=None):
    tenants = tenants or {"t": Tenant("t")}
    return ClusterState(tuple(devices), tuple(queued), tenants)


def _job(i, curve=SMALL, tenant="t", at=0.0, **kw):
    return Job(i, tenant, curve, submitted_s=at, curve_key=id(curve), **kw)


def test_fifo_places_in_submission_order_on_the_first_device_that_fits():
    devs = [Device("d0", 6 * GB), Device("d1", 12 * GB)]
    jobs = [_job(2, BIG, at=2), _job(1, SMALL, at=1), _job(3, SMALL, at=3)]
    out = FirstFitFifo().place(_state(devs, jobs))
    assert [(p.job_id, p.device_id) for p in out] == [(1, "d0"), (2, "d1")]
    assert out[0].plan.mode == "independent"


def test_fifo_backfills_behind_a_job_that_finds_no_device():
    running = Device("d0", 12 * GB, running=(_job(9, BIG),))
    devs = [running, Device("d1", 12 * GB), Device("d2", 6 * GB)]
    # job 1 takes d1; job 2 (big) finds no device; job 3 goes ahead on d2, too small for job 2
    jobs = [_job(1, BIG, at=1), _job(2, BIG, at=2), _job(3, SMALL, at=3), _job(4, SMALL, at=4)]
    out = FirstFitFifo().place(_state(devs, jobs))
    assert [(p.job_id, p.device_id) for p in out] == [(1, "d1"), (3, "d2")]


def test_fifo_gives_a_freed_device_to_the_earliest_job_that_fits_it():
    devs = [Device("d0", 12 * GB), Device("d1", 6 * GB, running=(_job(9, SMALL),))]
    jobs = [_job(3, SMALL, at=3), _job(2, BIG, at=2)]
    assert [(p.job_id, p.device_id) for p in FirstFitFifo().place(_state(devs, jobs))] == [(2, "d0")]


def test_fifo_skips_jobs_no_device_can_ever_hold():
    huge = triangular_curve(1 * GB, 40 * GB)
    out = FirstFitFifo().place(_state([Device("d0", 12 * GB)], [_job(1, huge, at=1), _job(2, at=2)]))
    assert [p.job_id for p in out] == [2]


def test_memory_aware_co_locates_when_devices_are_scarce():
    devs = [Device("d0", (4 + 1) * GB * 1.05)]
    out = MemoryAware(max_slowdown=2.0).place(_state(devs, [_job(1, at=1), _job(2, at=2)]))
    assert [p.device_id for p in out] == ["d0", "d0"]
    plan = out[1].plan
    assert plan.job_ids == (1, 2) and plan.mode == "shift"
    assert plan.predicted_peak_bytes <= devs[0].budget_bytes
    assert plan.saving_bytes > 2 * GB


def test_memory_aware_plans_groups_against_the_gate_share_of_the_budget():
    # two SMALL jobs need P + M0 = 5 GB side by side; the device budget is 5.25 GB, so they fit the
    # whole budget but not 0.85 of it (4.46 GB), which is what the worker's gate would allow them
    devs = [Device("d0", 5 * GB * 1.05)]
    jobs = [_job(1, at=1), _job(2, at=2)]
    assert [p.device_id for p in MemoryAware(max_slowdown=2.0).place(_state(devs, jobs))] == ["d0", "d0"]
    gated = MemoryAware(max_slowdown=2.0, group_share=0.85).place(_state(devs, jobs))
    assert [(p.job_id, p.device_id) for p in gated] == [(1, "d0")]  # alone it may use the whole budget
    with pytest.raises(ValueError, match="group_share"):
        MemoryAware(group_share=0.0)


def test_a_devices_own_gate_share_overrides_the_policys_default():
    # the same 5.25 GB device twice: d0's worker gates groups at 0.85 of the budget (too little for
    # the pair's 5 GB), d1's at 1.0; the policy's default (0.85) would refuse both
    jobs = [_job(1, at=1), _job(2, at=2)]
    devs = [Device("d0", 5 * GB * 1.05, running=(_job(9),), group_share=0.85),
            Device("d1", 5 * GB * 1.05, running=(_job(8),), group_share=1.0)]
    out = MemoryAware(max_slowdown=2.0, group_share=0.85).place(_state(devs, jobs))
    assert [(p.job_id, p.device_id) for p in out] == [(1, "d1")]
    # and a device without a share of its own takes the policy's
    plain = [Device("d0", 5 * GB * 1.05, running=(_job(9),))]
    assert MemoryAware(max_slowdown=2.0, group_share=0.85).place(_state(plain, jobs)) == []
    assert len(MemoryAware(max_slowdown=2.0, group_share=1.0).place(_state(plain, jobs))) == 1
    with pytest.raises(StateError, match="group_share"):
        Device("d2", GB, group_share=1.5)


def test_equal_empty_devices_are_taken_in_their_order_whatever_their_shares():
    # after job 1 takes d0, d2 heads the remaining 0.6-share bucket, which comes before d1's:
    # the tie between d1 and d2 (same budget, both empty) must still go to d1, the earlier device
    devs = [Device("d0", 12 * GB, group_share=0.6), Device("d1", 12 * GB, group_share=1.0),
            Device("d2", 12 * GB, group_share=0.6), Device("d3", 12 * GB, group_share=1.0)]
    out = MemoryAware().place(_state(devs, [_job(1, at=1), _job(2, at=2)]))
    assert [(p.job_id, p.device_id) for p in out] == [(1, "d0"), (2, "d1")]


def test_memory_aware_spreads_over_an_idle_cluster():
    devs = [Device("d0", 12 * GB), Device("d1", 12 * GB)]
    out = MemoryAware().place(_state(devs, [_job(1, at=1), _job(2, at=2)]))
    assert sorted(p.device_id for p in out) == ["d0", "d1"]


def test_memory_aware_prefers_the_group_with_the_largest_saving():
    # d0 runs a job with the same curve (saving ~3 GB), d1 one whose peak meets ours (saving ~0)
    flat = triangular_curve(4 * GB, 4.5 * GB, 1.0)
    devs = [Device("d0", 9 * GB, running=(_job(8, SMALL),)), Device("d1", 9 * GB, running=(_job(9, flat),))]
    out = MemoryAware(max_slowdown=2.0).place(_state(devs, [_job(1, SMALL)]))
    assert [p.device_id for p in out] == ["d0"]


def test_memory_aware_respects_the_slowdown_bound():
    devs = [Device("d0", 6 * GB, running=(_job(8, compute_share=1.0),))]
    assert MemoryAware(max_slowdown=1.5).place(_state(devs, [_job(1, compute_share=1.0)])) == []
    assert len(MemoryAware(max_slowdown=2.0).place(_state(devs, [_job(1, compute_share=1.0)]))) == 1


def test_tenants_share_a_device_only_when_both_allow_it():
    dev = Device("d0", 12 * GB, running=(_job(8, tenant="a"),))
    for a_allows, b_allows, placed in [(True, True, 1), (True, False, 0), (False, True, 0)]:
        tenants = {"a": Tenant("a", allow_cross_tenant=a_allows), "b": Tenant("b", allow_cross_tenant=b_allows)}
        out = MemoryAware(max_slowdown=2.0).place(_state([dev], [_job(1, tenant="b")], tenants))
        assert len(out) == placed, (a_allows, b_allows)


def test_quotas_cap_running_jobs_and_device_bytes():
    devs = [Device(f"d{i}", 12 * GB) for i in range(4)]
    jobs = [_job(i, at=i) for i in range(4)]
    for tenant, expect in [(Tenant("t", max_running_jobs=2), 2), (Tenant("t", max_device_bytes=12 * GB), 3)]:
        for policy in (FirstFitFifo(), MemoryAware()):
            assert len(policy.place(_state(devs, jobs, {"t": tenant}))) == expect


def test_fair_share_serves_the_tenant_furthest_below_its_weighted_share():
    tenants = {"a": Tenant("a", weight=1, usage_byte_seconds=100 * GB),
               "b": Tenant("b", weight=3, usage_byte_seconds=100 * GB)}
    jobs = [_job(f"a{i}", tenant="a", at=i) for i in range(3)] + [_job(f"b{i}", tenant="b", at=10 + i) for i in range(3)]
    order = [j.id for j in fair_order(_state([], jobs, tenants))]
    # b's normalised usage is a third of a's, so b's jobs come first until it catches up
    assert order[:2] == ["b0", "b1"]
    assert sorted(order) == sorted(j.id for j in jobs)


def test_a_job_of_an_unknown_tenant_is_a_state_error():
    with pytest.raises(StateError, match="tenant"):
        _state([], [_job(1, tenant="nobody")])
