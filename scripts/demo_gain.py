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

    The plan predicts the same ratio from its predicted slowdowns (each job's solo time stretched by its own,
    the longest of them the pair's time together). Where the plan itself predicts no gain (a pair whose
    shorter iterations the coordinator paces to the longer ones at every budget below the sum of the
    peaks), the check is printed and not counted: the run cannot show what the plan rules out, and a check
    failing on every run would hide the other four. Where the plan predicts a gain, the check counts.

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


def predicted_ratio(solo_s: Sequence[float], slowdowns: Sequence[float | None]) -> float | None:
    """The plan's ratio: ``sum(solo) / max(solo_i * slowdown_i)``; None when a job's slowdown is unknown."""
    if not slowdowns or any(not x for x in slowdowns):
        return None
    return sum(solo_s) / max(s * float(x) for s, x in zip(solo_s, slowdowns))


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
               oom: tuple[float, float] | None, predicted: float | None) -> tuple[list[str], Check, bool]:
    """The lines the demo prints about its gain, its fifth check (ratio > 1.0 under a budget below the sum of
    the solo peaks) and whether the check counts (the plan predicted a gain: Note [Measuring the demo's
    gain])."""
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
    counts = predicted is not None and predicted > 1.0
    ok = g.ratio > 1.0 and budget_bytes < sum_reserved_bytes
    text = (f"together sooner than one after the other: {g.ratio:.2f}x {'>' if g.ratio > 1.0 else 'is not >'} 1.0 "
            f"under a budget of {mib(budget_bytes)} < sum of solo peaks {mib(sum_reserved_bytes)}")
    if not counts:
        text += f" (the plan itself predicted {plan} for this pair at this budget)"
    return lines, Check(ok, text, counts), counts
