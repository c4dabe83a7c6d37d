"""The cluster simulator: same policies and coordinator as the live system, virtual clock."""
import random

import pytest

from placement.curves import triangular_curve
from placement.policies import FirstFitFifo, MemoryAware
from placement.simulator import Arrival, simulate
from placement.state import Device, Job, Tenant

GB = 1e9
KINDS = [triangular_curve(1 * GB, 6 * GB, 0.5), triangular_curve(2 * GB, 9 * GB, 0.8, 0.4),
         triangular_curve(0.5 * GB, 4 * GB, 0.3, 0.6)]
TENANTS = {"a": Tenant("a", allow_cross_tenant=True), "b": Tenant("b", allow_cross_tenant=True)}


def _trace(n=16, seed=3):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.randrange(len(KINDS))
        job = Job(i, "ab"[i % 2], KINDS[k], submitted_s=0, iterations=rng.randint(20, 60),
                  compute_share=0.6, curve_key=k)
        out.append(Arrival(rng.uniform(0, 20), job))
    return out


DEVICES = [Device(f"d{i}", 12 * GB) for i in range(3)]


def test_coordinated_co_location_finishes_sooner_with_no_budget_violation():
    fifo = simulate(_trace(), DEVICES, TENANTS, FirstFitFifo())
    zico = simulate(_trace(), DEVICES, TENANTS, MemoryAware())
    assert len(fifo.jct) == len(zico.jct) == 16
    assert zico.violations == 0 and zico.peak_over_budget <= 1 + 1e-6
    assert zico.makespan_s < fifo.makespan_s
    assert zico.mean_jct_s < fifo.mean_jct_s
    assert fifo.violations == 0 and all(s == pytest.approx(1.0) for s in fifo.slowdown.values())


def test_the_same_placements_without_coordination_exceed_the_budget():
    naive = simulate(_trace(), DEVICES, TENANTS, MemoryAware(), gate="naive")
    assert naive.violations > 0 and naive.peak_over_budget > 1.0


def test_a_job_no_device_can_hold_is_reported_unplaced():
    huge = Job("huge", "a", triangular_curve(1 * GB, 40 * GB), iterations=2)
    res = simulate(_trace(4) + [Arrival(0.0, huge)], DEVICES, TENANTS, FirstFitFifo())
    assert res.unplaced == ["huge"] and len(res.jct) == 4


def test_unknown_gate_is_refused():
    with pytest.raises(ValueError, match="unknown gate"):
        simulate(_trace(2), DEVICES, TENANTS, FirstFitFifo(), gate="magic")
