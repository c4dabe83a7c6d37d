"""Zico's experiment on real training jobs: pairs of job processes under budgets below the sum of their peaks,
run (a) sequentially, (b) uncoordinated, (c) with iteration time slicing and (d) with Zico, side by side.

    python -m tools.bench.experiment [--device cpu|cuda:N] [--pair A+B ...] [--iterations 12]
        [--budgets 3 | --budget-at F ...] [--slots 2] [--gate-headroom 0.10] [--out prefix] [--doc docs/experiment.md]

Steps (every job its own process under a device agent; :mod:`.experiment_modes` says what each mode is):

1. **Profile** each distinct job alone (its allocator-trace curve, and the most bytes the pool granted it:
   its solo *held* peak, which a hard limit must hold).
2. **Compute share** of each distinct job (Note [Measured compute share] in placement.compute_share): its
   median step alone, then beside an identical copy, both without a limit; the share goes into the curve's
   ``meta`` (written to ``<out>.curves.json``), as the scheduler reads it.
3. **Pairs**: budgets from the sum of the pair's solo held peaks ``S`` down to its floor ``F`` in equal steps,
   where ``F`` is the least budget Zico's gate can plan (``placement.gating.held_floor``: the
   ``minimal_feasible_budget`` of its planning curves over ``1 - gate headroom``, never below
   ``max_i(held_i + sum_j!=i persistent_j)``, the least any sharing needs).
   ``--budget-at F`` (repeatable) runs at the budgets ``S - F x (S - F_floor)`` instead (0: the sum, 1: the
   floor; the GPU check's one budget halfway down). Every mode runs at every budget, (a) first (its baseline
   measured close in time to the others: the machine's other load moves every figure).

Zico's gate here plans as the device worker and ``tools.colocate`` do (Note [One planning rule] in
placement.gating): each job's curve stored with its solo held peak, planned by ``placement.gating.planning_curve``
(raised by its pool overhead, held at its peak from its backward mark to its peak) against
``(1 - gate headroom) x budget`` (``--gate-headroom``, default ``placement.gating.DEFAULT_GATE_HEADROOM``).

Printed per pair and budget (:mod:`.experiment_report`): throughput relative to (a) (its makespan over the
mode's: same iterations), makespan, peak held bytes, jobs failed out of memory, budget violations (grants past
the budget), gate delay; then the slowdowns predicted with the measured shares (the contention model for (b),
the scheduler's plan for (d)) against those measured, once with the shares of step 2 and once with the
*worker's* shares: what the device agent's meter measured in every earlier run of the job in this experiment
(step 2's included), combined as the control consumer stores them (Note [Measured compute share] in
placement.compute_share), so each row is predicted out of sample, as the scheduler would predict it. ``--doc``
rewrites the page's measured section (:func:`.experiment_report.replace_section`). Bad input: one line on
stderr, exit status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from placement.gating import DEFAULT_GATE_HEADROOM

from .experiment_modes import MODES, Job, colocated_slowdowns, profile, run_mode

MIB = 2**20
CPU_JOBS = {"digits-cnn": "digits-cnn:batch_size=256,image_size=32,data=synthetic",
            "tiny-lm": "tiny-lm:batch_size=16,seq_len=128,data=synthetic",
            "resnet18": "resnet18:batch_size=16,image_size=64,data=synthetic"}
CUDA_JOBS = {"resnet50": "resnet50:batch_size=64,image_size=224,data=synthetic",
             "bert-base": "bert-base:batch_size=16,seq_len=256,data=synthetic",
             "gpt2-small": "gpt2-small:batch_size=8,seq_len=512,data=synthetic"}
CPU_PAIRS = ["digits-cnn+tiny-lm", "resnet18+tiny-lm", "tiny-lm+tiny-lm"]
CUDA_PAIRS = ["resnet50+gpt2-small", "bert-base+gpt2-small", "resnet50+resnet50"]
# the pool's capacity while jobs are profiled and shares measured (no limit to speak of), bytes
SHARE_CAPACITY = {"cpu": 2 << 30, "cuda": 64 << 30}


def free_capacity(device: str) -> int:
    return SHARE_CAPACITY["cuda" if device.startswith("cuda") else "cpu"]


class UsageError(ValueError):
    """Bad input (a pair, a flag): the message names it."""


def held_curve(curve: dict[str, Any], held_peak: int) -> dict[str, Any]:
    """The curve the gate plans ``curve`` (a dict, bytes) with once stored with its solo held peak, as the device
    worker stores a profile: ``placement.gating.planning_curve(with_held_peak(...))`` (Note [One planning rule]).
    Returns a new curve dict, ``meta["held_peak_bytes"]`` and ``meta["held_overhead_bytes"]`` added."""
    from placement.curves import curve_from_dict
    from placement.gating import planning_curve, with_held_peak

    return planning_curve(with_held_peak(curve_from_dict(curve), int(held_peak))).to_dict()


def budgets_for(held: list[dict[str, Any]], count: int, gate_headroom: float,
                at: list[float] | None = None) -> tuple[list[int], int, int]:
    """``(budgets, S, F)``: ``count`` budgets from ``S`` (sum of held peaks) down to the floor ``F``, bytes, or with
    ``at`` (fractions in [0, 1]) the budgets ``S - f x (S - F)`` for each ``f``; only ``[S]`` when the floor is at or
    above ``S`` (Zico's gate cannot share the pair below the sum)."""
    from placement.curves import curve_from_dict
    from placement.gating import held_floor

    total = sum(c["peak_bytes"] for c in held)
    floor = int(held_floor([curve_from_dict(c) for c in held], gate_headroom)) + 1
    if floor >= total:
        return [total], total, floor
    if at:
        return [int(total - f * (total - floor)) for f in at], total, floor
    if count == 1:
        return [total], total, floor
    step = (total - floor) / (count - 1)
    return [int(total - k * step) for k in range(count)], total, floor


def measure_shares(jobs: dict[str, Job], device: str, iterations: int, settings=None,
                   slots: int | None = None) -> dict[str, dict[str, Any]]:
    """Per job label: ``solo_step_s``, ``colocated_step_s`` (beside an identical copy), ``compute_share``,
    and the solo and copies runs (``run_mode`` results). Raises RuntimeError when a run failed."""
    from placement.compute_share import share_from_step_times

    out = {}
    for label, job in jobs.items():
        solo = run_mode("sequential", [job], free_capacity(device), device, iterations, settings=settings, slots=slots)
        pair = run_mode("uncoordinated", [job, job], free_capacity(device), device, iterations, settings=settings,
                        slots=slots)
        for r in (solo, pair):
            if r["failures"]:
                raise RuntimeError(f"measuring {label}'s compute share: {r['jobs'][0]['reason'] or r['jobs'][-1]['reason']}")
        solo_s = solo["jobs"][0]["step_s"]
        slow = [s for s in colocated_slowdowns(pair, [solo_s, solo_s]) if s is not None]
        together = solo_s * sorted(slow)[len(slow) // 2] if slow else None
        if not solo_s or not together:
            raise RuntimeError(f"measuring {label}'s compute share: too few iterations (raise --iterations)")
        out[label] = {"solo_step_s": solo_s, "colocated_step_s": together,
                      "compute_share": share_from_step_times(solo_s, together, 2), "solo_run": solo, "pair_run": pair}
    return out


def plan_slowdowns(held: list[dict[str, Any]], shares: list[float], plan_budget: float) -> list[float | None]:
    """The scheduler's predicted slowdown per job (``placement.groups.plan_group``, with the measured shares)
    for the pair under ``plan_budget`` bytes; Nones when the group cannot be planned there."""
    from placement.curves import curve_from_dict
    from placement.groups import plan_group
    from placement.state import Job as PlannedJob

    jobs = [PlannedJob(n, "t", curve_from_dict(c), compute_share=s) for n, (c, s) in enumerate(zip(held, shares))]
    plan = plan_group(jobs, plan_budget)
    return [None] * len(held) if plan is None else [float(x) for x in plan.predicted_slowdown]


class WorkerShares:
    """The shares the device agent's meter measured in the experiment's runs, per job label, combined as the
    control consumer stores them with a curve (``placement.compute_share.combine``); a label with none yet has
    the scheduler's default."""

    def __init__(self) -> None:
        self.meta: dict[str, dict[str, Any]] = {}
        self._runs = 0

    def add(self, run: dict[str, Any]) -> None:
        """Every job measurement of one ``run_mode`` result."""
        from placement.compute_share import combine

        for j in run["jobs"]:
            if j.get("compute_share"):
                self._runs += 1
                self.meta[j["label"]] = combine(self.meta.get(j["label"]), j["compute_share"], job=self._runs)

    def share(self, label: str) -> float:
        from placement.compute_share import DEFAULT_COMPUTE_SHARE, SHARE_KEY

        return (self.meta.get(label) or {}).get(SHARE_KEY, DEFAULT_COMPUTE_SHARE)

    def method(self, label: str) -> str:
        from placement.compute_share import MEASURED_KEY

        return ((self.meta.get(label) or {}).get(MEASURED_KEY) or {}).get("method", "default")


def parse_pairs(texts: list[str], known: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for t in texts:
        a, plus, b = t.partition("+")
        if not plus or a not in known or b not in known:
            raise UsageError(f"--pair {t!r}: expected A+B with A and B among {', '.join(known)}")
        out.append((a, b))
    return out


def run(device: str = "cpu", pairs: list[str] | None = None, iterations: int = 12, budgets: int = 3,
        gate_headroom: float = DEFAULT_GATE_HEADROOM, jobs: dict[str, str] | None = None, settings=None,
        say=print, budget_at: list[float] | None = None, slots: int | None = None) -> dict[str, Any]:
    """The whole experiment; returns the report (see :mod:`.experiment_report` for its fields). ``budget_at``:
    fractions of the way from the sum of held peaks to the floor (replacing ``budgets``); ``slots``: a CPU
    device's slots, every job process (profiles included) its slot's cores and threads as on a device worker
    with ``--slots`` (Note [Compute per slot] in zico_contracts.cpushare); None: torch's threads on every core."""
    from placement.compute_share import predicted_slowdown, relative_error, with_measured_share
    from placement.curves import curve_from_dict

    from tools.colocate import parse_job

    t_start = time.monotonic()
    texts = jobs or (CUDA_JOBS if device.startswith("cuda") else CPU_JOBS)
    pair_keys = parse_pairs(pairs or (CUDA_PAIRS if device.startswith("cuda") else CPU_PAIRS), texts)
    if iterations < 4:
        raise UsageError(f"--iterations must be at least 4 (the first is warm-up), got {iterations}")
    if budgets < 1:
        raise UsageError(f"--budgets must be at least 1, got {budgets}")
    for f in budget_at or []:
        if not 0 <= f <= 1:
            raise UsageError(f"--budget-at must lie in [0, 1] (0: the sum of held peaks, 1: the floor), got {f}")
    if not 0 <= gate_headroom < 1:
        raise UsageError(f"--gate-headroom must lie in [0, 1), got {gate_headroom}")
    used = sorted({k for p in pair_keys for k in p})
    catalog = {}
    for label in used:
        key, params = parse_job(texts[label])
        catalog[label] = Job(key, params, label)
    profiles = {}
    for n, label in enumerate(used, start=1):
        profiles[label] = profile(catalog[label], device, free_capacity(device), job_id=n, settings=settings,
                                  slots=slots)
        p = profiles[label]
        say(f"profiled {label}: peak {p['curve']['peak_bytes'] / MIB:.1f} MiB allocated, "
            f"{p['reserved_peak_bytes'] / MIB:.1f} MiB held, iteration {p['curve']['iteration_s'] * 1000:.0f} ms")
    shares = measure_shares(catalog, device, iterations, settings, slots)
    worker = WorkerShares()
    for label in used:
        worker.add(shares[label]["solo_run"])
        worker.add(shares[label]["pair_run"])
    curves = {}
    for label in used:
        s = shares[label]
        curves[label] = with_measured_share(curve_from_dict(profiles[label]["curve"]), s["solo_step_s"],
                                            s["colocated_step_s"]).to_dict()
        say(f"compute share of {label}: {s['compute_share']:.2f} (step {s['solo_step_s'] * 1000:.0f} ms alone, "
            f"{s['colocated_step_s'] * 1000:.0f} ms beside a copy)")
    rows, predictions = [], []
    for a, b in pair_keys:
        pair = [catalog[a], catalog[b]]
        held = [held_curve(curves[k], profiles[k]["reserved_peak_bytes"]) for k in (a, b)]
        bs, total, floor = budgets_for(held, budgets, gate_headroom, budget_at)
        share_ab = [curves[a]["meta"]["compute_share"], curves[b]["meta"]["compute_share"]]
        for budget in bs:
            worker_ab = [worker.share(a), worker.share(b)]  # from the runs before this row: out of sample
            row = {"pair": f"{a} + {b}", "budget_bytes": budget, "sum_held_peaks_bytes": total, "floor_bytes": floor,
                   "modes": {}}
            capacity = max(budget, (budget + total) // 2)  # room for the deadlock rule, as tools.colocate
            for mode in MODES:  # (a) again at every budget: its baseline is measured beside the others, in time
                row["modes"][mode] = run_mode(mode, pair, budget, device, iterations, curves=held, capacity=capacity,
                                              gate_headroom=gate_headroom, settings=settings, slots=slots)
            rows.append(row)
            for r in row["modes"].values():
                worker.add(r)
            say(_progress(row))
            # slowdowns against the row's own (a), run just before: the machine's other load moves every figure
            solo_steps = [j["step_s"] for j in row["modes"]["sequential"]["jobs"]]
            solo_spans = [j["span_s"] for j in row["modes"]["sequential"]["jobs"]]
            contention, by_worker = predicted_slowdown(share_ab), predicted_slowdown(worker_ab)
            for label, m in zip((a, b), colocated_slowdowns(row["modes"]["uncoordinated"], solo_steps)):
                if m is not None and all(solo_steps):
                    predictions.append({"pair": row["pair"], "budget_bytes": budget, "job": label, "mode": "uncoordinated",
                                        "predicted": contention, "measured": m,
                                        "error": relative_error(contention, m), "in_sample": a == b,
                                        "predicted_worker": by_worker, "error_worker": relative_error(by_worker, m)})
            planned = plan_slowdowns(held, share_ab, (1 - gate_headroom) * budget)
            planned_worker = plan_slowdowns(held, worker_ab, (1 - gate_headroom) * budget)
            for label, j, solo, p, w in zip((a, b), row["modes"]["zico"]["jobs"], solo_spans, planned, planned_worker):
                if p is not None and j["status"] == "succeeded" and j["span_s"] and solo:
                    m = j["span_s"] / solo
                    predictions.append({"pair": row["pair"], "budget_bytes": budget, "job": label, "mode": "zico",
                                        "predicted": p, "measured": m, "error": relative_error(p, m),
                                        "in_sample": False, "predicted_worker": w,
                                        "error_worker": None if w is None else relative_error(w, m)})
    return {"device": device, "iterations": iterations, "slots": slots,
            "gate_headroom": gate_headroom, "jobs": {k: texts[k] for k in used},
            "profiles": {k: {"peak_bytes": profiles[k]["curve"]["peak_bytes"],
                             "persistent_bytes": profiles[k]["curve"]["persistent_bytes"],
                             "held_peak_bytes": profiles[k]["reserved_peak_bytes"],
                             "iteration_s": profiles[k]["curve"]["iteration_s"]} for k in used},
            "shares": {k: {**{x: v for x, v in shares[k].items() if x not in ("solo_run", "pair_run")},
                           "worker_share": worker.share(k), "worker_method": worker.method(k)} for k in used},
            "worker_curves_meta": worker.meta,
            "curves": curves, "rows": rows, "predictions": predictions, "wall_s": time.monotonic() - t_start}


def _progress(row: dict[str, Any]) -> str:
    parts = []
    for mode, r in row["modes"].items():
        parts.append(f"{mode} " + (f"{r['makespan_s']:.1f} s" if r["makespan_s"] else f"{r['failures']} failed"))
    return f"{row['pair']} at {row['budget_bytes'] / MIB:.1f} MiB: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 ok, 1 a run could not be made, 2 bad input."""
    from .experiment_report import markdown, replace_section, section

    ap = argparse.ArgumentParser(prog="python -m tools.bench.experiment", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--pair", action="append", default=None, help="A+B of the job names (repeat); default: the device's")
    ap.add_argument("--iterations", type=int, default=12, help="iterations of every job in every run (>= 4)")
    ap.add_argument("--budgets", type=int, default=3, help="budgets per pair, from the sum of held peaks to the floor")
    ap.add_argument("--budget-at", type=float, action="append", default=None, metavar="F",
                    help="instead of --budgets: a budget F of the way from the sum of held peaks (0) to the floor (1); "
                         "repeat for more")
    ap.add_argument("--slots", type=int, default=2,
                    help="CPU: the device's slots, each job its slot's cores and threads (0: torch's threads, every core)")
    ap.add_argument("--gate-headroom", type=float, default=DEFAULT_GATE_HEADROOM)
    ap.add_argument("--out", default=None, help="path prefix: writes <out>.json, <out>.md and <out>.curves.json")
    ap.add_argument("--doc", default=None, help="a page (docs/experiment.md) whose measured section is rewritten")
    a = ap.parse_args(argv)
    import re

    if not re.fullmatch(r"cpu|cuda(:\d+)?", a.device):
        print(f"experiment: --device must be cpu or cuda[:N], got {a.device!r}", file=sys.stderr)
        return 2
    if a.slots < 0:
        print(f"experiment: --slots must be 0 or more, got {a.slots}", file=sys.stderr)
        return 2
    for flag, path in (("--out", a.out), ("--doc", a.doc)):
        if path is not None and not Path(path).absolute().parent.is_dir():
            print(f"experiment: {flag} {path!r}: no such folder", file=sys.stderr)
            return 2
    load = os.getloadavg()[0]
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        report = run(a.device, a.pair, a.iterations, a.budgets, a.gate_headroom, say=say, budget_at=a.budget_at,
                     slots=a.slots or None)
    except UsageError as exc:
        print(f"experiment: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"experiment: {exc}", file=sys.stderr)
        return 1
    report["load_average"] = round(load, 1)
    text = markdown(report)
    if a.doc is not None:
        page = Path(a.doc).read_text() if Path(a.doc).exists() else ""
        words = list(argv if argv is not None else sys.argv[1:])
        if "--out" in words[:-1]:  # where this run's files went is no part of how to reproduce it
            words[words.index("--out") + 1] = "PREFIX"
        command = "python -m tools.bench.experiment " + " ".join(words)
        Path(a.doc).write_text(replace_section(page, section(report, command.strip())))
    if a.out is not None:
        out = Path(a.out)
        out.with_suffix(".json").write_text(json.dumps(report, indent=1))
        out.with_suffix(".md").write_text(text)
        Path(f"{a.out}.curves.json").write_text(json.dumps(report["curves"], indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
