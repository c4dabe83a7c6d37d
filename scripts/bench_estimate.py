"""Benchmark: ``manage.py curve estimate`` end to end (a subprocess each: interpreter, Django, imports,
estimate), for GPT-2 small 8 x 1024 and ResNet-50 64 x 224 on a CUDA target, against a 3 s target.

    python scripts/bench_estimate.py [--runs 3] [--baseline /path/to/older/checkout]

Per workload: ``--runs`` cold runs (``--no-cache``: everything imported and computed) and then as many
warm ones (the cache entry the cold runs wrote); with ``--baseline``, first as many runs of that
checkout's own ``manage.py`` (e.g. the code before these changes), so that the ratio to it is measured
under the same load. Prints each run's wall and CPU seconds and its ratio to the target. Two floors measured in the same run show how loaded the machine is: the interpreter
importing torch alone, and Django starting for ``manage.py curve list``. Run it with the project's
environment (PYTHONPATH, ZICO_VAR_DIR); nothing is timed inside the test suite.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 3.0
WORKLOADS = {
    "gpt2-small 8x1024": ["gpt2-small", "-p", "batch_size=8", "-p", "seq_len=1024"],
    "resnet50 64x224": ["resnet50", "-p", "batch_size=64", "-p", "image_size=224"],
}


def _env(root: Path) -> dict[str, str]:
    paths = os.pathsep.join(str(root / p) for p in ("platform", ".", "allocator/python"))
    return {**os.environ, "DEBUG": "1", "PYTHONPATH": paths}


def timed(argv: list[str], root: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one subprocess run in checkout ``root``; raises if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, cwd=root, env=_env(root), capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def report(label: str, wall: float, cpu: float) -> None:
    print(f"  {label:28s} {wall:6.2f} s wall ({wall / TARGET_S:4.2f}x target)  {cpu:6.2f} s CPU", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None, help="an older checkout to time first")
    args = ap.parse_args()
    manage = [sys.executable, str(ROOT / "manage.py")]
    print(f"target {TARGET_S:.1f} s per estimate; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("floors")
    report("python -c 'import torch'", *timed([sys.executable, "-c", "import torch"]))
    report("manage.py curve list", *timed([*manage, "curve", "list"]))
    for name, wl in WORKLOADS.items():
        print(name)
        base = []
        if args.baseline:
            for i in range(args.runs):
                base.append(timed([sys.executable, str(args.baseline / "manage.py"), "curve", "estimate", *wl,
                                   "--device", "cuda:0"], args.baseline))
                report(f"baseline {i + 1}", *base[-1])
        for kind, extra in (("cold (--no-cache)", ["--no-cache"]), ("warm (cache hit)", [])):
            for i in range(args.runs):
                wall, cpu = timed([*manage, "curve", "estimate", *wl, "--device", "cuda:0", *extra])
                report(f"{kind} {i + 1}", wall, cpu)
                if base:
                    best = min(w for w, _ in base)
                    print(f"  {'':28s} {best / wall:6.2f}x faster than the fastest baseline run")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
