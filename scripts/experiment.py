"""Zico's experiment (ATC 2021, sect. 6) on our simulator: two co-located training jobs under a
range of memory budgets, run (a) sequentially, (b) with naive spatial sharing, (c) with
iteration-level time slicing and (d) with Zico's coordinator; prints a markdown table of
throughput relative to solo and peak memory, and writes docs/experiment.md with --out.

    .venv/bin/python scripts/experiment.py --out docs/experiment.md

Curves: the real GPU snapshots in tests/curves/data (xz-compressed; importer
zico_workloads.curves.snapshot), plus CPU estimates of catalog workloads for an H100-class target
(zico_workloads.curves.estimate; skipped with --no-estimates). The executor is placement.device_sim
with the contention model stated in the table's header (compute share per job, an input).
"""
from __future__ import annotations

import argparse
import lzma
import math
import sys
import time
from pathlib import Path

from placement.curves import MemoryCurve, resampled_curve
from placement.device_sim import DeviceRun, TimeSlicingGate, UngatedGate
from placement.gating import minimal_feasible_budget
from placement.groups import plan_group
from placement.state import Job

SNAPSHOTS = Path(__file__).resolve().parents[1] / "tests" / "curves" / "data"
GIB = 2**30
POINTS = 512  # curve steps kept per iteration (bin maxima: no peak is lost)


def load_curves(estimates: bool) -> dict[str, MemoryCurve]:
    """Named curves: real snapshots first, then estimates of catalog workloads."""
    from zico_workloads.curves.snapshot import snapshot_curve

    out = {}
    for name, f in [("lm-A (snapshot)", "lm-fullstep-a.pickle"), ("lm-B ctx128 (snapshot)", "lm-ctx128-fullstep-b.pickle")]:
        if (SNAPSHOTS / f"{f}.xz").exists():
            out[name] = resampled_curve(snapshot_curve(lzma.decompress((SNAPSHOTS / f"{f}.xz").read_bytes())), POINTS)
    if estimates:
        from zico_workloads.curves.estimate import estimate_curve

        # synthetic data: the memory curve depends on shapes, not on the values
        for key, params in [("resnet50", {"batch_size": 32}), ("bert-base", {"batch_size": 8, "seq_len": 128}),
                            ("gpt2-small", {"batch_size": 8, "seq_len": 256})]:
            params = {**params, "data": "synthetic"}
            c = estimate_curve(key, params, device="cuda")
            out[f"{key} (estimate)"] = resampled_curve(c, POINTS)
    return out


def run_pair(a: MemoryCurve, b: MemoryCurve, budget: float, gate: str, share: float, solo_s: float) -> dict:
    """One pair under one budget and one gate; figures for the table."""
    n = [max(2, math.ceil(solo_s / c.iteration_s)) for c in (a, b)]
    work = sum(k * c.iteration_s for k, c in zip(n, (a, b)))
    if gate == "sequential":
        peak = max(a.peak_bytes, b.peak_bytes)
        return {"peak": peak, "thr": 1.0, "ok": peak <= budget}
    jobs = [Job(i, "t", c, iterations=k, compute_share=share) for i, (c, k) in enumerate(zip((a, b), n))]
    if gate == "zico" and plan_group(jobs, budget) is None:
        return {"peak": minimal_feasible_budget([a, b]), "thr": 0.0, "ok": False}
    g = {"naive": UngatedGate(), "slicing": TimeSlicingGate(), "zico": None}[gate]
    run = DeviceRun(budget, g)
    for j in jobs:
        run.add_job(j)
    run.run_until_idle()
    end = max(v[2] for v in run.stats.finished.values())
    return {"peak": run.stats.peak_bytes, "thr": work / end, "ok": run.stats.violations == 0 and not run.jobs}


def cell(r: dict) -> str:
    if not r["ok"]:
        return f"OOM (needs {r['peak'] / GIB:.2f})"
    return f"{r['thr']:.2f}x / {r['peak'] / GIB:.2f}"


def table(curves: dict[str, MemoryCurve], share: float, solo_s: float) -> list[str]:
    names = list(curves)
    pairs = [(n, n) for n in names] + [(names[i], names[j]) for i in range(len(names)) for j in range(i + 1, len(names))]
    rows = ["| pair | budget GiB | budget / sum of peaks | (a) sequential | (b) naive spatial | (c) time slicing | (d) Zico |",
            "|---|---:|---:|---|---|---|---|"]
    for x, y in pairs:
        a, b = curves[x], curves[y]
        total = a.peak_bytes + b.peak_bytes
        lo = minimal_feasible_budget([a, b])
        # from the sum of peaks (no sharing needed) down to the least budget any sharing can use
        budgets = [lo + f * (total - lo) for f in (1.0, 0.75, 0.5, 0.25)] + [lo * 1.001]
        for budget in budgets:
            cells = [cell(run_pair(a, b, budget, g, share, solo_s)) for g in ("sequential", "naive", "slicing", "zico")]
            label = f"{x} + {y}" if x != y else f"2 x {x}"
            rows.append(f"| {label} | {budget / GIB:.2f} | {budget / total:.2f} | " + " | ".join(cells) + " |")
    return rows


def cluster_table(curves: dict[str, MemoryCurve], share: float, n_jobs: int = 30, n_devices: int = 4,
                  budget_gib: float = 54.0, seed: int = 1) -> list[str]:
    """A job trace on a small simulated cluster, one row per policy and gate."""
    import random

    from placement.policies import FirstFitFifo, MemoryAware
    from placement.simulator import Arrival, simulate
    from placement.state import Device, Tenant

    rng = random.Random(seed)
    names = list(curves)
    trace, t = [], 0.0
    for i in range(n_jobs):
        t += rng.expovariate(1 / 4.0)  # a job every 4 s on average
        name = rng.choice(names)
        c = curves[name]
        iters = max(2, int(rng.uniform(10, 40) / c.iteration_s))  # 10-40 s alone
        trace.append(Arrival(t, Job(i, "ab"[i % 2], c, submitted_s=t, iterations=iters, compute_share=share,
                                    curve_key=name)))
    devices = [Device(f"gpu{i}", budget_gib * GIB) for i in range(n_devices)]
    tenants = {x: Tenant(x, allow_cross_tenant=True) for x in "ab"}
    rows = [f"{n_jobs} jobs drawn from the curves above, a job every 4 s on average, each 10-40 s alone; "
            f"{n_devices} devices with a {budget_gib:g} GiB budget; seed {seed}.", "",
            "| policy | gate | makespan s | mean JCT s | peak / budget | violations | slowdown mean | slowdown max |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    for policy, gate in [(FirstFitFifo(), "zico"), (MemoryAware(), "zico"), (MemoryAware(), "naive"),
                         (MemoryAware(), "slicing")]:
        r = simulate(trace, devices, tenants, policy, gate=gate).summary()
        rows.append(f"| {r['policy']} | {r['gate']} | {r['makespan_s']:.1f} | {r['mean_jct_s']:.1f} | "
                    f"{r['peak_over_budget']:.3f} | {r['violations']} | {r['slowdown_mean']:.2f} | {r['slowdown_max']:.2f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compute-share", type=float, default=0.6,
                    help="fraction of the device each job uses alone (contention model), default 0.6")
    ap.add_argument("--solo-s", type=float, default=20.0, help="solo run time of each job, seconds")
    ap.add_argument("--no-estimates", action="store_true", help="real snapshot curves only")
    ap.add_argument("--out", type=Path, help="also write the markdown page here (e.g. docs/experiment.md)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    curves = load_curves(not args.no_estimates)
    if not curves:
        print("no curves found (snapshots missing and --no-estimates)", file=sys.stderr)
        return 1
    head = [f"Compute share per job: {args.compute_share} (two jobs iterating together run at "
            f"1/max(1, {2 * args.compute_share:.1f}) of solo speed); each job alone would run {args.solo_s:.0f} s.",
            "", "Curves:", ""]
    for name, c in curves.items():
        head.append(f"- {name}: peak {c.peak_bytes / GIB:.2f} GiB, persistent {c.persistent_bytes / GIB:.2f} GiB, "
                    f"iteration {c.iteration_s * 1000:.1f} ms ({c.source})")
    rows = table(curves, args.compute_share, args.solo_s)
    sim = cluster_table(curves, args.compute_share)
    text = "\n".join(head + [""] + rows + ["", "## The same curves on a simulated cluster", ""] + sim)
    print(text)
    print(f"\n({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.out:
        cmd = "scripts/experiment.py " + " ".join(argv if argv is not None else sys.argv[1:])
        from tools.bench.experiment_report import measured_section

        # the measured section (tools.bench.experiment --doc) runs from its heading to the end: kept
        measured = measured_section(args.out.read_text()) if args.out.exists() else ""
        args.out.write_text(PAGE.format(cmd=cmd.strip(), body=text) + ("\n" + measured if measured else ""))
    return 0


PAGE = """# Zico's experiment: two co-located jobs under a memory budget

Two parts: the **simulated** tables first (real curves, a virtual clock, an assumed compute share), then the
**measured** section at the end ("Measured: real job processes on this machine", written by
`python -m tools.bench.experiment --doc docs/experiment.md`).

The simulated part is produced by `.venv/bin/python {cmd}` (everything from "Compute share" up to the measured section is its output, unedited; it took about a minute on 2 shared cores).

Each cell: aggregate throughput relative to running the two jobs one after the other at solo
speed (sum of solo run times / makespan), then the device's peak memory in GiB. **OOM**: the
mode exceeds the budget (naive sharing: the allocator would fail an allocation; Zico/time
slicing: the budget is below one job's peak plus its partner's persistent bytes, the least any
sharing needs). (a) sequential runs one job, then the other (peak: the larger peak); (b) naive
spatial sharing runs both at once with no coordination; (c) time slicing lets one iteration run
at a time, alternating; (d) Zico gates every iteration start with the coordinator
(placement.coordinator), the same code the GPU worker runs. Simulated with placement.device_sim
(virtual clock, exact memory accounting at every step of every curve); see docs/placement.md.

{body}

Reading the tables: with a budget at the sum of peaks, naive sharing and Zico both run the jobs
concurrently. Below it, naive sharing runs out of memory while Zico keeps the budget by shifting
iterations (its peak never exceeds the budget), down to the least budget any sharing can use,
where it degrades towards time slicing. The coordinator sees each job's forward pass as holding its
peak (placement.pacing, as the GPU worker does), so a job whose peak comes at the end of its
iteration (lm-B) runs beside another only where both peaks fit. On the cluster, the memory-aware
policy with Zico's coordinator co-locates jobs without a single budget violation; the same
placements without coordination (naive gate) exceed the budget wherever a plan needed time shifts
(the violations column); FIFO runs one job per device. Slowdown is run time
over solo run time (queueing excluded; JCT includes it). Real GPU figures depend on the compute
share, which must be measured on the GPU host (NVML utilisation of each job alone).
"""

if __name__ == "__main__":
    sys.exit(main())
