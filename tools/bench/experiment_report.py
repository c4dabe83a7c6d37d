"""The real-run experiment's report (:mod:`.experiment`) as markdown: one row per pair, budget and mode.

Report fields: ``device``, ``iterations``, ``slots``, ``gate_headroom``, ``jobs`` (label -> job spec),
``profiles`` (label -> allocated ``peak_bytes``, ``persistent_bytes``, solo ``held_peak_bytes``,
``iteration_s``), ``shares`` (label -> ``solo_step_s``, ``colocated_step_s``, ``compute_share``, and the device
agent's own measurement over every run of the job, ``worker_share`` and ``worker_method``), ``rows``
(``pair``, ``budget_bytes``, ``sum_held_peaks_bytes``, ``floor_bytes``, ``modes``: mode -> a
:func:`.experiment_modes.run_mode` result), ``predictions`` (``pair``, ``job``, ``predicted``, ``measured``,
``error``, ``in_sample``, and ``predicted_worker``, ``error_worker`` with the worker's shares as they stood before
the row), ``wall_s``.
"""
from __future__ import annotations

from typing import Any

from .experiment_modes import MODES

MIB = 2**20
LETTERS = dict(zip(MODES, "abcd"))
# The measured section of docs/experiment.md starts here and runs to the end of the page: the experiment's
# ``--doc`` rewrites it, scripts/experiment.py (the simulated tables above it) keeps it.
MEASURED_HEADING = "## Measured: real job processes on this machine"
PREAMBLE = """Every figure in this section is measured: real training jobs, each its own process under a device
agent, memory from the agent pool, on the real clock (everything above it is simulated: real curves, virtual
clock, an assumed compute share). (a) sequential: one job alone, then the other; (b) uncoordinated: both at
once, no coordinator, each job caching for itself (the allocator client in place of torch's own, so that the
limit counts the same bytes), the pool's capacity equal to the budget and no waiting for room, so a request past the
budget fails with torch's OutOfMemoryError (a hard limit, like a GPU whose memory is the budget; not a cgroup
limit, which would count each process's interpreter and torch too, not the bytes the budget is about); (c) time
slicing: one iteration in flight at a time, alternating, the waiting job's cache free for the running one;
(d) Zico: the coordinator gates every iteration start, planning held-byte curves (each job's allocated curve
raised by its solo pool overhead and held at its peak from its backward mark: Note [One planning rule] in
placement.gating, the rule the device worker and `python -m tools.colocate` use too), the agent pool enforces the budget (capacity halfway
from the budget to the sum of held peaks: room for the deadlock rule, whose grants past the budget are the
budget violations). Budgets run from the sum of the jobs' solo held peaks (chunks the pool granted each alone)
down to the least budget Zico's gate can plan. Throughput: (a)'s makespan over the mode's (the same iterations;
the jobs' first iterations start together once both are ready, startup excluded). The compute shares are
measured twice: by the experiment (step time alone and beside an identical copy, stored in each curve's meta),
and by the device agent's meter in every run, as in production (compute time beside the neighbours, gate waits
excluded, and CPU time while alone; Note [Measured compute share] in placement.compute_share), combined over the
runs as the control consumer stores them."""


def throughput_vs_sequential(row: dict[str, Any], mode: str) -> float | None:
    """(a)'s makespan over ``mode``'s (both ran the same iterations); None when either has none (a failure)."""
    seq, r = row["modes"]["sequential"]["makespan_s"], row["modes"][mode]["makespan_s"]
    return None if not seq or not r else seq / r


def mode_cells(row: dict[str, Any], mode: str) -> list[str]:
    """The table cells of one mode in one row: throughput vs (a), makespan s, peak MiB, OOM, violations, delay s."""
    r = row["modes"][mode]
    thr = throughput_vs_sequential(row, mode)
    failed = f"{r['oom_failures']} of {len(r['jobs'])} OOM" if r["oom_failures"] else (
        f"{r['failures']} failed" if r["failures"] else "0")
    return [f"({LETTERS[mode]}) {mode}", "-" if thr is None else f"{thr:.2f}x",
            "-" if r["makespan_s"] is None else f"{r['makespan_s']:.2f}", f"{r['peak_bytes'] / MIB:.1f}", failed,
            str(r["budget_violations"]), f"{r['gate_delay_s']:.2f}"]


def section(report: dict[str, Any], command: str) -> str:
    """The measured section of docs/experiment.md: heading, what is measured, the command, the tables."""
    return (f"{MEASURED_HEADING}\n\n{PREAMBLE}\n\nProduced by `{command}` in {report['wall_s'] / 60:.1f} minutes "
            f"(load average {report.get('load_average', '?')} at the start, on 2 cores shared with other work).\n\n"
            + markdown(report))


def replace_section(page: str, text: str) -> str:
    """``page`` with its measured section (MEASURED_HEADING to the end) replaced by ``text``, or ``text``
    appended when it has none."""
    head, found, _ = page.partition(MEASURED_HEADING)
    return (head.rstrip() + "\n\n" if found or head.strip() else "") + text


def measured_section(page: str) -> str:
    """The measured section of ``page`` (MEASURED_HEADING to the end), or "" when it has none."""
    return page[page.index(MEASURED_HEADING):] if MEASURED_HEADING in page else ""


def markdown(report: dict[str, Any]) -> str:
    m = lambda b: f"{b / MIB:.1f}"  # noqa: E731
    out = [f"Device {report['device']}; {report['iterations']} iterations per job per run; "
           + (f"{report['slots']} CPU slots (each job its slot's cores and threads, as a device worker's); "
              if report.get("slots") else "no CPU slots (torch's threads on every core); ")
           + "Zico's gate: held-byte curves "
           f"(placement.gating.planning_curve) against {1 - report['gate_headroom']:.2f} x budget. Wall time {report['wall_s']:.0f} s.", "",
           "| job | spec | peak allocated MiB | persistent MiB | solo held peak MiB | step alone ms | "
           "step beside a copy ms | compute share | worker's share |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k, p in report["profiles"].items():
        s = report["shares"][k]
        worker = f"{s['worker_share']:.2f} ({s['worker_method']})" if "worker_share" in s else "-"
        out.append(f"| {k} | `{report['jobs'][k]}` | {m(p['peak_bytes'])} | {m(p['persistent_bytes'])} | "
                   f"{m(p['held_peak_bytes'])} | {s['solo_step_s'] * 1000:.0f} | {s['colocated_step_s'] * 1000:.0f} | "
                   f"{s['compute_share']:.2f} | {worker} |")
    out += ["", "| pair | budget MiB | budget / sum of held peaks | mode | throughput vs (a) | makespan s | "
            "peak held MiB | failed (OOM) | budget violations | gate delay s |",
            "|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for row in report["rows"]:
        ratio = row["budget_bytes"] / row["sum_held_peaks_bytes"]
        for mode in MODES:
            out.append(f"| {row['pair']} | {m(row['budget_bytes'])} | {ratio:.2f} | " + " | ".join(mode_cells(row, mode))
                       + " |")
    out += ["", "Floors (least budget Zico's gate can plan): "
            + "; ".join(sorted({f"{r['pair']} {m(r['floor_bytes'])} MiB of {m(r['sum_held_peaks_bytes'])}"
                                for r in report["rows"]})) + ".", "",
            "Slowdown predicted with the measured compute shares against the slowdown measured (alone: the same "
            "row's (a), run just before): in (b), the contention model max(1, sum of shares) against the median "
            "iteration beside the partner over the median alone; in (d), the scheduler's plan "
            "(placement.groups.plan_group, held-byte curves, measured shares) against the job's run time over its "
            "run time alone (gate delays included); and the same predictions with the worker's shares as they stood "
            "before the row (the device agent's measurements of every earlier run, combined):", "",
            "| pair | budget MiB | mode | job | measured | predicted | error | predicted, worker's shares | error |",
            "|---|---:|---|---|---:|---:|---:|---:|---:|"]
    for p in report["predictions"]:
        note = " (in sample)" if p["in_sample"] else ""
        mode = p.get("mode", "uncoordinated")
        w, we = p.get("predicted_worker"), p.get("error_worker")
        out.append(f"| {p['pair']} | {m(p['budget_bytes'])} | ({LETTERS[mode]}) | {p['job']} | {p['measured']:.2f} | "
                   f"{p['predicted']:.2f} | {p['error'] * 100:+.0f} %{note} | {'-' if w is None else f'{w:.2f}'} | "
                   f"{'-' if we is None else f'{we * 100:+.0f} %'} |")
    errors = [(abs(p["error"]), abs(p["error_worker"])) for p in report["predictions"]
              if p.get("error_worker") is not None and not p["in_sample"]]
    if errors:
        out += ["", f"Mean absolute error of the predictions above (in-sample rows left out): "
                    f"{sum(e for e, _ in errors) / len(errors) * 100:.0f} % with the experiment's shares, "
                    f"{sum(w for _, w in errors) / len(errors) * 100:.0f} % with the worker's (n = {len(errors)})."]
    failures = [(row["pair"], mode, j["label"], j["reason"]) for row in report["rows"]
                for mode, r in row["modes"].items() for j in r["jobs"] if j["status"] != "succeeded"]
    if failures:
        out += ["", "Failures (first line of each reason):", ""]
        seen = set()
        for pair, mode, label, reason in failures:
            line = (reason or "").strip().splitlines()[0][:200] if reason else ""
            if (mode, label, line) not in seen:
                seen.add((mode, label, line))
                out.append(f"- {pair}, ({LETTERS[mode]}) {mode}, {label}: {line}")
    return "\n".join(out) + "\n"
