"""Co-locate real training jobs, each its own process, under a budget below the sum of their peaks, and report.

The device worker's machinery without Redis or a database, for the GPU check script and for benchmarks:
each job profiled alone, then all jobs run together, each profiled and run exactly as a device worker does it
(tools.jobpath: the catalog project under the job process entry, its own process, in its sandbox where the
host has one; the profile's allocator-trace curve gives the solo peak, held peak and iteration time) under
one device agent (:mod:`workers.agent`: the agent pool, memfd chunks on CPU and VMM chunks on CUDA), gated by one
coordinator planning with the device worker's rule (Note [One planning rule] in placement.gating) — under ``budget = fraction x sum of solo peaks`` (at least the least budget that
rule can plan, ``placement.gating.held_floor``; the report says which applied), their first iterations
released together once every job is ready (startup is not what is shared). A job that fails (crash,
error) is recorded with its ``status`` and reason; the others run on. Figures, as in the demo: per-job peaks,
the pool's peak reserved against the sum of solo reserved peaks and the budget, time waited at the gate,
throughput against solo, and the bytes one job process returned that the agent granted to another; per job
its process's ``pid`` and ``status``. The run must show sharing, or the exit status is 1 and stderr says what
is missing (:func:`verdict`): every job succeeded, the pool's peak within the budget, the budget below the sum
of the solo reserved peaks, bytes moved between the processes. Bad input (job specs, flags) is refused before
anything runs: one line on stderr, exit status 2.

    python -m tools.colocate --device cuda:0 --job resnet50:batch_size=64 \
        --job gpt2-small:batch_size=8,seq_len=1024 --iterations 30 --out var/gpu-check/colocate
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


class UsageError(ValueError):
    """Bad input (a job spec, a flag's value): the message names it. ``main`` prints it and exits 2."""


class ColocateError(RuntimeError):
    """The run could not go on (a job failed while profiled alone, ...). ``main`` prints it and exits 1."""


PROFILE_CAPACITY_BYTES = 8 << 30  # the pool each job is profiled alone in, without --capacity (a CPU pool grows
#                                  to it chunk by chunk; a GPU's is the device's memory)
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
def parse_job(text: str) -> tuple[str, dict[str, Any]]:
    """``'resnet50:batch_size=64,data=synthetic'`` -> ``('resnet50', {'batch_size': 64, 'data': 'synthetic'})``.
    Raises ValueError naming the bad part."""
    key, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        name, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"job {text!r}: expected name=value, got {item!r}")
        if not name:
            raise ValueError(f"job {text!r}: missing the parameter name in {item!r}")
        if name in params:
            raise ValueError(f"job {text!r}: parameter {name!r} given twice")
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
    if not key:
        raise ValueError(f"job {text!r}: missing the workload key")
    return key, params


def check_inputs(jobs: list[tuple[str, dict[str, Any]]], device: str = "cpu", iterations: int = 20,
                 budget_fraction: float = 0.8, capacity: int | None = None,
                 data_dir: str | Path | None = None) -> None:
    """Refuse bad input before anything runs: raises UsageError naming the problem.

    Job keys and params go through the catalog's own validation (``validate_params``); a per-job
    ``iterations`` param is refused (``--iterations`` applies to every job). Whether a CUDA device is
    visible is left to ``run`` (asking torch here could initialise CUDA before the allocator installs)."""
    from zico_workloads.catalog import ParamsError, UnknownWorkload, validate_params
    from zico_workloads.corpus import DEFAULT_CORPUS

    if not jobs:
        raise UsageError("give at least one --job")
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise UsageError(f"--device must be cpu or cuda[:N], got {device!r}")
    if (isinstance(budget_fraction, bool) or not isinstance(budget_fraction, (int, float))
            or not math.isfinite(budget_fraction) or not 0 < budget_fraction <= 1):
        raise UsageError(f"--budget-fraction must be a number in (0, 1], got {budget_fraction}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise UsageError(f"--iterations must be an integer >= 1, got {iterations}")
    if capacity is not None:
        if device != "cpu":
            raise UsageError("--capacity applies to --device cpu only (a GPU's pool is bounded by its memory)")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise UsageError(f"--capacity must be a positive byte size, got {capacity}")
    for n, (key, params) in enumerate(jobs, start=1):
        name = f"job {key!r}" if len(jobs) == 1 else f"job {n} ({key!r})"
        if "iterations" in params:
            raise UsageError(f"{name}: a per-job iterations parameter is not supported; use --iterations "
                             "(it applies to every job)")
        try:
            merged = validate_params(key, {**params, "iterations": iterations})
            if "corpus" in merged and merged.get("data") == "real":
                if data_dir is None:
                    raise UsageError(f"{name}: real text data needs --data-dir (or the param data=synthetic)")
                if merged["corpus"] != DEFAULT_CORPUS:  # the default corpus is written on first use
                    validate_params(key, params, data_dir)
        except UnknownWorkload as exc:
            raise UsageError(f"{name}: {exc}") from None
        except ParamsError as exc:
            if exc.field == "iterations":
                raise UsageError(f"--iterations {exc.message}") from None
            raise UsageError(f"{name}: {exc}") from None


def run(jobs: list[tuple[str, dict[str, Any]]], device: str = "cpu", iterations: int = 20,
        budget_fraction: float = 0.8, capacity: int | None = None, data_dir: str | Path | None = None,
        warmup: int = 1, steady: int = 3, gate_headroom: float | None = None, agent_settings=None,
        threads: int | None = None) -> dict[str, Any]:
    """Profile each job alone, then run them together under the budget; returns the report dict.

    Each job's curve is stored with its solo held peak as the device worker stores a profile
    (``placement.gating.with_held_peak``), and the gate plans it as the device worker does, with
    ``placement.gating.planning_curve`` (Note [One planning rule]) against ``(1 - gate_headroom) x budget``,
    ``gate_headroom`` None meaning ``placement.gating.DEFAULT_GATE_HEADROOM``; the floor is
    ``placement.gating.held_floor``. The
    co-located pool's capacity is ``capacity`` when given, else (CPU) halfway from the budget to the sum of
    the solo reserved peaks: room for the deadlock rule, still below that sum. ``threads`` (CPU): intra-op
    threads of every job process, profiles included (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``), None leaving torch's
    default. Whether the run showed sharing (budget below that sum, bytes moved between the processes) is
    :func:`verdict`'s.

    Raises UsageError (a ValueError) for bad input, before anything runs (``check_inputs``), and also when
    the device cannot be used or a job runs out of a ``capacity``-bounded CPU pool while profiled alone;
    ColocateError when the allocator's shim cannot be built or a job fails while profiled alone for
    another reason. A job failing while
    co-located is recorded in the report's ``errors``.
    """
    check_inputs(jobs, device, iterations, budget_fraction, capacity, data_dir)
    intra_op_threads = threads if device == "cpu" else None  # (``threads`` names the job threads below)
    if threads is not None and device == "cpu":  # before torch starts its thread pool; job processes inherit it
        os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    import torch
    from placement.coordinator import Coordinator
    from placement.gating import DEFAULT_GATE_HEADROOM, gate_share, held_floor, planning_curve
    from workers.agent import DeviceAgent
    from zico_workloads.catalog import ParamsError, UnknownWorkload

    from tools import jobpath
    from tools.bench.experiment_modes import ExperimentAgent, Timeline
    from workers.agent.sandbox import CATALOG_PROJECT

    work = Path(tempfile.mkdtemp(prefix="zico-colocate-"))
    # Each job profiled alone as a device worker profiles it (tools.jobpath): its own process, the catalog
    # project under the job process entry, its curve from the allocator trace with the pool's held peak
    profile_capacity = capacity if capacity is not None else PROFILE_CAPACITY_BYTES
    try:
        profiler = DeviceAgent(device, profile_capacity if device == "cpu" else None, profile_capacity,
                               None, agent_settings)
    except Exception as exc:  # the device asked for cannot be used here (not visible, no CUDA upstream, ...)
        if capacity is not None and device == "cpu":
            raise UsageError(f"--capacity {capacity} bytes is too small for the device agent's pool: {exc}") from None
        raise UsageError(f"--device {device}: the device agent cannot hold its pool: {exc}") from None
    curves, solo = [], []
    try:
        prt = jobpath.runtime(profiler, work, data_dir)
        for n, (key, params) in enumerate(jobs, start=1):
            try:
                c, out = jobpath.profile(prt, 1000 + n, key, params, warmup, steady)
            except jobpath.JobPathError as exc:
                if capacity is not None and "out of memory" in exc.reason:
                    raise UsageError(f"--capacity {capacity} bytes is too small: job {n} ({key}) ran out of the "
                                     f"CPU pool while profiled alone ({exc.reason})") from None
                raise ColocateError(f"job {n} ({key}) failed while profiled alone: {exc.reason}") from None
            except (ParamsError, UnknownWorkload, OSError) as exc:
                raise ColocateError(f"job {n} ({key}) failed while profiled alone: {type(exc).__name__}: "
                                    f"{exc}") from None
            curves.append(c)
            held = int(c.meta.get("held_peak_bytes") or c.peak_bytes)
            solo.append({"workload": key, "params": params, "peak_bytes": int(c.peak_bytes),
                         "persistent_bytes": int(c.persistent_bytes), "iteration_s": c.iteration_s,
                         "peak_reserved_bytes_solo": max(held, int(c.peak_bytes))})
    finally:
        profiler.close()
    solo_sum = sum(c.peak_bytes for c in curves)
    if gate_headroom is None:  # Note [One planning rule] in placement.gating
        gate_headroom = DEFAULT_GATE_HEADROOM
    stored = curves  # each carries its held peak, as a stored profile does (placement.gating.with_held_peak)
    floor = held_floor([planning_curve(c) for c in stored], gate_headroom)  # the least budget the gate can plan
    budget = int(max(budget_fraction * solo_sum, floor))
    # The co-located run: one device agent holding the pool (the agent pool on CPU), each job its own process
    # run as a device worker runs it (tools.jobpath), gated by one coordinator planning each job's planning
    # curve below the budget. The agent holds every job's first iteration until all are ready (as the real-run
    # experiment's does): a job that imports and builds faster would otherwise run much of its course alone,
    # and nothing is shared.
    reserved_sum = sum(s["peak_reserved_bytes_solo"] for s in solo)
    pool_capacity = capacity if capacity is not None else max(budget, (budget + reserved_sum) // 2)
    agent = ExperimentAgent(device, pool_capacity if device == "cpu" else None, budget,
                            Coordinator(gate_share(gate_headroom) * budget), agent_settings)
    agent.expect(range(1, len(jobs) + 1))
    rt = jobpath.runtime(agent, work, data_dir)
    lines = {n: Timeline() for n in range(1, len(jobs) + 1)}
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []

    def one(job_id: int, key: str, params: dict[str, Any], curve) -> None:
        try:
            out = jobpath.run(rt, job_id, key, {**params, "iterations": iterations}, curve.to_dict(),
                              on_message=lines[job_id].on_message)
        except Exception as exc:  # the process could not be launched: reported, never hidden
            errors.append(f"job {job_id} ({key}): {type(exc).__name__}: {exc}")
            results[job_id] = {"status": "failed", "pid": None}
            return
        finally:
            agent.ended(job_id)  # its place in the group's start is freed, whatever happened
        m = out["metrics"]
        r: dict[str, Any] = {"pid": out["pid"], "status": out["status"]}
        ends = lines[job_id].ends
        # from the group's release to the job's last iteration end (its startup and the others' excluded)
        seconds = ends[-1] - agent.released_at if ends and agent.released_at is not None else m.get("train_s", 0.0)
        if out["status"] == "succeeded":
            r.update({"iterations": iterations, "seconds": round(seconds, 3),
                      "iterations_per_s": round(iterations / seconds, 4) if seconds > 0 else None,
                      "delay_s": m["delay_s"], "gate_waits": m["delays"],
                      "peak_allocated_bytes": int(m["peak_allocated_bytes"]),
                      "peak_reserved_bytes": int(m["peak_reserved_bytes"]),
                      **{k: v for k, v in m.items() if k in ("loss", "train_accuracy")}})
        else:
            r["reason"] = out["reason"]
            errors.append(f"job {job_id} ({key}): {out['status']}: {out['reason']}")
        results[job_id] = r

    threads = [threading.Thread(target=one, args=(n, key, params, c), name=f"job-{n}")
               for n, ((key, params), c) in enumerate(zip(jobs, stored), start=1)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    pool = agent.pool.stats()
    native = agent.pool.native.stats()["pool"] if agent.pool.native is not None else {}
    pool_kind = "agent" if agent.pool.shared else "per-process"
    agent.close()
    shutil.rmtree(work, ignore_errors=True)
    delays = agent.coordinator.delays
    solo_reserved_sum = sum(s["peak_reserved_bytes_solo"] for s in solo)
    report = {
        "device": device, "torch": torch.__version__, "iterations": iterations, "budget_bytes": budget,
        "budget_fraction": budget_fraction, "minimal_feasible_budget_bytes": int(floor),
        "capacity_bytes": int(pool_capacity) if device == "cpu" else None, "gate_headroom": gate_headroom,
        "planning": "placement.gating.planning_curve of each stored curve",
        "agent_pid": os.getpid(),  # this process holds the device agent; each job's ``pid`` is its own process
        # the module every job process runs, as a run_job on a device worker (tools.jobpath)
        "job_process": agent.settings.script_module, "catalog_project": str(CATALOG_PROJECT),
        # which rule set the budget: the fraction of the solo peaks, or the feasible floor above it
        "fraction_budget_bytes": int(budget_fraction * solo_sum),
        "budget_source": "feasible_floor" if floor > budget_fraction * solo_sum else "fraction",
        "sum_solo_reserved_peaks_bytes": int(solo_reserved_sum),
        "sum_solo_peaks_bytes": int(solo_sum), "pool_peak_reserved_bytes": int(pool["peak_reserved"]),
        "pool_peak_allocated_bytes": int(pool["peak_allocated"]), "pool": pool_kind, "wall_s": wall, "errors": errors,
        # reuse across processes: chunks one job process returned that the agent then granted to another
        "transfer_bytes": pool.get("transfer_bytes"), "transfers": pool.get("transfers"),
        # grants past the budget by the agent's deadlock rule (docs/allocator.md); None with per-process pools
        "deadlock_grants": native.get("deadlock_grants"), "threads": intra_op_threads,
        # "delays": the coordinator's own delay records (an iteration held back by the sharing plan);
        # "gate_waits": all the time the jobs waited at the gate (the per-job delay_s summed), which also
        # counts each job's first iteration waiting for the others' to end (Note [Warm-up iteration] in placement/pacing.py)
        "delays": {"count": len(delays), "total_ms": sum(d.delay_ms for d in delays)},
        "gate_waits": {"count": sum(r.get("gate_waits", 0) for r in results.values()),
                       "total_s": sum(r.get("delay_s", 0.0) for r in results.values())},
        "jobs": [],
    }
    for n, s in enumerate(solo, start=1):
        r = results.get(n, {})
        solo_ips = 1.0 / s["iteration_s"]
        report["jobs"].append({**s, **r, "solo_iterations_per_s": solo_ips,
                               "throughput_vs_solo": (r["iterations_per_s"] / solo_ips) if r.get("iterations_per_s")
                               else None})
    report["peak_within_budget"] = report["pool_peak_reserved_bytes"] <= budget
    report["peak_vs_sum_of_solo_peaks"] = report["pool_peak_reserved_bytes"] / solo_sum  # reserved vs allocated
    report["peak_vs_sum_of_solo_reserved_peaks"] = report["pool_peak_reserved_bytes"] / solo_reserved_sum
    report["budget_below_sum_of_solo_reserved_peaks"] = budget < solo_reserved_sum
    report["problems"] = verdict(report)
    return report


def verdict(report: dict[str, Any]) -> list[str]:
    """What keeps ``report`` (from :func:`run`) from showing jobs sharing one pool below the sum of their
    peaks, one sentence each (empty: it shows it): a job that did not succeed; the pool's peak reserved bytes
    over the budget; a budget not below the sum of the solo reserved peaks (nothing had to be shared); no
    bytes moved between the job processes (``transfer_bytes`` 0, or None with per-process pools)."""
    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    out = []
    for n, j in enumerate(report["jobs"], start=1):
        if j.get("status") != "succeeded":
            out.append(f"job {n} ({j['workload']}) ended {j.get('status')}: {j.get('reason', 'not launched')}")
    if report["pool_peak_reserved_bytes"] > report["budget_bytes"]:
        out.append(f"the pool's peak reserved bytes ({mib(report['pool_peak_reserved_bytes'])}) exceeded the budget "
                   f"({mib(report['budget_bytes'])})")
    reserved_sum = report["sum_solo_reserved_peaks_bytes"]
    if report["budget_bytes"] >= reserved_sum:
        out.append(f"the budget ({mib(report['budget_bytes'])}, {report.get('budget_source', 'fraction')}) is not "
                   f"below the sum of the jobs' solo reserved peaks ({mib(reserved_sum)}): they did not have to "
                   "share (the least budget the gate can plan for them is "
                   f"{mib(report['minimal_feasible_budget_bytes'])})")
    if not report.get("transfer_bytes"):
        how = ("each job process had a pool of its own (no agent pool on this device)"
               if report.get("transfer_bytes") is None else "no chunk one job process returned went to another")
        out.append(f"no bytes moved between the job processes: {how}")
    return out


def _budget_line(report: dict[str, Any], m) -> str:
    frac = report["budget_fraction"]
    solo = m(report["sum_solo_peaks_bytes"])
    fraction_budget = report.get("fraction_budget_bytes", int(frac * report["sum_solo_peaks_bytes"]))
    if report.get("budget_source", "fraction") == "feasible_floor":
        return (f"- budget: {m(report['budget_bytes'])} MiB (the feasible floor; {frac:.2f} x sum of solo peaks "
                f"({solo} MiB) would be {m(fraction_budget)} MiB)")
    return (f"- budget: {m(report['budget_bytes'])} MiB = {frac:.2f} x sum of solo peaks ({solo} MiB); "
            f"feasible floor {m(report['minimal_feasible_budget_bytes'])} MiB")


def markdown(report: dict[str, Any]) -> str:
    """The report as a markdown table (bytes in MiB)."""
    m = lambda b: "n/a" if b is None else f"{b / 2**20:,.1f}"  # noqa: E731
    jobs = report["jobs"]
    reserved_sum = report.get("sum_solo_reserved_peaks_bytes")
    if reserved_sum is None:
        reserved_sum = sum(j["peak_reserved_bytes_solo"] for j in jobs)
    waits = report.get("gate_waits") or {"count": sum(j.get("gate_waits", 0) for j in jobs),
                                         "total_s": sum(j.get("delay_s", 0.0) for j in jobs)}
    ratio = (f"{report['pool_peak_reserved_bytes'] / reserved_sum:.2f} x sum of solo reserved peaks "
             f"({m(reserved_sum)} MiB)") if reserved_sum else "no solo reserved peaks"
    lines = [f"# Co-located training on {report['device']} (torch {report['torch']})", "",
             _budget_line(report, m),
             f"- pool peak reserved: {m(report['pool_peak_reserved_bytes'])} MiB "
             f"({ratio}; within budget: {'yes' if report['peak_within_budget'] else 'NO'})",
             f"- waited at the gate: {waits['total_s']:.2f} s in all, {waits['count']} iteration(s) waited >= 1 ms "
             f"(the delay s column summed, first iterations waiting for the others' included); "
             f"coordinator delay records: {report['delays']['count']} ({report['delays']['total_ms'] / 1000:.2f} s)",
             f"- pool capacity: {m(report.get('capacity_bytes'))} MiB; gate headroom {report.get('gate_headroom')}; "
             f"reuse across processes: {m(report.get('transfer_bytes'))} MiB in {report.get('transfers')} chunk "
             "transfers (chunks one job process returned, granted to another); grants past the budget (deadlock "
             f"rule): {report.get('deadlock_grants')}",
             f"- wall {report['wall_s']:.1f} s", "",
             "| job | solo peak MiB | solo reserved peak MiB | peak allocated MiB (co-located) | solo it/s "
             "| co-located it/s | vs solo | delay s | loss |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for j in jobs:
        lines.append(f"| {j['workload']} | {m(j['peak_bytes'])} | {m(j.get('peak_reserved_bytes_solo'))} | "
                     f"{m(j.get('peak_allocated_bytes'))} | "
                     f"{j['solo_iterations_per_s']:.2f} | {j.get('iterations_per_s', 0):.2f} | "
                     f"{(j.get('throughput_vs_solo') or 0):.2f} | {j.get('delay_s', 0):.2f} | {j.get('loss', float('nan')):.3f} |")
    if report["errors"]:
        lines += ["", "Errors:", *[f"- {e}" for e in report["errors"]]]
    problems = report["problems"] if "problems" in report else verdict(report)
    lines += ["", "Not shown (exit status 1):", *[f"- {p}" for p in problems]] if problems else [
        "", "Shown: both jobs finished, sharing one pool below the sum of their solo reserved peaks, within the "
        "budget, bytes moving between the processes."]
    return "\n".join(lines) + "\n"


def _check_out(text: str) -> Path:
    """``--out`` as a path prefix: it names a file, not a folder, in a folder that exists and is writable
    (no folder is created: a typo in it would otherwise scatter reports). Raises UsageError."""
    out = Path(text)
    if not text.strip() or text.endswith(os.sep) or out.is_dir():
        raise UsageError(f"--out {text!r}: give a path prefix such as var/run1 (writes var/run1.json and .md), "
                         "not a folder")
    p = out.parent.absolute()
    if not p.is_dir():
        raise UsageError(f"--out {text!r}: no such folder {str(p)!r} (create it first, e.g. mkdir -p {str(p)!r})")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError(f"--out {text!r}: cannot write under {str(p)!r}")
    return out


def _known_failure(exc: BaseException) -> bool:
    """Errors that say what went wrong in their message (catalog, allocator, out of memory, files):
    printed as one line. Anything else is a bug and keeps its traceback."""
    kinds: list[type] = [ColocateError, OSError]
    try:
        from zico_workloads.catalog import ParamsError, UnknownWorkload

        kinds += [ParamsError, UnknownWorkload]
    except ImportError:
        pass
    for mod, name in (("zico_allocator", "ZicoError"), ("zico_allocator.build", "BuildError"),
                      ("torch", "OutOfMemoryError")):
        cls = getattr(sys.modules.get(mod), name, None)
        if isinstance(cls, type):
            kinds.append(cls)
    return isinstance(exc, tuple(kinds))


def _say(message: str) -> None:
    print("colocate: " + " ".join(message.splitlines()), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 ok; 1 the run failed, or it did not show sharing (:func:`verdict`: a job failed, the pool
    overran the budget, the budget was not below the sum of the solo reserved peaks, or no bytes moved between
    the job processes; each said on stderr); 2 bad input."""
    from workers.nvml import parse_bytes

    ap = argparse.ArgumentParser(prog="python -m tools.colocate", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--job", action="append", required=True,
                    help="workload[:name=value,...], repeat for each job (iterations: use --iterations)")
    ap.add_argument("--iterations", type=int, default=20, help="co-located iterations of every job")
    ap.add_argument("--budget-fraction", type=float, default=0.8,
                    help="budget = this x sum of solo peaks, in (0, 1]; raised to the feasible floor if below")
    ap.add_argument("--capacity", default=None, help="CPU pool capacity, e.g. 2GiB (cpu only)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--threads", type=int, default=1,
                    help="cpu: intra-op threads of each job (default 1: two jobs on shared cores with torch's "
                         "default thread count spin against each other; 0: torch's default)")
    ap.add_argument("--out", required=True, help="path prefix in an existing folder: writes <out>.json and <out>.md")
    a = ap.parse_args(argv)
    try:
        try:
            jobs = [parse_job(text) for text in a.job]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        try:
            capacity = None if a.capacity is None else parse_bytes(a.capacity)
        except ValueError as exc:
            raise UsageError(f"--capacity: {exc}") from None
        check_inputs(jobs, a.device, a.iterations, a.budget_fraction, capacity, a.data_dir)
        if a.threads < 0:
            raise UsageError(f"--threads must be an integer >= 0, got {a.threads}")
        out = _check_out(a.out)
        report = run(jobs, a.device, a.iterations, a.budget_fraction, capacity, a.data_dir,
                     threads=a.threads or None)
        out.with_suffix(".json").write_text(json.dumps(report, indent=2))
        out.with_suffix(".md").write_text(markdown(report))
    except UsageError as exc:
        _say(str(exc))
        return 2
    except Exception as exc:
        if not _known_failure(exc):
            raise  # a bug: keep its traceback
        _say(str(exc) if isinstance(exc, ColocateError) else f"{type(exc).__name__}: {exc}")
        return 1
    print(markdown(report))
    problems = report["problems"]
    for p in problems:
        _say(p)
    return 0 if not problems and not report["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
