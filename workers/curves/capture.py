"""The truest curve: a short profiling run of the real training job through the Zico allocator.

The job is bound to a Zico allocator job id, so every allocation of its thread (CPU, through the
CPU shim) or its stream (CUDA) is charged to it and lands in the allocator's trace with the job's
running allocated bytes. The training loop's marks go into the same trace
(``zico_allocator.mark``), the trace is drained after every iteration (the ring buffer never
overflows), and ``trace_curve`` cuts, skips warm-up and averages the steady iterations.

Note [Running totals, not deltas]
Each allocator record carries the job's allocated bytes after it, so the curve uses those running
totals: the bytes held before the trace started (the model built under the same binding) and any
records lost between drains cannot skew it.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from placement.curves import CurveError, MemoryCurve
from zico_workloads.curves.trace import Trace, check_iterations, trace_curve

PHASE_MARKS = ("forward", "backward", "optimizer")
_job_ids = itertools.count(900_000)  # profiling job ids, apart from the scheduler's job ids


class AllocatorMarks:
    """Forwards a training job's marks to ``zico_allocator.mark`` for ``job_id``."""

    def __init__(self, za, job_id: int):
        self._za, self.job_id, self._i = za, job_id, 0

    def iteration_start(self, i: int) -> None:
        self._i = i
        self._za.mark(self.job_id, "iteration_start", i)

    def phase(self, name: str) -> None:
        self._za.mark(self.job_id, name, self._i)

    def iteration_end(self, i: int) -> None:
        self._za.mark(self.job_id, "iteration_end", i)


def allocator_records_to_trace(records: Iterable[Any], job_id: int) -> Trace:
    """A :class:`Trace` of one job from ``zico_allocator.TraceRecord``s (see Note above).

    Raises CurveError when the records hold nothing of ``job_id``.
    """
    times, totals, marks = [], [], []
    first_before = None
    for r in records:
        if r.job != job_id:
            continue
        if r.kind in ("alloc", "free"):
            if first_before is None:
                first_before = r.job_allocated_bytes - r.delta_bytes
            times.append(r.timestamp_s)
            totals.append(r.job_allocated_bytes)
        elif r.kind in ("iteration_start", "iteration_end"):
            marks.append((r.timestamp_s, r.kind, r.iteration, None))
        elif r.kind in PHASE_MARKS:
            marks.append((r.timestamp_s, "phase", r.iteration, r.kind))
    if first_before is None:
        raise CurveError(f"trace: no allocation records of job {job_id}")
    totals_a = np.asarray(totals, dtype=np.float64)
    deltas = np.diff(np.concatenate([[first_before], totals_a]))
    return Trace(np.asarray(times, dtype=np.float64), deltas, float(first_before), marks)


class ProfileStopped(RuntimeError):
    """A profiling run was stopped between two iterations; the message says why (time limit, cancel)."""


def profile_trace(key: str, params: dict[str, Any] | None = None, device: str = "cpu",
                  data_dir: str | Path | None = None, *, iterations: int = 4, job_id: int | None = None,
                  stop: Callable[[int], str | None] | None = None) -> Trace:
    """Run ``iterations`` real iterations of catalog workload ``key`` on ``device`` through the Zico
    allocator and return the job's :class:`Trace` (see :func:`profile_curve`).

    ``stop(iterations_done)`` is called after each iteration; a non-empty reason it returns ends the run
    with :class:`ProfileStopped` (the job's memory is released first)."""
    import torch
    import zico_allocator as za

    from zico_workloads.models import preload_data
    from zico_workloads.training import create_training_job

    target = torch.device(device)
    if target.type == "cuda":
        if not za.is_installed(target):
            za.install_cuda(target.index or 0)
    else:  # installs the host pool and CPU shim if missing; (re)sets the shim to route bound threads
        za.install_cpu()
    job_id = next(_job_ids) if job_id is None else job_id
    # Datasets stay on the host and are loaded once per process: load them outside the binding,
    # so the curve holds what the job itself allocates (as the estimate counts it).
    preload_data(job_params(key, params), data_dir)
    records: list[Any] = []
    # CUDA: the job runs on a stream of its own, so the stream binding reaches the backward pass,
    # which allocates from autograd's device thread (the default stream is never bound; see bind).
    stream = torch.cuda.Stream(target) if target.type == "cuda" else None
    with (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()), za.bind(job_id):
        job = create_training_job(key, params, device=str(target), data_dir=data_dir)
        marks = AllocatorMarks(za, job_id)
        records.extend(za.drain_trace())
        reason = None
        for i in range(iterations):
            job.run_iteration(i, marks)
            if stream is not None:
                stream.synchronize()
            records.extend(za.drain_trace())
            reason = stop(i + 1) if stop is not None and i + 1 < iterations else None
            if reason:
                break
        del job
    if reason:
        za.drain_trace()
        raise ProfileStopped(reason)
    records.extend(za.drain_trace())
    return allocator_records_to_trace(records, job_id)


def profile_curve(key: str, params: dict[str, Any] | None = None, device: str = "cpu",
                  data_dir: str | Path | None = None, *, warmup: int = 1, steady: int = 3,
                  job_id: int | None = None, stop: Callable[[int], str | None] | None = None) -> MemoryCurve:
    """Run ``warmup + steady`` real iterations of catalog workload ``key`` on ``device`` through the
    Zico allocator and return its ``allocator-trace`` curve.

    Installs the allocator for the device if needed (CUDA: before any CUDA allocation in this
    process). Times are wall-clock seconds of the CPU thread.

    Raises:
        UnknownWorkload, ParamsError: bad key or params.
        zico_allocator.ZicoError: the allocator cannot be installed here.
        CurveError: the trace held no usable iteration.
        ProfileStopped: ``stop`` (see :func:`profile_trace`) ended the run early.
    """
    import torch

    check_iterations(warmup, steady)
    wall = time.perf_counter()
    trace = profile_trace(key, params, device, data_dir, iterations=warmup + steady, job_id=job_id, stop=stop)
    target = torch.device(device)
    label = f"cuda:{target.index or 0}" if target.type == "cuda" else "cpu"
    return trace_curve(trace, warmup=warmup, source="allocator-trace", device=label,
                       meta={"workload": key, "params": job_params(key, params),
                             "profile_s": round(time.perf_counter() - wall, 3), "torch": torch.__version__})


def job_params(key: str, params: dict[str, Any] | None) -> dict[str, Any]:
    from zico_workloads.catalog import validate_params

    return validate_params(key, params)
