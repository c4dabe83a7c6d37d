"""Benchmark: how well the CPU estimate predicts a real run's allocator-trace curve, and how long
estimates of large workloads take. Prints figures; writes the markdown table of docs/curve-accuracy.md.

    .venv/bin/python -m workers.curves.accuracy --out docs/curve-accuracy.md

For every catalog workload at a small size it runs a real profiling run through the Zico allocator
(CPU shim) and the fake-tensor estimate, and compares them (``workers.curves.compare``); a second
real profiling run, compared with the first, measures how far the reference reproduces itself. Torch
runs with one intra-op thread (``--threads``) so that other processes on a shared machine
distort the real run's timing less. Not a test: the figures depend on the machine.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

SMALL = (
    ("digits-cnn", {}),
    ("tiny-lm", {}),
    ("resnet18", {"batch_size": 4, "image_size": 64}),
    ("resnet50", {"batch_size": 2, "image_size": 64}),
    ("bert-base", {"batch_size": 2, "seq_len": 64}),
    ("gpt2-small", {"batch_size": 2, "seq_len": 64}),
)
LARGE = (
    ("gpt2-small", {"batch_size": 8, "seq_len": 1024}, "cuda:0"),
    ("resnet50", {"batch_size": 64, "image_size": 224}, "cuda:0"),
)


def _mib(b: float) -> str:
    return f"{b / 2**20:,.1f}"


def run(threads: int, data_dir: str, steady: int = 3, device: str = "cpu") -> tuple[list[dict], list[dict]]:
    import torch

    from placement.curves import max_relative_error
    from workers.curves.capture import profile_trace
    from workers.curves.compare import compare, max_error_binned, max_error_within_shift
    from zico_workloads.curves.estimate import estimate_curve
    from zico_workloads.curves.trace import steady_iteration_curves, trace_curve

    torch.set_num_threads(threads)
    rows = []
    for key, params in SMALL:
        trace = profile_trace(key, params, device, data_dir, iterations=1 + steady)
        real = trace_curve(trace, warmup=1, meta={"workload": key})
        first, *_, last = steady_iteration_curves(trace, warmup=1)
        # a second profiling run, averaged the same way: how far the reference reproduces itself
        again = trace_curve(profile_trace(key, params, device, data_dir, iterations=1 + steady), warmup=1)
        noise = {"real_vs_real_max_error": max_relative_error(first, last),
                 "real_vs_real_binned": max_error_binned(first, last),
                 "real_vs_real_within_2pct_shift": max_error_within_shift(first, last, 0.02),
                 "run_vs_run_max_error": max_relative_error(real, again),
                 "run_vs_run_binned": max_error_binned(real, again),
                 "run_vs_run_within_2pct_shift": max_error_within_shift(real, again, 0.02)}
        t0 = time.perf_counter()
        est = estimate_curve(key, params, device, data_dir, warmup=1, steady=2)
        est_s = time.perf_counter() - t0
        row = {"key": key, "params": params, "real": real, "est": est, "estimate_s": est_s, **compare(est, real),
               **noise}
        rows.append(row)
        print(f"{key:11s} peak real {_mib(real.peak_bytes)} MiB est {_mib(est.peak_bytes)} MiB "
              f"({row['peak_error']:+.2%}); max error {row['max_error']:.1%}, phase-aligned "
              f"{row['max_error_phase_aligned']:.1%}, within 2 % shift {row['max_error_within_2pct_shift']:.1%}, "
              f"256 bins {row['max_error_binned']:.1%}; "
              f"real iteration vs real iteration {noise['real_vs_real_max_error']:.1%}; real run vs real run "
              f"{noise['run_vs_run_max_error']:.1%}; estimate {est_s:.1f} s",
              flush=True)
    timing = []
    for key, params, target in LARGE:
        t0 = time.perf_counter()
        est = estimate_curve(key, params, target, data_dir)
        secs = time.perf_counter() - t0
        timing.append({"key": key, "params": params, "device": target, "seconds": secs, "curve": est})
        print(f"estimate {key} {params} for {target}: {secs:.1f} s, peak {_mib(est.peak_bytes)} MiB", flush=True)
    return rows, timing


def _phases(curve) -> str:
    f = curve.meta.get("phase_fractions") or {}
    return ", ".join(f"{f[k]:.2f}" if k in f else "?" for k in ("backward", "optimizer"))


def markdown(rows: list[dict], timing: list[dict], threads: int, device: str = "cpu") -> str:
    import torch

    lines = [
        "| workload | params | real peak MiB | estimate peak MiB | peak error | real persistent MiB | "
        "estimate persistent MiB | max error | max error, phase-aligned | max error, 2 % shift allowed | "
        "max error, 256 bins | "
        "real vs real: max error (2 % shift; 256 bins) | second real run: max error (2 % shift; 256 bins) | "
        "backward, optimizer start: real (estimate) | real iteration s | modelled iteration s | estimate wall s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "defaults"
        lines.append(
            f"| {r['key']} | {p} | {_mib(r['real'].peak_bytes)} | {_mib(r['est'].peak_bytes)} | "
            f"{r['peak_error']:+.2%} | {_mib(r['real'].persistent_bytes)} | {_mib(r['est'].persistent_bytes)} | "
            f"{r['max_error']:.1%} | {r['max_error_phase_aligned']:.1%} | {r['max_error_within_2pct_shift']:.1%} | "
            f"{r['max_error_binned']:.1%} | "
            f"{r['real_vs_real_max_error']:.1%} ({r['real_vs_real_within_2pct_shift']:.1%}; {r['real_vs_real_binned']:.1%}) | "
            f"{r['run_vs_run_max_error']:.1%} ({r['run_vs_run_within_2pct_shift']:.1%}; {r['run_vs_run_binned']:.1%}) | "
            f"{_phases(r['real'])} ({_phases(r['est'])}) | {r['real'].iteration_s:.3f} | "
            f"{r['est'].iteration_s:.3f} | {r['estimate_s']:.1f} |")
    lines += ["", "| estimate | target | wall seconds | estimated peak MiB |", "|---|---|---:|---:|"]
    for t in timing:
        p = ", ".join(f"{k}={v}" for k, v in t["params"].items())
        lines.append(f"| {t['key']} ({p}) | {t['device']} | {t['seconds']:.1f} | {_mib(t['curve'].peak_bytes)} |")
    lines += ["", f"real runs on {device}, torch {torch.__version__}, {threads} intra-op thread(s), {rows[0]['real'].meta.get('iterations_averaged')}"
              " real steady iterations averaged (digits-cnn), "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--data-dir", default=None, help="data directory (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    ap.add_argument("--save", type=Path, default=None, help="write every curve as JSON into this folder")
    ap.add_argument("--steady", type=int, default=3, help="real steady iterations averaged (default 3)")
    ap.add_argument("--device", default="cpu",
                    help="where the real runs go and what the estimates target (default cpu; cuda:0 on a GPU host)")
    args = ap.parse_args(argv)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="zico-accuracy-")
    rows, timing = run(args.threads, data_dir, args.steady, args.device)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        for r in rows:
            (args.save / f"{r['key']}-real.json").write_text(r["real"].to_json())
            (args.save / f"{r['key']}-estimate.json").write_text(r["est"].to_json())
    table = markdown(rows, timing, args.threads, args.device)
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
