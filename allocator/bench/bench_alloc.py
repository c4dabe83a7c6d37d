"""Allocator benchmark (prints figures; not a test): `python allocator/bench/bench_alloc.py`.

1. malloc/free pair latency over a log-uniform size mix (512 B .. 256 MiB), one and two threads:
   the Zico host pool (pool hits, after a warm-up pass) versus glibc malloc and PyTorch's default CPU
   allocator, all in the same run (bench_pairs.cpp, compiled here against the installed torch).
2. A CPU training step (GPT-2-style model from a transformers config) through the CPU shim versus
   torch's default CPU allocator, interleaved in the same process (ABAB blocks, medians).
Figures are printed as ratios against the baselines measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build_pairs_binary(out_dir: Path) -> Path:
    import torch
    from torch.utils import cpp_extension

    from zico_allocator import build

    core = build.ensure_core()
    torch_lib = Path(torch.__file__).parent / "lib"
    binary = out_dir / "bench_pairs"
    cmd = ["g++", "-std=c++17", "-O2", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
    cmd += [f"-I{build.SOURCE_DIR / 'include'}", str(HERE / "bench_pairs.cpp"), "-o", str(binary),
            f"-L{torch_lib}", "-lc10", f"-L{core.parent}", "-lzico_core", "-lpthread",
            f"-Wl,-rpath,{torch_lib}", f"-Wl,-rpath,{core.parent}"]
    subprocess.run(cmd, check=True)
    return binary


def pair_latency(pairs: int, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        binary = build_pairs_binary(Path(tmp))
        out = subprocess.run([str(binary), str(pairs), "9", "28", str(seed)], check=True, capture_output=True,
                             text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    timer = next(r for r in rows if r["allocator"] == "timer")
    rows = [r for r in rows if r["allocator"] != "timer"]
    print(f"\n## malloc/free pair latency, log-uniform 512 B .. 256 MiB, {pairs} pairs per thread (ns)")
    print(f"{'allocator':<20}{'threads':>8}{'p50':>10}{'p90':>10}{'p99':>11}{'p50 vs glibc':>14}{'p50 vs torch':>14}")
    for threads in (1, 2):
        base = {r["allocator"]: r for r in rows if r["threads"] == threads}
        for r in (r for r in rows if r["threads"] == threads):
            print(f"{r['allocator']:<20}{threads:>8}{r['p50_ns']:>10.0f}{r['p90_ns']:>10.0f}{r['p99_ns']:>11.0f}"
                  f"{r['p50_ns'] / base['glibc']['p50_ns']:>13.2f}x"
                  f"{r['p50_ns'] / base['torch_default_cpu']['p50_ns']:>13.2f}x")
    print(f"(inside every figure: the timer's two clock reads, alone p50 {timer['p50_ns']:.0f} ns, "
          f"p99 {timer['p99_ns']:.0f} ns)")


def training_step(rounds: int, steps: int) -> None:
    import threading

    import torch
    import transformers

    import zico_allocator as za

    za.install_cpu(scope="off")
    torch.set_num_threads(1)
    config = transformers.GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=256, n_positions=128,
                                     bos_token_id=0, eos_token_id=0)
    times = {"torch_default_cpu": [], "zico": []}

    def work():
        with za.bind(1):
            torch.manual_seed(0)
            model = transformers.GPT2LMHeadModel(config)
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            ids = torch.randint(0, 256, (8, 128))
            for r in range(2 * rounds + 1):
                name = "zico" if r % 2 else "torch_default_cpu"
                za.set_cpu_scope("bound" if name == "zico" else "off")
                for s in range(steps):
                    t0 = time.perf_counter()
                    loss = model(input_ids=ids, labels=ids).loss
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    if r > 0:  # round 0 warms both paths up
                        times[name].append(time.perf_counter() - t0)
        za.set_cpu_scope("off")

    t = threading.Thread(target=work)
    t.start()
    t.join()
    base = statistics.median(times["torch_default_cpu"])
    print(f"\n## training step (GPT-2-style, 2 layers, d=128, batch 8x128, 1 intra-op thread), ABAB x{rounds}")
    for name, ts in times.items():
        print(f"{name:<20} median {statistics.median(ts) * 1e3:8.2f} ms  over {len(ts)} steps"
              f"  ratio {statistics.median(ts) / base:.3f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20000, help="timed pairs per thread")
    parser.add_argument("--rounds", type=int, default=4, help="ABAB rounds of the training-step comparison")
    parser.add_argument("--steps", type=int, default=10, help="steps per round")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"# Zico allocator benchmark ({os.cpu_count()} CPUs visible)")
    pair_latency(args.pairs, args.seed)
    training_step(args.rounds, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
