"""Co-locate real training jobs in this process under a budget below the sum of their peaks, and report.

The device worker's machinery without Redis or a database, for the GPU check script and for benchmarks:
the shared allocator installed first, each job profiled alone (its allocator-trace curve: solo peak and
iteration time), then all jobs run together — one thread each (CUDA: its own stream), bound in the
allocator, gated by the coordinator — under ``budget = fraction x sum of solo peaks`` (at least the group's
minimal feasible budget). Figures, as in the demo: per-job peaks, the pool's peak reserved against the sum
of solo peaks and the budget, delays imposed, and throughput against solo.

    python -m workers.colocate --device cuda:0 --job resnet50:batch_size=64 \
        --job gpt2-small:batch_size=8,seq_len=1024 --iterations 30 --out var/gpu-check/colocate
"""
from __future__ import annotations

import argparse
import gc
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .gate import Gate


class _NoStops:
    """Nothing cancels a local run."""

    def stop_requested(self, job_id, placement):
        return None


def parse_job(text: str) -> tuple[str, dict[str, Any]]:
    """``'resnet50:batch_size=64,data=synthetic'`` -> ``('resnet50', {'batch_size': 64, 'data': 'synthetic'})``.
    Raises ValueError naming the bad part."""
    key, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        name, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"job {text!r}: expected name=value, got {item!r}")
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
    if not key:
        raise ValueError(f"job {text!r}: missing the workload key")
    return key, params


def solo_profile(key: str, params: dict[str, Any], device: str, data_dir, job_id: int, warmup: int = 1,
                 steady: int = 3):
    """Profile one job alone through the installed allocator: ``(curve, peak reserved bytes)``.

    The curve (allocated bytes, workers.curves.capture) gives the solo peak and iteration time; the
    reserved peak adds the pool's block rounding and segments, which a budget must also cover."""
    import zico_allocator as za

    from workers.curves.capture import profile_curve

    adev = "cpu" if device == "cpu" else int(device.partition(":")[2] or 0)
    gc.collect()
    za.empty_cache(device=adev)
    za.reset_peak_memory_stats(device=adev)
    curve = profile_curve(key, {**params, "iterations": warmup + steady}, device=device, data_dir=data_dir,
                          warmup=warmup, steady=steady, job_id=job_id)
    reserved = int(za.memory_stats(device=adev)["reserved_bytes.all.peak"])  # the pool's, with this job alone
    return curve, max(reserved, int(curve.peak_bytes))


def feasible_floor(curves, reserved_peaks: list[int], margin: float = 1.05) -> int:
    """Least budget (bytes) under which each job can run its iteration with the others idle, counting the
    pool's overhead: ``margin x max_i(reserved_peak_i + sum_{j != i} persistent_j)`` (the gating rule's
    minimal feasible budget, Note [Gating rule] in placement.gating, with reserved instead of allocated peaks).
    """
    persistent = sum(c.persistent_bytes for c in curves)
    return int(margin * max(r + persistent - c.persistent_bytes for c, r in zip(curves, reserved_peaks)))


def _install(za, device: str, capacity: int | None) -> Any:
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        za.install_cuda(index)
        return index
    za.install_cpu(capacity)
    return "cpu"


def run(jobs: list[tuple[str, dict[str, Any]]], device: str = "cpu", iterations: int = 20,
        budget_fraction: float = 0.8, capacity: int | None = None, data_dir: str | Path | None = None,
        warmup: int = 1, steady: int = 3, gate_headroom: float = 0.15) -> dict[str, Any]:
    """Profile each job alone, then run them together under the budget; returns the report dict.

    Raises ValueError for a bad fraction, catalog errors for bad jobs, zico_allocator.ZicoError if the
    allocator cannot be installed.
    """
    import torch
    import zico_allocator as za
    from placement.coordinator import Coordinator
    from workers.workloads.catalog import validate_params
    from workers.workloads.models import preload_data
    from workers.workloads.training import create_training_job

    from .runner import RunMarks, RunSpec
    from .device import JobState

    if not 0 < budget_fraction <= 1:
        raise ValueError(f"budget_fraction must lie in (0, 1], got {budget_fraction}")
    adev = _install(za, device, capacity)
    curves, solo = [], []
    for n, (key, params) in enumerate(jobs, start=1):
        c, reserved_peak = solo_profile(key, params, device, data_dir, 1000 + n, warmup, steady)
        curves.append(c)
        solo.append({"workload": key, "params": params, "peak_bytes": int(c.peak_bytes),
                     "persistent_bytes": int(c.persistent_bytes), "iteration_s": c.iteration_s,
                     "peak_reserved_bytes_solo": reserved_peak})
    solo_sum = sum(c.peak_bytes for c in curves)
    # The gate plans below the budget (Note [Gate headroom]); the floor leaves it room to co-run the jobs.
    floor = feasible_floor(curves, [s["peak_reserved_bytes_solo"] for s in solo]) / (1 - gate_headroom)
    budget = int(max(budget_fraction * solo_sum, floor))
    gc.collect()  # the profiled models hold reference cycles; free them before the budget applies
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    za.empty_cache(device=adev)
    leftover = int(za.memory_stats(device=adev)["reserved_bytes.all.current"])
    za.set_budget(budget, device=adev)
    za.reset_peak_memory_stats(device=adev)
    # Note [Gate headroom] (workers.device): the coordinator plans with allocated bytes below the budget
    rt = SimpleNamespace(coordinator=Coordinator((1 - gate_headroom) * budget), link=_NoStops(), allocator=za,
                         alloc_device=adev)
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []
    barrier = threading.Barrier(len(jobs))

    def one(job_id: int, key: str, params: dict[str, Any], curve) -> None:
        try:
            p = {**params, "iterations": iterations}
            preload_data(validate_params(key, p), data_dir)
            spec = RunSpec(job_id, key, p, placement=None, curve=curve.to_dict())
            gate = Gate(rt, spec)
            stream = torch.cuda.Stream() if device.startswith("cuda") else None
            ctx = torch.cuda.stream(stream) if stream is not None else _null()
            with ctx, za.bind(job_id):
                job = create_training_job(key, p, device=device, data_dir=data_dir)
                state = JobState(job_id=job_id, iterations=iterations)
                marks = RunMarks(rt, state, gate)
                gate.join(job_id)
                barrier.wait()
                t0, delay = time.perf_counter(), 0.0
                for i in range(iterations):
                    delay += gate.wait(job_id, i)
                    job.run_iteration(i, marks)
                if stream is not None:
                    stream.synchronize()
                took = time.perf_counter() - t0
                gate.leave(job_id)
                st = za.memory_stats(job=job_id, device=adev)
                results[job_id] = {"iterations": iterations, "seconds": took, "iterations_per_s": iterations / took,
                                   "delay_s": delay, "peak_allocated_bytes": int(st["allocated_bytes.all.peak"]),
                                   "peak_reserved_bytes": int(st["reserved_bytes.all.peak"]),
                                   **{k: v for k, v in job.metrics().items() if k in ("loss", "train_accuracy")}}
                del job
        except Exception as exc:  # reported, never hidden
            oom = za.last_oom(device=adev)
            errors.append(f"job {job_id} ({key}): {type(exc).__name__}: {exc}"
                          + (f" [allocator: {json.dumps(oom)}]" if oom else ""))
            barrier.abort()

    threads = [threading.Thread(target=one, args=(n, key, params, c), name=f"job-{n}")
               for n, ((key, params), c) in enumerate(zip(jobs, curves), start=1)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    pool = za.memory_stats(device=adev)
    delays = rt.coordinator.delays
    report = {
        "device": device, "torch": torch.__version__, "iterations": iterations, "budget_bytes": budget,
        "budget_fraction": budget_fraction, "minimal_feasible_budget_bytes": int(floor),
        "sum_solo_peaks_bytes": int(solo_sum), "reserved_before_bytes": leftover, "pool_peak_reserved_bytes": int(pool["reserved_bytes.all.peak"]),
        "pool_peak_allocated_bytes": int(pool["allocated_bytes.all.peak"]), "wall_s": wall, "errors": errors,
        "delays": {"count": len(delays), "total_ms": sum(d.delay_ms for d in delays)},
        "jobs": [],
    }
    for n, s in enumerate(solo, start=1):
        r = results.get(n, {})
        solo_ips = 1.0 / s["iteration_s"]
        report["jobs"].append({**s, **r, "solo_iterations_per_s": solo_ips,
                               "throughput_vs_solo": (r["iterations_per_s"] / solo_ips) if r else None})
    report["peak_within_budget"] = report["pool_peak_reserved_bytes"] <= budget
    report["peak_vs_sum_of_solo_peaks"] = report["pool_peak_reserved_bytes"] / solo_sum
    return report


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def markdown(report: dict[str, Any]) -> str:
    """The report as a markdown table (bytes in MiB)."""
    m = lambda b: "n/a" if b is None else f"{b / 2**20:,.1f}"  # noqa: E731
    lines = [f"# Co-located training on {report['device']} (torch {report['torch']})", "",
             f"- budget: {m(report['budget_bytes'])} MiB = {report['budget_fraction']:.2f} x sum of solo peaks "
             f"({m(report['sum_solo_peaks_bytes'])} MiB; feasible floor {m(report['minimal_feasible_budget_bytes'])} MiB)",
             f"- pool peak reserved: {m(report['pool_peak_reserved_bytes'])} MiB "
             f"({report['peak_vs_sum_of_solo_peaks']:.2f} x sum of solo peaks; within budget: "
             f"{'yes' if report['peak_within_budget'] else 'NO'})",
             f"- delays imposed by the coordinator: {report['delays']['count']} "
             f"({report['delays']['total_ms'] / 1000:.2f} s in all); wall {report['wall_s']:.1f} s", "",
             "| job | solo peak MiB | peak allocated MiB (co-located) | solo it/s | co-located it/s | vs solo | delay s | loss |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for j in report["jobs"]:
        lines.append(f"| {j['workload']} | {m(j['peak_bytes'])} | {m(j.get('peak_allocated_bytes'))} | "
                     f"{j['solo_iterations_per_s']:.2f} | {j.get('iterations_per_s', 0):.2f} | "
                     f"{(j.get('throughput_vs_solo') or 0):.2f} | {j.get('delay_s', 0):.2f} | {j.get('loss', float('nan')):.3f} |")
    if report["errors"]:
        lines += ["", "Errors:", *[f"- {e}" for e in report["errors"]]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from .nvml import parse_bytes

    ap = argparse.ArgumentParser(prog="python -m workers.colocate", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--job", action="append", required=True, type=parse_job,
                    help="workload[:name=value,...], repeat for each job")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--budget-fraction", type=float, default=0.8)
    ap.add_argument("--capacity", type=parse_bytes, default=None, help="CPU pool capacity (cpu only)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", required=True, help="path prefix: writes <out>.json and <out>.md")
    a = ap.parse_args(argv)
    report = run(a.job, a.device, a.iterations, a.budget_fraction, a.capacity, a.data_dir)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    ok = not report["errors"] and report["peak_within_budget"] and all(j.get("iterations_per_s") for j in report["jobs"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
