"""placement.gating.held_curve / held_floor: the planning rule of tools.colocate and the real-run experiment
(Note [Planning with held bytes]), and why its peak starts at the backward mark: the pacer, on a fake clock."""
import pytest

from placement.coordinator import Coordinator
from placement.curves import MemoryCurve
from placement.gating import HELD_GATE_HEADROOM, held_curve, held_floor, minimal_feasible_budget
from placement.pacing import Pacer

MIB = 1 << 20


def resnet_like(backward=0.3):
    """Persistent 10 MiB; the forward pass rises to 30 MiB by the backward mark (0.3), the backward pass piles
    gradients up to the peak, 60 MiB at 0.7 (as resnet18 does on CPU), the optimizer step ends at 10 MiB."""
    meta = {} if backward is None else {"phase_fractions": {"forward": 0.0, "backward": backward, "optimizer": 0.9}}
    return MemoryCurve(fractions=[0.0, 0.1, 0.3, 0.5, 0.7, 0.9], bytes=[x * MIB for x in (10, 20, 30, 45, 60, 20)],
                       iteration_s=1.0, persistent_bytes=10 * MIB, source="allocator-trace", meta=meta)


def test_a_held_curve_carries_the_solo_overhead_and_its_peak_from_the_backward_mark():
    h = held_curve(resnet_like(), 70 * MIB)  # the pool held 10 MiB more than the job allocated, alone
    assert h.persistent_bytes == 20 * MIB and h.peak_bytes == 70 * MIB
    assert list(h.bytes / MIB) == [20, 30, 70, 70, 70, 30]  # from the backward mark's step (0.3) to the peak
    assert h.meta["held_overhead_bytes"] == 10 * MIB and h.meta["peak_from_fraction"] == 0.3
    # a mark inside a step raises that step (conservative by less than one step)
    assert list(held_curve(resnet_like(backward=0.2), 60 * MIB).bytes / MIB) == [10, 60, 60, 60, 60, 20]
    # a peak at or before the backward mark (the forward pass ends at the peak), or no marks: only the overhead
    assert list(held_curve(resnet_like(backward=0.8), 60 * MIB).bytes / MIB) == [10, 20, 30, 45, 60, 20]
    assert list(held_curve(resnet_like(backward=None), 65 * MIB).bytes / MIB) == [15, 25, 35, 50, 65, 25]
    # a held peak below the allocated one (a measuring error) adds nothing
    assert held_curve(resnet_like(), 50 * MIB).peak_bytes == 60 * MIB
    with pytest.raises(ValueError, match="held_peak_bytes"):
        held_curve(resnet_like(), float("nan"))


def test_the_floor_is_the_least_feasible_budget_of_the_held_curves_over_the_headroom():
    a, b = held_curve(resnet_like(), 70 * MIB), held_curve(resnet_like(backward=None), 60 * MIB)
    assert minimal_feasible_budget([a, b]) == 70 * MIB + 10 * MIB  # a's peak beside b's persistent bytes
    assert held_floor([a, b]) == pytest.approx(80 * MIB / (1 - HELD_GATE_HEADROOM))
    assert held_floor([a, b], 0.0) == 80 * MIB
    with pytest.raises(ValueError, match="headroom"):
        held_floor([a, b], 1.0)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _neighbour_after_backward(curve):
    """Job A (``curve`` as planned; really resnet_like()) runs its warm-up, starts its next iteration at t = 1 s
    and sends its backward mark at 1.3 s; B (40 MiB at the middle of a 0.2 s iteration, nothing persistent)
    asks to start then. Returns the most bytes A *really* holds plus B's, over B's iteration as admitted."""
    clock = Clock()
    coordinator = Coordinator(80 * MIB, clock=clock)
    a = Pacer(coordinator, "a", curve)
    a.join()
    assert a.request().admit
    for kind in ("iteration_start", "forward", "backward"):
        a.mark(kind)
    clock.t = 1.0
    a.mark("iteration_end")  # the warm-up took 1 s: A's real curve from now on, planned with 1 s
    assert a.request().admit
    a.mark("iteration_start")
    a.mark("forward")
    clock.t = 1.3
    a.mark("backward")
    b_curve = MemoryCurve(fractions=[0.0, 0.25, 0.75], bytes=[0, 40 * MIB, 0], iteration_s=0.2, persistent_bytes=0)
    coordinator.add_job("b", b_curve, loaded=True)
    decision = coordinator.request_start("b")
    start = clock.t + (0.0 if decision.admit else decision.delay_s)
    real = resnet_like()
    steps = [start + k * 0.001 for k in range(201)]  # B's iteration, 1 ms apart
    return max(float(real.at(min(t - 1.0, 0.999))) + float(b_curve.at(min((t - start) / 0.2, 0.999)))
               for t in steps)


def test_the_backward_mark_anchors_the_pacer_at_the_held_peak_so_a_neighbour_waits_for_the_real_one():
    # planned with the allocated curve, A is re-anchored at its peak (0.7) at its backward mark (really 0.3) and
    # seen falling while it still rises: B is let in beside A's real peak, over the budget
    assert _neighbour_after_backward(resnet_like()) > 80 * MIB
    # planned with the held curve, A holds its peak from the mark on: B starts where both fit
    assert _neighbour_after_backward(held_curve(resnet_like(), 60 * MIB)) <= 80 * MIB
