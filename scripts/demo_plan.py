"""The demo's budget and its checks (used by scripts/demo.py).

The budget is not a fixed fraction of the jobs' peaks: it is chosen from what the scheduler's own policy
accepts for the pair's measured curves (Note [Choosing the demo's budget]), and the demo passes only when
the checks of :func:`checks` hold. Pure functions over the placement core and plain values, so tests can
drive them without a cluster.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from placement.curves import MemoryCurve
from placement.state import ClusterState, Device, Job, SharingPlan, Tenant

MIB = 1 << 20
# Note [Choosing the demo's budget]
#   The scheduler co-locates two jobs on a device only when its policy finds a sharing plan under the
#   device's group share of the budget with every job's predicted slowdown within the limit
#   (placement.policies.MemoryAware; ZICO_MAX_SLOWDOWN). Below some budget the predicted gating delay
#   exceeds the limit and the jobs run one after the other. The demo asks the same policy, on the same
#   measured curves, at every budget from the pair's feasible floor up to the sum of their solo peaks
#   (GRID_STEP apart), and takes the accepted budget MARGIN of the way from the lowest accepted one to
#   that sum: below the sum (so the jobs must share), above the scheduler's threshold (so it co-locates
#   them), with room left for the pool's overhead in the real run. Why three quarters: every byte one job
#   needs beside the other's peak moves between their processes each iteration (chunks returned, granted,
#   mapped: about 1.9 ms per 2 MiB chunk on the 2-core development VM, docs/benchmarks.md "The agent pool:
#   what a chunk costs"), and the plan does not count that time. The demo's pair moved 158, 117 and 78 MiB
#   per iteration at 0.75, 0.92 and 1.0 x the sum of their allocated peaks (``python -m tools.colocate``),
#   and at a quarter of the way (0.75 of the sum of reserved peaks) its compute stretched 1.6x beside the
#   other, the gain 1.03x against 1.64x predicted; at three quarters (0.92) 1.4x and 1.26x.
#   Only plans that must hold a job back count (mode "gating" or "shift"): at a budget whose group share holds both planning peaks at once the
#   plan is "independent" and nothing would be shared but the pool's cached blocks. The scheduler later decides on
#   exactly these curves and this budget, so its decision is the one computed here; the demo checks
#   that again on the real database snapshot before it starts the scheduler.
GRID_STEP = MIB
MARGIN = 0.75  # of the way from the lowest accepted budget to the sum of solo peaks
CAPACITY_ROOM = 0.5  # the device's capacity lies this far from the budget to the sum of solo peaks


@dataclass(frozen=True)
class BudgetChoice:
    """What :func:`choose_budget` found; all sizes in bytes."""

    budget_bytes: int
    capacity_bytes: int
    lowest_accepted_bytes: int | None  # least grid budget at which the policy co-locates the pair; None: none
    plan: SharingPlan | None           # the policy's plan for the pair at ``budget_bytes``
    sum_reserved_bytes: int            # sum of the solo peaks, reserved
    floor_bytes: int                   # the pair's feasible floor


def pair_state(curves: Sequence[MemoryCurve], shares: Sequence[float], budget_bytes: float,
               group_share: float) -> ClusterState:
    """One empty device and the two jobs queued, as the scheduler's snapshot presents them."""
    jobs = tuple(Job(id=i + 1, tenant="demo", curve=c, submitted_s=float(i), compute_share=s, curve_key=("demo", i))
                 for i, (c, s) in enumerate(zip(curves, shares)))
    device = Device(id="demo", budget_bytes=float(budget_bytes), kind="cpu", group_share=group_share)
    return ClusterState(devices=(device,), queued=jobs, tenants={"demo": Tenant("demo")})


def placed_together(placements) -> SharingPlan | None:
    """The group's plan when the policy put every queued job on one device, else None."""
    if len(placements) < 2 or len({p.device_id for p in placements}) != 1:
        return None
    return placements[-1].plan


def choose_budget(policy, curves: Sequence[MemoryCurve], shares: Sequence[float], reserved_peaks: Sequence[int],
                  floor_bytes: int, group_share: float) -> BudgetChoice:
    """The demo device's budget and capacity (Note [Choosing the demo's budget]).

    When the policy co-locates the pair with a sharing plan at no budget below the sum of solo peaks, the
    budget is the largest grid budget at which the pair would have to share (the demo then runs and reports
    what the scheduler really did) and ``lowest_accepted_bytes`` is None.
    """
    total = int(sum(reserved_peaks))
    start = int(math.ceil(floor_bytes / GRID_STEP)) * GRID_STEP
    grid = list(range(start, total, GRID_STEP)) or [start]
    plans = {b: placed_together(policy.place(pair_state(curves, shares, b, group_share))) for b in grid}
    accepted = [b for b in grid if plans[b] is not None and plans[b].mode != "independent"]
    if not accepted:  # the largest budget at which the pair must share: the scheduler's refusal is what shows
        budget = max((b for b in grid if plans[b] is None or plans[b].mode != "independent"), default=grid[0])
        return BudgetChoice(budget, _capacity(budget, total), None, None, total, floor_bytes)
    lowest = accepted[0]
    target = lowest + MARGIN * (total - lowest)
    budget = next(b for b in accepted if b >= target) if accepted[-1] >= target else accepted[-1]
    return BudgetChoice(budget, _capacity(budget, total), lowest, plans[budget], total, floor_bytes)


def _capacity(budget: int, total: int) -> int:
    return max(budget, int(budget + CAPACITY_ROOM * (total - budget)))


def overlapping(spans_a, spans_b) -> bool:
    """True when a ``(device, start_s, end_s)`` span of one job overlaps one of the other's on the same device."""
    return any(da == db and sa < eb and sb < ea for da, sa, ea in spans_a for db, sb, eb in spans_b)


@dataclass(frozen=True)
class Check:
    ok: bool
    text: str
    counted: bool = True  # a check printed for information only reads "check NOT COUNTED (pass|fail)"

    def line(self) -> str:
        verdict = "PASS" if self.ok else "FAIL"
        return f"check {verdict}: {self.text}" if self.counted else f"check NOT COUNTED ({verdict.lower()}): {self.text}"


def checks(statuses: Sequence[str], together: bool, device_peak_bytes: int | None, budget_bytes: int,
           sum_reserved_bytes: int, device: str) -> list[Check]:
    """The demo's pass conditions, each with its figures: both jobs succeeded; they were placed together
    (placements overlapping in time on one device); the device's stored peak reserved is within its budget;
    the budget is below the sum of the solo peaks (reserved)."""
    peak = "nothing stored" if device_peak_bytes is None else mib(device_peak_bytes)
    return [
        Check(all(s == "succeeded" for s in statuses), f"both jobs succeeded ({', '.join(statuses)})"),
        Check(together, f"placed together on {device} (placements overlapping in time)" if together
              else f"placed together on {device}: no, they ran one after the other"),
        Check(device_peak_bytes is not None and device_peak_bytes <= budget_bytes,
              f"device peak reserved {peak} <= budget {mib(budget_bytes)}"),
        Check(budget_bytes < sum_reserved_bytes,
              f"budget {mib(budget_bytes)} < sum of solo peaks {mib(sum_reserved_bytes)} (reserved)"),
    ]


def mib(n) -> str:
    return "n/a" if n is None else f"{n / MIB:,.1f} MiB"
