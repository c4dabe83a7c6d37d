"""Predicted against measured slowdown of co-located catalog jobs with a CPU device's per-slot compute share.

    python -m tools.bench.slowdown_table [--group digits-cnn+tiny-lm ...] [--runs 3] [--iterations 12]
        [--slots N]

For every group (pairs and triples of the experiment's CPU jobs, ``tools.bench.experiment.CPU_JOBS``, and of
plain user scripts, ``SCRIPT_JOBS``: examples/plain-scripts, run as jobs with code are) and
every run: the jobs one after the other, then all at once, each a job process under a device agent with
``--slots`` slots (default: the group's size, as a device worker admitting the group has; its slot's cores and
threads: Note [Compute per slot] in zico_contracts.cpushare), at a
budget no job can reach (2 GiB: no gating, so the slowdown is compute alone). Measured: a job's median
iteration while every job still iterated over its median alone in the same run
(``experiment_modes.colocated_slowdowns``); predicted: the contention model the scheduler plans with,
``max(1, sum of the group's shares)`` (placement.compute_share.predicted_slowdown), each share the one the
agent's meter measured for the job alone in that run (its utilisation of the device's cores). Printed as a
Markdown table, one row per job and run, then the median error per group. Bad input: one line on stderr, exit
status 2.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from placement.compute_share import DEFAULT_COMPUTE_SHARE, predicted_slowdown, relative_error

from tools.colocate import parse_job
from .experiment import CPU_JOBS
from .experiment_modes import Job, colocated_slowdowns, run_mode

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "plain-scripts"
# plain PyTorch scripts a user might submit (no Zico import), each taking --steps
# the sizes the table was measured with (docs/experiment.md); ``--steps`` is appended per run
SCRIPT_JOBS = {"mlp-script": ["python", "mlp_adam.py", "--features", "512", "--hidden", "1536", "--batch", "256"],
               "lstm-script": ["python", "lstm_clip_sgd.py", "--hidden", "160", "--seq", "60", "--batch", "32"]}
BUDGET = 2 << 30  # above any of these jobs' groups: nothing gated, nothing refused
DEFAULT_GROUPS = ["digits-cnn+tiny-lm", "resnet18+tiny-lm", "mlp-script+lstm-script", "mlp-script+tiny-lm",
                  "digits-cnn+tiny-lm+resnet18", "mlp-script+lstm-script+digits-cnn"]


class UsageError(ValueError):
    """Bad command-line input; the message names it."""


def parse_groups(texts: list[str]) -> list[list[str]]:
    """``"A+B[+C]"`` -> job names, each among CPU_JOBS. Raises UsageError naming the bad group."""
    out = []
    for t in texts:
        names = t.split("+")
        if len(names) < 2 or any(n not in CPU_JOBS and n not in SCRIPT_JOBS for n in names):
            raise UsageError(f"--group {t!r}: expected A+B[+C...] of {', '.join([*CPU_JOBS, *SCRIPT_JOBS])}")
        out.append(names)
    return out


def measure(names: list[str], iterations: int, slots: int | None = None) -> list[dict]:
    """One run of a group: per job ``{"job", "predicted", "measured"}`` (None where a figure is missing)."""
    jobs = [Job(n, {}, f"{n}#{i}", str(SCRIPTS), tuple(SCRIPT_JOBS[n])) if n in SCRIPT_JOBS
            else Job(*parse_job(CPU_JOBS[n]), f"{n}#{i}") for i, n in enumerate(names)]
    slots = slots or len(names)
    alone = run_mode("sequential", jobs, BUDGET, iterations=iterations, slots=slots)
    together = run_mode("uncoordinated", jobs, BUDGET, iterations=iterations, slots=slots)
    shares = [(j["compute_share"] or {}).get("share") or DEFAULT_COMPUTE_SHARE for j in alone["jobs"]]
    predicted = predicted_slowdown(shares)
    measured = colocated_slowdowns(together, [j["step_s"] for j in alone["jobs"]])
    return [{"job": n, "predicted": predicted, "measured": m, "share": s}
            for n, m, s in zip(names, measured, shares)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.slowdown_table", description=__doc__.splitlines()[0])
    ap.add_argument("--group", action="append", default=None, help="A+B[+C] of the job names (repeat)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--slots", type=int, default=None,
                    help="the CPU device's slots (the worker's --slots; default: the group's size)")
    a = ap.parse_args(argv)
    try:
        groups = parse_groups(a.group or DEFAULT_GROUPS)
        if a.runs < 1 or a.iterations < 4 or (a.slots is not None and a.slots < 1):
            raise UsageError("--runs >= 1, --iterations >= 4 and --slots >= 1 expected")
    except UsageError as exc:
        print(f"slowdown_table: {exc}", file=sys.stderr)
        return 2
    print(f"| group | run | job | share alone | predicted | measured | error |\n|---|---|---|---|---|---|---|", flush=True)
    errors: dict[str, list[float]] = {}
    for names in groups:
        label = "+".join(names)
        for r in range(1, a.runs + 1):
            for row in measure(names, a.iterations, a.slots):
                m = row["measured"]
                err = relative_error(row["predicted"], m) if m else None
                if err is not None:
                    errors.setdefault(label, []).append(err)
                print(f"| {label} | {r} | {row['job']} | {row['share']:.2f} | {row['predicted']:.2f} | "
                      f"{'n/a' if m is None else f'{m:.2f}'} | {'n/a' if err is None else f'{err:+.0%}'} |", flush=True)
    for label, errs in errors.items():
        print(f"{label}: median error {statistics.median(errs):+.0%}, largest {max(errs, key=abs):+.0%} "
              f"over {len(errs)} job runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
