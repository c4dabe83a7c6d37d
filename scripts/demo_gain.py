"""The demo's gain: the pair together against one after the other, and what uncoordinated sharing would have done
(used by scripts/demo.py; pure functions over plain values and the placement core, so tests can drive them).

Note [Measuring the demo's gain]
    One after the other, the pair takes the sum of its solo times: each job's iterations times its solo
    iteration time, the median of its steady iterations in the solo profile the demo measures first. Together
    it takes the span from the first job's first iteration to the last job's last one (each job's
    ``train_s``, from its first iteration's start to its last's end, counted back from when it finished). Both
    are measured the same way, so a noisy machine slows both: the solo profiles are the worker's own profile
    runs (scripts/demo.py ``solo_profiles``: job processes with one slot's threads and cores of the device's
    two, Note [Compute per slot] in zico_contracts.cpushare), and neither side counts process start-up. The
    ratio is ``solo sum / together``: above 1.0 the pair finished sooner together, under a budget below the
    sum of its solo peaks. A job's first iteration (warm-up) is in ``train_s`` but not in the median, which
    only makes the ratio smaller.

    The plan predicts the same ratio from its predicted slowdowns (:func:`predicted_ratio`): a slowdown is
    what a job runs at while its group runs together (Note [Slowdown beside neighbours] in
    workers/agent/agent.py), so each job runs at its own until the first of them has done all its
    iterations, and the one left runs alone at its solo speed. Taking the longest stretched solo time as the
    pair's span instead, as this did before, left out that solo tail and predicted 0.67x for a pair that ran
    1.07x.

    The check counts where the plan, fed the compute shares the agent measured in this run (each job's share
    as the control consumer stored it for its kind, the figure the scheduler plans the next such pair with:
    Note [Measured compute share] in placement.compute_share), still predicts a gain. On this 2-core machine
    the pair's compute sometimes interferes although each job has a core of its own (one job's compute
    stretched 2-5x while both computed, in about one run of three; caches and memory bandwidth the cores
    share): the measured share then says so, the plan predicts no gain for that machine, and the line is
    printed as ``check NOT COUNTED`` with both predictions; a run whose compute did not interfere counts.

    What uncoordinated sharing would have done at that budget (:func:`uncoordinated`): both jobs started at
    once with no coordinator, each repeating its measured solo curve, its bytes held as its pool held them
    when profiled alone (the allocated curve scaled by its reserved over allocated peak: without a
    coordinator each job's pool caches for itself); their iteration times differ, so their peaks drift into
    each other. The first moment those bytes together pass the budget is found on the measured curves
    (placement.curves.combined_bytes); from there one allocation fails: out of memory, as the real-run
    experiment's mode (b) measured on real processes (docs/experiment.md).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from placement.curves import MemoryCurve, combined_bytes

from demo_plan import Check, mib  # beside this script

SLOTS = 2  # the demo worker's --slots


@dataclass(frozen=True)
class Gain:
    """Seconds: ``solo`` (each job's solo time), ``together`` (the pair's span); ``ratio`` their quotient."""

    solo: tuple[float, ...]
    together: float

    @property
    def ratio(self) -> float:
        return sum(self.solo) / self.together if self.together > 0 else 0.0


def gain(iterations: Sequence[int], curves: Sequence[MemoryCurve], finished_s: Sequence[float],
         train_s: Sequence[float]) -> Gain:
    """Note [Measuring the demo's gain]: ``iterations`` each job ran, its solo ``curves``, when it finished
    (unix s) and its ``train_s``. Raises ValueError when the lengths differ."""
    if not len(iterations) == len(curves) == len(finished_s) == len(train_s):
        raise ValueError("iterations, curves, finished_s and train_s: one entry per job")
    solo = tuple(n * c.iteration_s for n, c in zip(iterations, curves))
    together = max(finished_s) - min(f - t for f, t in zip(finished_s, train_s))
    return Gain(solo, together)


def predicted_span(solo_s: Sequence[float], slowdowns: Sequence[float]) -> float:
    """Seconds the group takes together when each job (``solo_s``: its solo time for all its iterations)
    runs at its ``slowdowns`` entry while another job still runs and at 1.0 once alone (Note [Measuring the
    demo's gain]; a group of three keeps its group's slowdowns while two are left, an upper bound)."""
    left = [1.0] * len(solo_s)  # the fraction of each job's iterations still to run
    t = 0.0
    while sum(f > 0 for f in left) > 1:
        running = [i for i, f in enumerate(left) if f > 0]
        rate = {i: 1.0 / (solo_s[i] * float(slowdowns[i])) for i in running}  # fraction of its run per second
        dt = min(left[i] / rate[i] for i in running)
        for i in running:
            left[i] = 0.0 if left[i] / rate[i] <= dt * (1 + 1e-12) else left[i] - rate[i] * dt
        t += dt
    return t + sum(f * s for f, s in zip(left, solo_s))


def replanned_ratio(planning_curves: Sequence[MemoryCurve], shares: Sequence[float], gate_budget_bytes: float,
                    solo_s: Sequence[float]) -> float | None:
    """The plan's ratio for the pair with compute ``shares`` (each in (0, 1]) at the gate's budget (bytes):
    placement.groups.plan_group's slowdowns through :func:`predicted_ratio`; None when no plan fits."""
    from placement.groups import plan_group
    from placement.state import Job

    jobs = [Job(id=i + 1, tenant="demo", curve=c, compute_share=min(1.0, max(1e-3, float(s))))
            for i, (c, s) in enumerate(zip(planning_curves, shares))]
    plan = plan_group(jobs, gate_budget_bytes)
    return None if plan is None else predicted_ratio(solo_s, plan.predicted_slowdown)


def predicted_ratio(solo_s: Sequence[float], slowdowns: Sequence[float | None]) -> float | None:
    """The plan's ratio: ``sum(solo) / predicted_span``; None when a job's slowdown is unknown."""
    if not slowdowns or any(not x for x in slowdowns):
        return None
    return sum(solo_s) / predicted_span(solo_s, [float(x) for x in slowdowns])


def uncoordinated(curves: Sequence[MemoryCurve], reserved_peaks: Sequence[int], budget_bytes: int,
                  horizon_s: float, points: int = 20000) -> tuple[float, float] | None:
    """``(t, bytes)``: the first time (s from their common start, within ``horizon_s``) the jobs' bytes
    together pass ``budget_bytes`` when both start at once, ungated, each curve scaled by its reserved over
    allocated peak (Note [Measuring the demo's gain]); None when they never do."""
    scaled = [dataclasses.replace(c, bytes=c.bytes * (r / c.peak_bytes), persistent_bytes=c.persistent_bytes * r
                                  / c.peak_bytes) for c, r in zip(curves, reserved_peaks)]
    t = np.linspace(0.0, horizon_s, points)
    total = combined_bytes(scaled, [0.0] * len(curves), t)
    over = np.nonzero(total > budget_bytes)[0]
    return None if not len(over) else (float(t[over[0]]), float(total[over[0]]))


def gain_check(g: Gain, names: Sequence[str], budget_bytes: int, sum_reserved_bytes: int,
               oom: tuple[float, float] | None, predicted: float | None,
               measured_shares_predict: float | None = None) -> tuple[list[str], Check]:
    """The lines the demo prints about its gain and its fifth check (ratio > 1.0 under a budget below the sum
    of the solo peaks), counted unless the plan with the run's measured compute shares
    (``measured_shares_predict``, None: not known) predicts no gain (Note [Measuring the demo's gain])."""
    solo = " + ".join(f"{n} {s:.1f} s" for n, s in zip(names, g.solo))
    plan = "n/a" if predicted is None else f"{predicted:.2f}x"
    lines = [f"gain: one after the other {sum(g.solo):.1f} s ({solo}, the solo profiles' median iteration x "
             f"iterations); together {g.together:.1f} s: {g.ratio:.2f}x, the plan predicted {plan} (the "
             "benchmark's target on 2 cores: 1.5x)"]
    if oom is not None:
        lines.append(f"uncoordinated sharing at this budget: both started at once without a coordinator, their measured "
                     f"curves (as each pool held them alone) pass the budget {mib(budget_bytes)} at {oom[0]:.2f} s "
                     f"({mib(oom[1])}): out of memory there, as the real-run experiment's mode (b) ran out on real processes")
    else:
        lines.append(f"uncoordinated sharing at this budget: their measured curves never pass {mib(budget_bytes)} "
                     "together over the run")
    ok = g.ratio > 1.0 and budget_bytes < sum_reserved_bytes
    text = (f"together sooner than one after the other: {g.ratio:.2f}x {'>' if g.ratio > 1.0 else 'is not >'} 1.0 "
            f"under a budget of {mib(budget_bytes)} < sum of solo peaks {mib(sum_reserved_bytes)}")
    counts = measured_shares_predict is None or measured_shares_predict > 1.0
    if not counts:
        text += (f" (with the compute shares measured in this run the plan predicts {measured_shares_predict:.2f}x, "
                 f"not {plan}: the jobs' compute interfered on this machine's cores)")
    return lines, Check(ok, text, counts)
