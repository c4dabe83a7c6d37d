"""Benchmark: ``manage.py curve estimate`` end to end (a subprocess each: interpreter, Django, imports,
estimate, exit), for GPT-2 small 8 x 1024 and ResNet-50 64 x 224 on a CUDA target, against a 3 s target.

    python scripts/bench_estimate.py [--runs 3] [--baseline /path/to/older/checkout] [--only gpt2|resnet50]

Per workload, ``--runs`` cold runs (``--no-cache``: everything imported and computed), then as many
warm ones (cache hits: the entry the cold runs wrote). With ``--baseline`` (an older checkout, e.g.
``git archive bc75623 | tar -x -C /tmp/base``), each run of this checkout comes right after the same
run of that checkout's ``manage.py``, cold and warm alike, so that both see the same load, and its
wall and CPU times are printed as ratios to the baseline's (below 1: faster). Each line gives wall and CPU seconds (user +
system of the child) and the wall time against the target. The 1-minute load average is printed at
the start, after each workload and at the end, and three floors measured in the same run show what the
load does to any Python start-up: the interpreter importing torch alone, Django starting for
``manage.py curve list``, and the imports a GPT-2 estimate needs before its first operator (a floor
no cold GPT-2 estimate goes below); every later line also gives its CPU time as a multiple of the
first floor's (``import torch``), a figure the load moves less than seconds. Run it with the
project's environment (PYTHONPATH, ZICO_VAR_DIR); each checkout gets its own cache folder under
ZICO_VAR_DIR. Nothing is timed inside the test suite.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
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

# What a cold GPT-2 estimate imports before its first operator (torch; torch._dynamo, which FakeTensorMode
# and transformers' masking code import; transformers' GPT-2), in a bare interpreter, as the command imports
# it (no garbage collection): no estimate can be faster.
IMPORTS_OF_GPT2 = ("import gc, os; gc.disable(); "
                   "from torch._subclasses.fake_tensor import FakeTensorMode; FakeTensorMode(); "
                   "import transformers.models.gpt2.modeling_gpt2; import zico_workloads.curves.estimate; os._exit(0)")


def _env(root: Path, cache: Path) -> dict[str, str]:
    paths = os.pathsep.join(str(root / p) for p in ("platform", ".", "allocator/python"))
    return {**os.environ, "DEBUG": "1", "PYTHONPATH": paths, "ZICO_ESTIMATE_CACHE_DIR": str(cache)}


def timed(argv: list[str], root: Path = ROOT, cache: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one subprocess run in checkout ``root`` with estimate
    cache folder ``cache``; raises SystemExit if it fails."""
    cache = cache or _cache_dir(root)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, cwd=root, env=_env(root, cache), capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cache_dir(root: Path) -> Path:
    var = Path(os.environ.get("ZICO_VAR_DIR", "var"))
    return var / "bench-estimate-cache" / ("this" if root == ROOT else "baseline")


def _load() -> str:
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


FLOOR: dict[str, float] = {}  # `python -c 'import torch'`, this run: {"wall": s, "cpu": s}


def report(label: str, wall: float, cpu: float, base: tuple[float, float] | None = None) -> None:
    ratio = f"  {wall / base[0]:5.2f}x the baseline's wall ({cpu / base[1]:4.2f}x its CPU)" if base else ""
    floor = f"  {cpu / FLOOR['cpu']:4.1f}x import torch's CPU" if FLOOR else ""
    print(f"  {label:24s} {wall:6.2f} s wall ({wall / TARGET_S:4.2f}x target)  {cpu:6.2f} s CPU{floor}{ratio}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None, help="an older checkout, timed before each run")
    ap.add_argument("--only", choices=("gpt2", "resnet50"), default=None, help="one workload")
    args = ap.parse_args()
    print(f"target {TARGET_S:.1f} s per estimate; {_load()}")
    print("floors")
    wall, cpu = timed([sys.executable, "-c", "import torch"])
    report("python -c 'import torch'", wall, cpu)
    FLOOR.update(wall=wall, cpu=cpu)
    report("manage.py curve list", *timed([sys.executable, str(ROOT / "manage.py"), "curve", "list"]))
    report("imports of a GPT-2 estimate", *timed([sys.executable, "-c", IMPORTS_OF_GPT2]))
    checkouts = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [("this", ROOT)]
    for name, wl in WORKLOADS.items():
        if args.only and not name.startswith(args.only):
            continue
        print(name)
        walls: dict[tuple[str, str], list[float]] = {}
        for kind, extra in (("cold", ["--no-cache"]), ("warm", [])):
            for i in range(args.runs):
                base = None
                for label, root in checkouts:
                    argv = [sys.executable, str(root / "manage.py"), "curve", "estimate", *wl, "--device", "cuda:0",
                            *extra]
                    wall, cpu = timed(argv, root)
                    walls.setdefault((label, kind), []).append(wall)
                    report(f"{label} {kind} {i + 1}", wall, cpu, base if label == "this" else None)
                    base = (wall, cpu)
        for kind in ("cold", "warm"):
            this = statistics.median(walls[("this", kind)])
            line = f"  median {kind}: {this:.2f} s wall ({'under' if this < TARGET_S else 'OVER'} the target)"
            if args.baseline:
                line += f", baseline {statistics.median(walls[('baseline', kind)]):.2f} s"
            print(line)
        print(f"  {_load()}")
    print(f"{_load()} at the end")


if __name__ == "__main__":
    main()
