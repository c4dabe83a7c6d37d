"""Figures of the job-overhead benchmark (:mod:`.job_overhead`): per-step times, their spread, the ratios.

Input, per arm, one record per round: ``{"ends": [[t_s, cpu_ns, wait_ns], ...], "process_cpu_ns": N,
"agent_cpu_ns": N}`` — the training thread's readings at each iteration end of the round, and the CPU time the
arm's process (and, for arm A, the agent's process) used over the round. A step is the interval between two
consecutive ends of a round (so a round of k iterations gives k - 1 steps; its first iteration, which follows
the other arms' turn, is never one). Per step: ``wall`` (s), ``wait`` (the training thread's wait for a CPU, s)
and ``wall - wait`` (what the step took less the machine's other work). Ratios are of medians over all kept
steps, and per round (each arm's round median against the other arm's in the same round).
"""
from __future__ import annotations

import statistics
from typing import Any

ARMS = ("A", "B", "C")
ARM_NAMES = {"A": "job process (agent)", "B": "plain process", "C": "in-process thread"}


def steps(rounds: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """Per round, the steps' ``wall``, ``busy`` (wall - wait) and ``cpu`` (training thread) in seconds."""
    out: dict[str, list[list[float]]] = {"wall": [], "busy": [], "cpu": []}
    for r in rounds:
        e = r["ends"]
        pairs = list(zip(e, e[1:]))
        out["wall"].append([b[0] - a[0] for a, b in pairs])
        out["busy"].append([(b[0] - a[0]) - (b[2] - a[2]) / 1e9 for a, b in pairs])
        out["cpu"].append([(b[1] - a[1]) / 1e9 for a, b in pairs])
    return out


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def summarize(times: dict[str, list[dict[str, Any]]], warmup_rounds: int) -> dict[str, Any]:
    """Medians (s), IQRs and ratios over the rounds after the first ``warmup_rounds``."""
    kept = {arm: rounds[warmup_rounds:] for arm, rounds in times.items()}
    out: dict[str, Any] = {"rounds": len(kept["A"]), "arms": {}}
    for arm, rounds in kept.items():
        st = steps(rounds)
        iterations = sum(len(r["ends"]) for r in rounds)
        arm_out: dict[str, Any] = {"steps": sum(len(r) for r in st["wall"])}
        for what, per_round in st.items():
            flat = [x for r in per_round for x in r]
            q1, med, q3 = quartiles(flat)
            arm_out[what] = {"median_s": med, "q1_s": q1, "q3_s": q3,
                             "round_medians_s": [statistics.median(r) for r in per_round]}
        arm_out["process_cpu_s_per_iteration"] = sum(r["process_cpu_ns"] for r in rounds) / 1e9 / iterations
        arm_out["agent_cpu_s_per_iteration"] = sum(r.get("agent_cpu_ns", 0) for r in rounds) / 1e9 / iterations
        out["arms"][arm] = arm_out
    a = out["arms"]["A"]
    for other in ("B", "C"):
        o = out["arms"][other]
        ratios: dict[str, Any] = {}
        for what in ("wall", "busy"):
            per_round = [x / y for x, y in zip(a[what]["round_medians_s"], o[what]["round_medians_s"])]
            q1, med, q3 = quartiles(per_round)
            ratios[what] = {"ratio": a[what]["median_s"] / o[what]["median_s"], "per_round_median": med,
                            "per_round_q1": q1, "per_round_q3": q3}
        ratios["cpu"] = {"ratio": (a["process_cpu_s_per_iteration"] + a["agent_cpu_s_per_iteration"])
                         / o["process_cpu_s_per_iteration"]}
        out[f"A/{other}"] = ratios
    return out


def _ms(x: float) -> str:
    return f"{x * 1e3:.1f}"


def lines(results: list[dict[str, Any]], header: dict[str, Any]) -> list[str]:
    """The printed report: a header, then per workload a table of the arms and the ratio lines."""
    out = [f"# Job-process overhead on {header['device']} (torch {header['torch']}, {header['cpus']} CPUs, "
           f"intra-op threads: {header['threads'] or 'torch default'}): {header['rounds']} measured rounds of "
           f"{header['steps']} iterations per arm, interleaved A B C / C B A",
           f"# excluded: the first {header['warmup_rounds']} round(s) of every arm (warm-up) and the first iteration "
           "of every round (it follows the other arms' turn)",
           f"# load average at the start {header['load_start']}, at the end {header.get('load_end', '?')}; "
           "wall-wait = a step's wall time less its training thread's wait for a CPU", ""]
    for res in results:
        s = res["summary"]
        out += [f"## {res['job']}" + (f" (arm A's memory: {res['pool']})" if res.get("pool") else ""),
                f"{'arm':<24}{'wall ms (IQR)':>24}{'wall-wait ms (IQR)':>24}{'thread CPU ms':>15}"
                f"{'process CPU ms/it':>19}{'steps':>7}"]
        for arm in ARMS:
            a = s["arms"][arm]
            cols = [f"{_ms(a[w]['median_s'])} ({_ms(a[w]['q1_s'])}-{_ms(a[w]['q3_s'])})" for w in ("wall", "busy")]
            cpu = _ms(a["process_cpu_s_per_iteration"])
            if arm == "A":
                cpu += f" +{_ms(a['agent_cpu_s_per_iteration'])} agent"
            out.append(f"{arm + ' ' + ARM_NAMES[arm]:<24}{cols[0]:>24}{cols[1]:>24}{_ms(a['cpu']['median_s']):>15}"
                       f"{cpu:>19}{a['steps']:>7}")
        for other in ("B", "C"):
            r = s[f"A/{other}"]
            parts = [f"{label} {r[w]['ratio']:.3f}x (per round: median {r[w]['per_round_median']:.3f}x, IQR "
                     f"{r[w]['per_round_q1']:.3f}-{r[w]['per_round_q3']:.3f}x)"
                     for w, label in (("wall", "wall"), ("busy", "wall-wait"))]
            out.append(f"A/{other}: " + "; ".join(parts) + f"; CPU {r['cpu']['ratio']:.3f}x; {s['rounds']} rounds"
                       + ("  [target <= 1.03x]" if other == "B" else ""))
        out.append("")
    return out
